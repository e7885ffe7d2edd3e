"""Reading a run's metric streams back."""

from __future__ import annotations

import math
from contextlib import closing
from typing import Any

from pydantic_core import to_json
from sqlalchemy import select

from tracker.db import models
from tracker.db.engine import Database
from tracker.errors import NotFoundError
from tracker.schemas.metrics import KeysPublic
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
        )
        ranks: dict[str, list[int]] = {}
        for name, rank in pairs:
            ranks.setdefault(name, []).append(rank)
    ordered = sorted(ranks)
    return KeysPublic(run_id=run_id, keys=ordered, ranks={name: sorted(ranks[name]) for name in ordered})


def page_json(
    db: Database, run_id: int, key: str, *, rank: int, start_step: int, limit: int, columns: bool = False
) -> bytes:
    """Up to ``limit`` points of ``key`` on ``rank`` from ``start_step`` on, in step order, as JSON: a
    :class:`HistoryPage`, or with ``columns`` a :class:`HistoryColumns` (one list per field).

    Pages hold up to 100,000 points, so the rows come as the driver's own tuples and go to JSON in one
    pydantic-core call (NaN and +-inf spelled as the schemas spell them), not through a model per point.
    """
    with db.session() as session:
        get_run_row(session, run_id)
        key_id = session.execute(select(models.MetricKey.id).where(models.MetricKey.name == key)).scalar()
        if key_id is None:
            raise NotFoundError(f"metric key {key!r} has no points in run {run_id}")
        where = (
            "run_id = :run AND key_id = :key AND rank = :rank AND step >= :start ORDER BY step LIMIT :limit"
            if db.is_sqlite
            else "run_id = %(run)s AND key_id = %(key)s AND rank = %(rank)s AND step >= %(start)s "
            "ORDER BY step LIMIT %(limit)s"
        )
        # The driver's own cursor gives plain tuples: no row object per point.
        with closing(session.connection().connection.cursor()) as cursor:
            cursor.execute(
                f"SELECT step, value, wall_time FROM metric_point WHERE {where}",
                {"run": run_id, "key": key_id, "rank": rank, "start": start_step, "limit": limit + 1},
            )
            rows = list(cursor.fetchall())
    next_step = rows.pop()[0] if len(rows) > limit else None
    body: dict[str, Any] = {"run_id": run_id, "key": key, "rank": rank}
    if columns:
        # One comprehension per column: zip(*rows) over 100,000 rows is several times slower.
        steps = [row[0] for row in rows]
        values = [row[1] for row in rows]
        wall_times = [row[2] for row in rows]
        if None in values:  # SQLite's NaN
            values = [math.nan if value is None else value for value in values]
        body |= {"steps": steps, "values": values, "wall_times": wall_times}
    else:
        body["points"] = [
            {"step": step, "value": math.nan if value is None else value, "wall_time": wall_time}
            for step, value, wall_time in rows
        ]
    body["next_step"] = next_step
    return to_json(body, inf_nan_mode="strings")
