"""Curves for drawing: a key's points, downsampled by min/max buckets so a long run draws fast.

The points between the first and the last are cut into equal-count buckets; each keeps its lowest and its
highest value (NaN left out, unless a bucket holds nothing else), in step order, and the first and last
points are always kept. The extremes a reader looks for (spikes, the best value) survive; at most
``limit`` points come back.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from contextlib import closing
from typing import Any

import numpy as np
from sqlalchemy import select

from tracker.db import models
from tracker.db.engine import Database
from tracker.db.models import BLOCK_STEPS
from tracker.errors import NotFoundError
from tracker.schemas.metrics import PointOut, SeriesPublic
from tracker.services.decisions import get_run_row


def select_indexes(values: np.ndarray, limit: int) -> np.ndarray:
    """Indexes of the points to keep (sorted): first, last, and each bucket's min and max."""
    n = len(values)
    if n <= limit:
        return np.arange(n)
    if limit < 4:  # no room for a bucket's min and max: keep the interior point farthest from the first
        interior = np.abs(np.nan_to_num(values[1:-1] - values[0], nan=-1.0))
        extra = [1 + int(np.argmax(interior))] if limit == 3 and n > 2 else []
        return np.array(sorted({0, n - 1, *extra}), dtype=np.int64)[:limit]
    buckets = (limit - 2) // 2
    edges = np.linspace(1, n - 1, buckets + 1).astype(np.int64)
    keep = [0, n - 1]
    for lo, hi in itertools.pairwise(edges):
        if hi <= lo:
            continue
        chunk = values[lo:hi]
        finite = ~np.isnan(chunk)
        if not finite.any():
            keep.append(int(lo))
            continue
        masked_low = np.where(finite, chunk, np.inf)
        masked_high = np.where(finite, chunk, -np.inf)
        keep += [int(lo + np.argmin(masked_low)), int(lo + np.argmax(masked_high))]
    return np.unique(np.array(keep, dtype=np.int64))


def series(db: Database, run_id: int, key: str, *, rank: int, limit: int) -> SeriesPublic:
    with db.session() as session:
        get_run_row(session, run_id)
        key_id = session.execute(select(models.MetricKey.id).where(models.MetricKey.name == key)).scalar()
        if key_id is None:
            raise NotFoundError(f"metric key {key!r} has no points in run {run_id}")
        connection = session.connection()
        params = {"run": run_id, "key": key_id, "rank": rank}
        sqlite = session.get_bind().dialect.name == "sqlite"  # else PostgreSQL
        where = (
            "run_id = :run AND key_id = :key AND rank = :rank"
            if sqlite
            else "run_id = %(run)s AND key_id = %(key)s AND rank = %(rank)s"
        )
        # The block summaries ingest keeps: the count without walking the points, and, for a long
        # curve, its extremes (one row per BLOCK_STEPS steps).
        blocks = connection.exec_driver_sql(
            "SELECT block, points, first_step, first_wall, min_value, min_step, min_wall, max_value, "
            f"max_step, max_wall FROM series_block WHERE {where} ORDER BY block",
            params,
        ).fetchall()
        total = sum(block[1] for block in blocks)
        rows: Sequence[Any]
        if total > limit and limit >= 4:
            first = blocks[0][2]
            last_sql = f"SELECT MAX(step) FROM metric_point WHERE {where}"  # one seek
            last = int(connection.exec_driver_sql(last_sql, params).scalar_one())
            buckets = (limit - 2) // 2
            if last // BLOCK_STEPS - first // BLOCK_STEPS + 1 >= buckets:  # a bucket spans whole blocks
                rows = _buckets_from_blocks(connection, where, params, blocks, last, buckets, sqlite=sqlite)
            else:
                rows = _buckets_in_sql(connection, where, params, first, last, limit, sqlite=sqlite)
        else:
            # Raw tuples through the driver: a million ORM rows would cost seconds.
            rows = connection.exec_driver_sql(
                f"SELECT step, value, wall_time FROM metric_point WHERE {where} ORDER BY step", params
            ).fetchall()
    values = np.fromiter(
        (math.nan if r[1] is None else r[1] for r in rows), dtype=np.float64, count=len(rows)
    )
    chosen = select_indexes(values, limit) if len(rows) > limit else np.arange(len(rows))
    points = [PointOut(step=rows[i][0], value=values[i], wall_time=rows[i][2]) for i in chosen.tolist()]
    return SeriesPublic(
        run_id=run_id, key=key, rank=rank, total=total, downsampled=len(points) < total, points=points
    )


