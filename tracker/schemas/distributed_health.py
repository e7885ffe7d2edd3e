"""A run's distributed health as the API shows it."""

from __future__ import annotations

from pydantic import Field

from plateau_tracker.server.schemas._common import MetricValue, Schema
from plateau_tracker.server.schemas.decisions import DecisionPublic


class RankHealth(Schema):
    """Medians over a rank's last reports of each ``dist/`` figure (absent when never reported)."""

    rank: int
    reports: int
    figures: dict[str, MetricValue]


class StragglerVerdict(Schema):
    rank: int
    relative_performance: MetricValue
    bound: float
    reason: str


class DistributedHealthPublic(Schema):
    run_id: int
    world_size: int
    ranks: list[RankHealth]
    straggler: StragglerVerdict | None = Field(description="the slowest rank, if below the bound")
    staleness_histogram: dict[int, dict[str, float]] = Field(
        description="per worker: update counts by staleness bin (lower bound of [lo, 2lo))"
    )
    alerts: list[DecisionPublic]
