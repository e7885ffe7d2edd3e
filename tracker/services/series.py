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
from typing import Any

import numpy as np
from pydantic_core import to_json
from sqlalchemy import select
from sqlalchemy.orm import Session

from plateau_tracker.server.db import models
from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.errors import NotFoundError
from plateau_tracker.server.services import _point_store, block_format
from plateau_tracker.server.services.run_rows import get_run_row


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


def series_json(db: Database, run_id: int, key: str, *, rank: int, limit: int) -> bytes:
    """A :class:`~tracker.schemas.metrics.SeriesPublic` of ``key`` on ``rank``, at most ``limit`` points, as
    JSON bytes."""
    with db.session() as session:
        get_run_row(session, run_id)
        key_id = session.execute(select(models.MetricKey.id).where(models.MetricKey.name == key)).scalar()
        if key_id is None:
            raise NotFoundError(f"metric key {key!r} has no points in run {run_id}")
        mb = models.MetricBlock
        in_series = (mb.run_id == run_id, mb.key_id == key_id, mb.rank == rank)
        # The block summaries ingest keeps: the count without decoding any point, and, for a long curve,
        # its extremes (one row per BLOCK_STEPS steps). Only what choosing needs is read for every block;
        # the steps and wall times of the chosen extremes are read for those blocks alone.
        series_id = (run_id, key_id, rank)
        blocks = _summaries(session, db.is_sqlite, series_id)
        total = sum(block[1] for block in blocks)
        buckets = (limit - 2) // 2
        if total > limit and limit >= 4 and len(blocks) >= buckets:  # a bucket spans whole blocks
            extreme_blocks = _buckets_from_blocks(blocks, buckets)
            picked = _extremes(session, db.is_sqlite, series_id, extreme_blocks)
            ends = session.execute(
                select(mb.step_data, mb.value_data, mb.wall_data)
                .where(*in_series, mb.block.in_((blocks[0][0], blocks[-1][0])))
                .order_by(mb.block)
            ).all()
            curve = block_format.unpack(ends)
            for index in (0, len(curve) - 1):  # the curve's first and last points always come back
                picked[int(curve.steps[index])] = (
                    int(curve.steps[index]),
                    float(curve.values[index]),
                    float(curve.wall_times[index]),
                )
            rows = [picked[step] for step in sorted(picked)]
        else:
            curve = _point_store.read_series(session, run_id, key_id, rank)
            chosen = select_indexes(curve.values, limit) if len(curve) > limit else np.arange(len(curve))
            rows = list(
                zip(
                    curve.steps[chosen].tolist(),
                    curve.values[chosen].tolist(),
                    curve.wall_times[chosen].tolist(),
                    strict=True,
                )
            )
    # Straight to JSON in one pydantic-core call (NaN and +-inf spelled as the schemas spell them), as the
    # history pages are: a PointOut per point, validated again as the route's response, cost more than
    # choosing 2,000 points from 10,000,000.
    body = {
        "run_id": run_id,
        "key": key,
        "rank": rank,
        "total": total,
        "downsampled": len(rows) < total,
        "points": [{"step": step, "value": value, "wall_time": wall} for step, value, wall in rows],
    }
    return to_json(body, inf_nan_mode="strings")


def _summaries(session: Session, sqlite: bool, series_id: tuple[int, int, int]) -> list[Any]:
    """``(block, points, min_value, max_value)`` of every block of the series, in block order, through the
    driver's own cursor (from the covering index ``ix_metric_block_summary``): for a 10,000,000-point
    series these are 39,000 rows, and SQLAlchemy's rows cost twice the query."""
    return _point_store.driver_rows(session, "block, points, min_value, max_value", series_id, sqlite=sqlite)


def _buckets_from_blocks(blocks: Sequence[Any], buckets: int) -> list[tuple[str, int]]:
    """Min/max buckets made of whole blocks, from the summaries ``(block, points, min, max)``: for each
    bucket, the block holding its lowest value and the one holding its highest (``("min", block)``,
    ``("max", block)``; on ties the earliest block), or its first block (``("first", block)``) when it
    holds nothing but NaN. In arrays: at 10,000,000 points these are 39,000 summaries, and a Python loop
    over them cost a quarter of the whole read."""
    # Block numbers stay integers (past 2^53 a float would merge them); a block of nothing but NaN has NULL
    # extremes, NaN here.
    block = np.fromiter((row[0] for row in blocks), dtype=np.int64, count=len(blocks))
    extremes = np.array([row[2:4] for row in blocks], dtype=np.float64)
    lows, highs = extremes[:, 0], extremes[:, 1]
    first_block, span = int(block[0]), int(block[-1]) - int(block[0]) + 1  # blocks from first to last
    offsets = block - first_block
    if span * buckets < 2**62:
        bucket = offsets * buckets // span  # nondecreasing: the summaries come in block order
    else:  # steps near 2^62 apart: the product would overflow int64, so in Python's integers
        bucket = np.array([offset * buckets // span for offset in offsets.tolist()], dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    empty = np.isnan(lows)
    held = np.logical_or.reduceat(~empty, starts)
    order = np.arange(len(block))
    # Sorted by bucket, then value (a NaN block last), then block: each bucket's first row is its extreme.
    lowest = np.lexsort((order, empty, np.where(empty, np.inf, lows), bucket))[starts]
    highest = np.lexsort((order, empty, np.where(empty, np.inf, -highs), bucket))[starts]
    chosen: list[tuple[str, int]] = []
    for start, has_value, low, high in zip(starts, held, lowest, highest, strict=True):
        if has_value:
            chosen += [("min", int(block[low])), ("max", int(block[high]))]
        else:
            chosen.append(("first", int(block[start])))
    return chosen


def _extremes(
    session: Session, sqlite: bool, series_id: tuple[int, int, int], chosen: list[tuple[str, int]]
) -> dict[int, Any]:
    """step -> (step, value, wall_time) of each chosen block's extreme (or first point), read from the
    covering index through the driver's own cursor."""
    rows = _point_store.driver_rows(
        session,
        "block, first_step, first_wall, min_value, min_step, min_wall, max_value, max_step, max_wall",
        series_id,
        sqlite=sqlite,
        blocks=sorted({block for _, block in chosen}),
    )
    by_block: dict[int, Any] = {row[0]: row for row in rows}  # a min or max block holds a finite value
    picked: dict[int, Any] = {}
    for kind, block in chosen:
        _, first_step, first_wall, low, low_step, low_wall, high, high_step, high_wall = by_block[block]
        if kind == "first":
            picked[first_step] = (first_step, math.nan, first_wall)
        elif kind == "min":
            picked[low_step] = (low_step, low, low_wall)
        else:
            picked[high_step] = (high_step, high, high_wall)
    return picked
