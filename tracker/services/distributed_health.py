"""Summarising a run's distributed health from its ``dist/`` series and alert decisions."""

from __future__ import annotations

import math
import statistics

from sqlalchemy import select

from plateau_tracker.server.db import models
from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.schemas.distributed_health import (
    DistributedHealthPublic,
    RankHealth,
    StragglerVerdict,
)
from plateau_tracker.server.services import _point_store
from plateau_tracker.server.services.convert import decision_public
from plateau_tracker.server.services.run_rows import get_run_row

HIST_PREFIX = "dist/staleness_hist/"
STRAGGLER_BOUND = 0.75


def summary(db: Database, run_id: int, *, last: int = 20) -> DistributedHealthPublic:
    """Per rank, the median of the last ``last`` reports of each ``dist/`` figure; the straggler verdict
    (the rank with the lowest median relative performance, if below the straggler rule's bound); the
    staleness histogram per worker; and the run's alerts."""
    with db.session() as session:
        run = get_run_row(session, run_id)
        mk = models.MetricKey
        stored = {key_id for key_id, _, _ in _point_store.series_of(session, run_id)}
        rows_keys = session.execute(select(mk.id, mk.name).where(mk.name.like("dist/%"), mk.id.in_(stored)))
        keys = {key_id: name for key_id, name in rows_keys}
        per_rank: dict[int, dict[str, list[float]]] = {}
        histogram: dict[int, dict[str, float]] = {}
        for key_id, name in keys.items():
            for rank, points in _point_store.read_ranks(session, run_id, key_id).items():
                if name.startswith(HIST_PREFIX):
                    histogram.setdefault(rank, {})[name[len(HIST_PREFIX) :]] = math.fsum(
                        points.values.tolist()
                    )
                else:
                    # The newest `last` reports of each rank (ranks report at different rates).
                    per_rank.setdefault(rank, {})[name] = points.values[-last:].tolist()
        alerts = [
            decision_public(row)
            for row in session.execute(
                select(models.Decision)
                .where(models.Decision.run_id == run_id, models.Decision.action == "alert")
                .order_by(models.Decision.seq)
            ).scalars()
        ]
        world_size = run.world_size
        bound = _straggler_bound(run.policy)
    ranks = [
        RankHealth(
            rank=rank,
            reports=max(len(v) for v in figures.values()),
            figures={name: statistics.median(values) for name, values in sorted(figures.items())},
        )
        for rank, figures in sorted(per_rank.items())
    ]
    return DistributedHealthPublic(
        run_id=run_id,
        world_size=world_size,
        ranks=ranks,
        straggler=_straggler(ranks, bound),
        staleness_histogram={
            rank: dict(sorted(bins.items(), key=lambda kv: int(kv[0])))
            for rank, bins in sorted(histogram.items())
        },
        alerts=alerts,
    )


def _straggler_bound(policy: dict[str, object] | None) -> float:
    rules = policy.get("rules") if policy else None
    for rule in rules if isinstance(rules, list) else []:
        if isinstance(rule, dict) and rule.get("rule") == "straggler":
            return float(rule.get("bound", STRAGGLER_BOUND))
    return STRAGGLER_BOUND


def _straggler(ranks: list[RankHealth], bound: float) -> StragglerVerdict | None:
    rated = [(r.figures["dist/rel_perf"], r) for r in ranks if "dist/rel_perf" in r.figures]
    if len(rated) < 2:
        return None
    value, slowest = min(rated, key=lambda pair: pair[0])
    if not value < bound:
        return None
    waits = {r.rank: r.figures.get("dist/sync_wait_ms") for _, r in rated}
    return StragglerVerdict(
        rank=slowest.rank,
        relative_performance=value,
        bound=bound,
        reason=(
            f"rank {slowest.rank} is the straggler: median relative performance {value:.2f} < {bound:g}; "
            f"median sync-wait by rank (ms): "
            + ", ".join(f"{rank}: {wait:.1f}" for rank, wait in waits.items() if wait is not None)
        ),
    )
