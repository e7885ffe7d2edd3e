"""Metric points in (ingest) and out (history)."""

from __future__ import annotations

from pydantic import Field, StrictInt

from tracker.schemas._common import MetricValue, Schema
from tracker.schemas.decisions import DecisionPublic

MAX_POINTS_PER_BATCH = 100_000


class PointIn(Schema):
    """One value: ``key`` at ``step`` on ``rank``. ``wall_time`` is seconds since the epoch (the server's
    clock when absent)."""

    key: str = Field(min_length=1, max_length=250)
    step: StrictInt = Field(ge=0, le=2**62)
    value: MetricValue
    rank: StrictInt = Field(default=0, ge=0, le=100_000)
    wall_time: float | None = Field(default=None, allow_inf_nan=False)


class MetricBatch(Schema):
    """A batch of points. A ``batch_id`` seen before for this run is acknowledged and not applied again."""

    batch_id: str = Field(min_length=1, max_length=64)
    points: list[PointIn] = Field(max_length=MAX_POINTS_PER_BATCH)


class IngestResult(Schema):
    """``accepted``: points newly stored; ``duplicates``: points already stored (a replayed batch, or a
    key/rank/step logged before: the first value is kept). ``decision``: the run's latest decision."""

    accepted: int
    duplicates: int
    replayed: bool = False
    decision: DecisionPublic


class PointOut(Schema):
    step: int
    value: MetricValue
    wall_time: float


class HistoryPage(Schema):
    """One page of a key's history in step order; ask again with ``start_step=next_step`` for more."""

    run_id: int
    key: str
    rank: int
    points: list[PointOut]
    next_step: int | None


class KeysPublic(Schema):
    run_id: int
    keys: list[str]
    ranks: dict[str, list[int]] = Field(
        default_factory=dict, description="the ranks each key has points from"
    )


class SeriesPublic(Schema):
    """A key's curve for drawing: all points, or at most ``points`` of them chosen by min/max buckets."""

    run_id: int
    key: str
    rank: int
    total: int = Field(description="points stored for the key")
    downsampled: bool
    points: list[PointOut]