def _buckets_from_blocks(
    connection: Any,
    where: str,
    params: dict[str, int],
    blocks: Sequence[Any],
    last: int,
    buckets: int,
    *,
    sqlite: bool,
) -> list[Any]:
    """Min/max buckets made of whole blocks, from the block summaries: each bucket keeps the lowest and the
    highest value of its blocks (its first point, NaN, when it holds nothing else), plus the curve's first
    and last points."""
    first_block = blocks[0][0]
    span = last // BLOCK_STEPS - first_block + 1  # blocks from the first to the last, held or not
    picked: dict[int, Any] = {}
    for _, group in itertools.groupby(blocks, key=lambda block: (block[0] - first_block) * buckets // span):
        members = list(group)
        finite = [block for block in members if block[4] is not None]
        if not finite:
            picked[members[0][2]] = (members[0][2], None, members[0][3])
            continue
        low = min(finite, key=lambda block: block[4])
        high = max(finite, key=lambda block: block[7])
        picked[low[5]] = (low[5], low[4], low[6])
        picked[high[8]] = (high[8], high[7], high[9])
    _add_ends(connection, where, params, blocks[0][2], last, picked, sqlite=sqlite)
    return [picked[step] for step in sorted(picked)]


def _add_ends(
    connection: Any,
    where: str,
    params: dict[str, int],
    first: int,
    last: int,
    picked: dict[int, Any],
    *,
    sqlite: bool,
) -> None:
    """The curve's first and last points always come back."""
    one = f"SELECT step, value, wall_time FROM metric_point WHERE {where} AND " + (
        "step = :step" if sqlite else "step = %(step)s"
    )
    for step in (first, last):
        picked[step] = tuple(connection.exec_driver_sql(one, {**params, "step": step}).one())


def _buckets_in_sql(
    connection: Any, where: str, params: dict[str, int], first: int, last: int, limit: int, *, sqlite: bool
) -> list[Any]:
    """Min/max buckets over step ranges computed by the database, so the rows never leave it.

    SQLite returns, for a lone min() or max() aggregate, the other columns of the row that holds it;
    PostgreSQL picks that row with ``DISTINCT ON``. NaN is left out (SQLite stores it as NULL; PostgreSQL
    sorts it above every number).
    """
    buckets = (limit - 2) // 2
    width = max(1, -(-(last - first + 1) // buckets))
    picked: dict[int, Any] = {}
    if sqlite:
        # One primary-key range per bucket and aggregate: SQLite cannot see that the bucket number grows
        # with the step, so a GROUP BY over it sorts every row first (~3x slower on a million points).
        for agg in ("MIN", "MAX"):
            query = (
                f"SELECT {agg}(value), step, value, wall_time FROM metric_point WHERE {where} "
                "AND step >= :low AND step < :high AND value IS NOT NULL"
            )
            # The driver's own cursor: ~1,000 statements, no wrapping.
            with closing(connection.connection.cursor()) as cursor:
                for low in range(first, last + 1, width):
                    row = cursor.execute(query, {**params, "low": low, "high": low + width}).fetchone()
                    if row[0] is not None:
                        picked[row[1]] = tuple(row[1:])
    else:
        inner = (
            "SELECT (step - %(first)s) / %(width)s AS bucket, step, value, wall_time FROM metric_point "
            f"WHERE {where} AND value IS NOT NULL AND value <> 'NaN'::float8"
        )
        queries = [
            f"SELECT DISTINCT ON (bucket) bucket, step, value, wall_time FROM ({inner}) AS t "
            f"ORDER BY bucket, value {order}"
            for order in ("ASC", "DESC")
        ]
        bucket_params = {**params, "first": first, "width": width}
        for query in queries:
            for _, step, value, wall_time in connection.exec_driver_sql(query, bucket_params):
                picked[step] = (step, value, wall_time)
    _add_ends(connection, where, params, first, last, picked, sqlite=sqlite)
    return [picked[step] for step in sorted(picked)]
