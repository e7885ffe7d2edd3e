"""A run's summary: figures the trainer reports once or rarely (model complexity, time per step), and the
convergence times the tracker derives from its decisions."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from plateau_tracker.server.schemas._common import Schema, stored_json

MAX_SUMMARY_BYTES = 64 * 1024
SummaryKey = Annotated[str, Field(min_length=1, max_length=200)]


def _bounded(summary: dict[str, Any]) -> dict[str, Any]:
    # NaN and inf are data here too: spelled out, the way they are stored and read back.
    bounded: dict[str, Any] = stored_json(summary, max_bytes=MAX_SUMMARY_BYTES)
    return bounded


class SummaryUpdate(Schema):
    """Merge ``summary`` into the run's summary key by key; a key set to ``null`` is removed."""

    summary: Annotated[dict[SummaryKey, Any], AfterValidator(_bounded)] = Field(max_length=500)


class Convergence(Schema):
    """Wall-clock figures derived from the decisions and the points' timestamps (the trainer's clock),
    measured from the run's creation on the tracker."""

    monitor: str | None = None
    best_step: int | None = None
    best_value: float | None = None
    time_to_best_s: float | None = Field(default=None, description="run start to the best step's point")
    first_best_step: int | None = Field(
        default=None,
        description=(
            "the first step at the best value: where the run converged. best_step is the checkpoint to "
            "keep, later where a tie at that value with a lower validation loss moved it (tie_loss_key)"
        ),
    )
    time_to_first_best_s: float | None = Field(
        default=None, description="run start to the first best step's point: the time it took to converge"
    )
    stop_step: int | None = None
    time_to_stop_s: float | None = Field(default=None, description="run start to the stop step's point")
    duration_s: float | None = Field(default=None, description="run start to its end (or to its last point)")
    time_per_step_s: float | None = Field(
        default=None, description="median seconds per step: the SDK's step timer, else inferred"
    )
    time_per_step_source: str | None = Field(
        default=None, description="'step_timer', or the key whose timestamps it was inferred from"
    )


class RunSummaryPublic(Schema):
    run_id: int
    summary: dict[str, Any]
    convergence: Convergence


def finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None
