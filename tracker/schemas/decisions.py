"""Decisions as the API shows them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from plateau_tracker.server.schemas._common import MetricValue, Schema


class DecisionPublic(Schema):
    """The tracker's verdict for a run: ``continue``, ``checkpoint`` or ``stop``, why, and the evidence.
    ``alert`` decisions (a straggler, stale gradients) inform people and webhooks; trainers ignore them.

    ``seq`` orders a run's decisions (0: none yet). ``judged`` is false when a step-exact request timed out
    before the tracker had judged that step; the decision returned is then the latest one.
    """

    seq: int
    action: Literal["continue", "checkpoint", "stop", "alert"]
    step: int | None = None
    best_step: int | None = None
    best_value: MetricValue | None = None
    rule: str | None = None
    reason: str = ""
    evidence: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime | None = None
    judged: bool = True


class DecisionsPublic(Schema):
    data: list[DecisionPublic]
    count: int
