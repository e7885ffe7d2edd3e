"""Reading a run's metric streams back."""

from __future__ import annotations

import math

from sqlalchemy import select

from tracker.db import models
from tracker.db.engine import Database
from tracker.errors import NotFoundError
from tracker.schemas.metrics import HistoryPage, KeysPublic, PointOut
from tracker.services.decisions import get_run_row


def keys(db: Database, run_id: int) -> KeysPublic:
    """The metric keys the run has points for, sorted, with the ranks each key has points from."""
    mp = models.MetricPoint
    with db.session() as session:
        get_run_row(session, run_id)
        pairs = session.execute(
            select(models.MetricKey.name, mp.rank)
            .join(models.MetricKey, models.MetricKey.id == mp.key_id)
            .where(mp.run_id == run_id)
            .distinct()
        ).tuples()
        ranks: dict[str, list[int]] = {}
        for name, rank in pairs:
            ranks.setdefault(name, []).append(rank)
    ordered = sorted(ranks)
    return KeysPublic(run_id=run_id, keys=ordered, ranks={name: sorted(ranks[name]) for name in ordered})


def page(db: Database, run_id: int, key: str, *, rank: int, start_step: int, limit: int) -> HistoryPage:
    """Up to ``limit`` points of ``key`` on ``rank`` from ``start_step`` on, in step order."""
    with db.session() as session:
        get_run_row(session, run_id)
        key_id = session.execute(select(models.MetricKey.id).where(models.MetricKey.name == key)).scalar()
        if key_id is None:
            raise NotFoundError(f"metric key {key!r} has no points in run {run_id}")
        mp = models.MetricPoint
        rows = session.execute(
            select(mp.step, mp.value, mp.wall_time)
            .where(mp.run_id == run_id, mp.key_id == key_id, mp.rank == rank, mp.step >= start_step)
            .order_by(mp.step)
            .limit(limit + 1)
        ).tuples()
        points = [
            PointOut(step=step, value=math.nan if value is None else value, wall_time=wall_time)
            for step, value, wall_time in rows
        ]
    next_step = points.pop().step if len(points) > limit else None
    return HistoryPage(run_id=run_id, key=key, rank=rank, points=points, next_step=next_step)
