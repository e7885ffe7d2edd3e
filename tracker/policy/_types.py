"""The values that flow through the policy engine. Plain, frozen, serialisable."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

Mode = Literal["min", "max"]
Action = Literal["continue", "checkpoint", "stop"]
Ties = Literal["wait", "improve"]


@dataclass(frozen=True)
class Observation:
    """One value of the monitored metric at one step. Time comes in as data: rules read no clock."""

    step: int
    value: float
    wall_time: float


@dataclass(frozen=True)
class Verdict:
    """What a rule decided at a step, with a sentence for people and evidence for machines."""

    action: Action
    rule: str
    step: int
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)
    best_step: int | None = None
    best_value: float | None = None


def fmt(value: float | None) -> str:
    """A metric value as people read it: 6 significant digits, NaN and inf spelled out."""
    if value is None:
        return "none"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.6g}"
