"""Points, packed per series and block of steps (``metric_block``): storing a batch's new points, and
reading series back as numpy arrays.

Ingest holds the run's lock, so a block is read, extended and written back without a race. Most batches
only extend a series (their steps follow the stored ones): then the stored arrays are not even decoded,
the new points' bytes are appended to them. Plain driver SQL on this path: at hundreds of thousands of
points a second the ORM's per-row work would cost more than the database's.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tracker.db import models
from tracker.db.models import BLOCK_STEPS

# The points of a batch, per series: (key_id, rank) -> step -> (value, wall_time).
SeriesPoints = Mapping[tuple[int, int], dict[int, tuple[float, float]]]

_LITTLE_ENDIAN = sys.byteorder == "little"
_STEP_DTYPE = np.dtype("<i8")
_FLOAT_DTYPE = np.dtype("<f8")

# One block's summary, in the order of SUMMARY_COLUMNS; the min and max fields are None while the block
# has no value but NaN. (Revision 0006 uses these two names as they were then: keep them stable.)
Summary = list[Any]

SUMMARY_COLUMNS = (
    "points",
    "first_step",
    "first_wall",
    "min_value",
    "min_step",
    "min_wall",
    "max_value",
    "max_step",
    "max_wall",
)
_BLOCK_COLUMNS = ("run_id", "key_id", "rank", "block", *SUMMARY_COLUMNS, "last_step")
_DATA_COLUMNS = ("step_data", "value_data", "wall_data")
_ALL_COLUMNS = (*_BLOCK_COLUMNS, *_DATA_COLUMNS)
_MARKS = {"sqlite": "?", "postgresql": "%s"}
# Every column but the key is replaced: the row is rewritten whole from what was read under the lock.
_UPSERT = {
    dialect: f"INSERT INTO metric_block ({', '.join(_ALL_COLUMNS)}) "
    f"VALUES ({', '.join([mark] * len(_ALL_COLUMNS))}) "
    "ON CONFLICT (run_id, key_id, rank, block) DO UPDATE SET "
    + ", ".join(f"{column} = excluded.{column}" for column in _ALL_COLUMNS[4:])
    for dialect, mark in _MARKS.items()
}
# How many series one read of stored blocks asks for (one OR term each; each term is a key range).
_SERIES_PER_READ = 100


def pack_steps(steps: Iterable[int]) -> bytes:
    """Steps as stored: little-endian int64."""
    packed = array("q", steps)
    if not _LITTLE_ENDIAN:
        packed.byteswap()
    return packed.tobytes()


def pack_floats(numbers: Iterable[float]) -> bytes:
    """Values or wall times as stored: little-endian float64."""
    packed = array("d", numbers)
    if not _LITTLE_ENDIAN:
        packed.byteswap()
    return packed.tobytes()


@dataclass(frozen=True)
class Points:
    """A series' points in step order, as three numpy arrays of the same length."""

    steps: np.ndarray
    values: np.ndarray
    wall_times: np.ndarray

    def __len__(self) -> int:
        return len(self.steps)

    def between(self, first: int | None, last: int | None) -> Points:
        """The points with ``first <= step <= last`` (an open end when None)."""
        lo = 0 if first is None else int(np.searchsorted(self.steps, first, side="left"))
        hi = len(self.steps) if last is None else int(np.searchsorted(self.steps, last, side="right"))
        if lo == 0 and hi == len(self.steps):
            return self
        return Points(self.steps[lo:hi], self.values[lo:hi], self.wall_times[lo:hi])

    def tail(self, count: int) -> Points:
        """The last ``count`` points."""
        if count >= len(self.steps):
            return self
        start = len(self.steps) - count
        return Points(self.steps[start:], self.values[start:], self.wall_times[start:])


EMPTY = Points(np.empty(0, _STEP_DTYPE), np.empty(0, _FLOAT_DTYPE), np.empty(0, _FLOAT_DTYPE))


def unpack(rows: Sequence[Sequence[Any]]) -> Points:
    """The points of block rows ``(step_data, value_data, wall_data)`` given in block order."""
    if not rows:
        return EMPTY
    return Points(
        np.frombuffer(b"".join(row[0] for row in rows), _STEP_DTYPE),
        np.frombuffer(b"".join(row[1] for row in rows), _FLOAT_DTYPE),
        np.frombuffer(b"".join(row[2] for row in rows), _FLOAT_DTYPE),
    )


# --- writing ----------------------------------------------------------------------------------------


def store(session: Session, run_id: int, series: SeriesPoints) -> None:
    """Store a batch's points for the run, whose lock the caller holds.

    Against the store the first value of a step wins: the steps held already are deleted from
    ``series``' own dicts, so afterwards it holds exactly the points that were new. Series left empty stay
    in ``series`` (empty).
    """
    wanted: dict[tuple[int, int, int], list[int]] = {}
    for (key_id, rank), points in series.items():
        for step in points:
            block = step // BLOCK_STEPS
            steps = wanted.get((key_id, rank, block))
            if steps is None:
                wanted[(key_id, rank, block)] = [step]
            else:
                steps.append(step)
    if not wanted:
        return
    connection = session.connection()
    dialect = connection.dialect.name
    stored = _stored_blocks(connection, dialect, run_id, wanted)
    rows = []
    for (key_id, rank, block), steps in wanted.items():
        points = series[(key_id, rank)]
        row = stored.get((key_id, rank, block))
        steps.sort()
        if row is not None and steps[0] <= row[9]:  # some steps at or before the block's last: check them
            held = set(np.frombuffer(row[10], _STEP_DTYPE).tolist())
            for step in held.intersection(steps):
                del points[step]
            steps = [step for step in steps if step not in held]
            if not steps:
                continue
        rows.append(_block_row(run_id, key_id, rank, block, steps, points, row))
    if rows:
        connection.exec_driver_sql(_UPSERT[dialect], rows)


def _stored_blocks(
    connection: Any, dialect: str, run_id: int, wanted: Mapping[tuple[int, int, int], object]
) -> dict[tuple[int, int, int], tuple[Any, ...]]:
    """The stored rows of the blocks ``wanted`` touches (key_id, rank, block) -> row in _ALL_COLUMNS'
    order from ``points`` on: one statement per ``_SERIES_PER_READ`` series, one key range per series."""
    ranges: dict[tuple[int, int], list[int]] = {}
    for key_id, rank, block in wanted:
        span = ranges.get((key_id, rank))
        if span is None:
            ranges[(key_id, rank)] = [block, block]
        elif block < span[0]:
            span[0] = block
        elif block > span[1]:
            span[1] = block
    mark = _MARKS[dialect]
    term = f"(key_id = {mark} AND rank = {mark} AND block BETWEEN {mark} AND {mark})"
    pairs = list(ranges.items())
    stored: dict[tuple[int, int, int], tuple[Any, ...]] = {}
    for start in range(0, len(pairs), _SERIES_PER_READ):
        chunk = pairs[start : start + _SERIES_PER_READ]
        params: list[Any] = [run_id]
        for (key_id, rank), (low, high) in chunk:
            params += (key_id, rank, low, high)
        sql = (
            f"SELECT {', '.join(_ALL_COLUMNS[1:])} FROM metric_block WHERE run_id = {mark} AND ("
            + " OR ".join([term] * len(chunk))
            + ")"
        )
        for row in connection.exec_driver_sql(sql, tuple(params)):
            stored[(row[0], row[1], row[2])] = tuple(row[3:])
    return stored


def _block_row(
    run_id: int,
    key_id: int,
    rank: int,
    block: int,
    steps: list[int],
    points: Mapping[int, tuple[float, float]],
    stored: tuple[Any, ...] | None,
) -> tuple[Any, ...]:
    """The block's row with the new ``steps`` (sorted, none of them stored) of ``points`` added to the
    ``stored`` row (summary, last step, data; None for a new block)."""
    new_values = [points[step][0] for step in steps]
    new_walls = [points[step][1] for step in steps]
    summary = summarise_block(steps, new_values, new_walls)
    if stored is None:
        data = (pack_steps(steps), pack_floats(new_values), pack_floats(new_walls))
        return (run_id, key_id, rank, block, *summary, steps[-1], *data)
    summary = combine(list(stored[:9]), summary)
    last_step = stored[9]
    if steps[0] > last_step:  # the common case: the batch extends the block
        data = (
            stored[10] + pack_steps(steps),
            stored[11] + pack_floats(new_values),
            stored[12] + pack_floats(new_walls),
        )
        return (run_id, key_id, rank, block, *summary, steps[-1], *data)
    # Steps arriving out of order: merge them in, keeping step order.
    all_steps = np.concatenate([np.frombuffer(stored[10], _STEP_DTYPE), np.array(steps, _STEP_DTYPE)])
    order = np.argsort(all_steps, kind="stable")
    values = np.concatenate([np.frombuffer(stored[11], _FLOAT_DTYPE), np.array(new_values, _FLOAT_DTYPE)])
    walls = np.concatenate([np.frombuffer(stored[12], _FLOAT_DTYPE), np.array(new_walls, _FLOAT_DTYPE)])
    data = (
        all_steps[order].astype(_STEP_DTYPE).tobytes(),
        values[order].astype(_FLOAT_DTYPE).tobytes(),
        walls[order].astype(_FLOAT_DTYPE).tobytes(),
    )
    return (run_id, key_id, rank, block, *summary, max(last_step, steps[-1]), *data)


def summarise_block(steps: Sequence[int], values: Sequence[float], walls: Sequence[float]) -> Summary:
    """The summary of one block's points given in step order (see :data:`SUMMARY_COLUMNS`)."""
    summary: Summary = [len(steps), steps[0], walls[0], None, None, None, None, None, None]
    low = high = None
    for index, value in enumerate(values):
        if value != value:  # NaN
            continue
        # Strict comparisons: in step order a tie keeps the earlier step.
        if low is None or value < values[low]:
            low = index
        if high is None or value > values[high]:
            high = index
    if low is not None and high is not None:
        summary[3:] = (values[low], steps[low], walls[low], values[high], steps[high], walls[high])
    return summary


def combine(stored: Summary, new: Summary) -> Summary:
    """Two summaries of disjoint points of one block as one: a NaN-only side (None) never wins, and a tie
    goes to the earlier step, so the result does not depend on the order batches arrive in."""
    out = list(stored)
    out[0] = stored[0] + new[0]
    if new[1] < stored[1]:
        out[1], out[2] = new[1], new[2]
    if new[3] is not None and (
        stored[3] is None or new[3] < stored[3] or (new[3] == stored[3] and new[4] < stored[4])
    ):
        out[3:6] = new[3:6]
    if new[6] is not None and (
        stored[6] is None or new[6] > stored[6] or (new[6] == stored[6] and new[7] < stored[7])
    ):
        out[6:9] = new[6:9]
    return out


def summarise(points: Iterable[tuple[int, tuple[float | None, float]]]) -> dict[int, Summary]:
    """Per block (``step // BLOCK_STEPS``), the summary of ``(step, (value, wall_time))`` points in any
    order; a value that is None (SQLite's NaN before revision 0007) or NaN counts as NaN, +-inf as values.
    Ties go to the earlier step."""
    blocks: dict[int, Summary] = {}
    for step, (value, wall_time) in points:
        block = blocks.get(step // BLOCK_STEPS)
        if block is None:
            block = blocks[step // BLOCK_STEPS] = [0, step, wall_time, None, None, None, None, None, None]
        block[0] += 1
        if step < block[1]:
            block[1], block[2] = step, wall_time
        if value is None or value != value:  # NaN
            continue
        if block[3] is None or value < block[3] or (value == block[3] and step < block[4]):
            block[3], block[4], block[5] = value, step, wall_time
        if block[6] is None or value > block[6] or (value == block[6] and step < block[7]):
            block[6], block[7], block[8] = value, step, wall_time
    return blocks


# --- reading ----------------------------------------------------------------------------------------

_mb = models.MetricBlock
_DATA = (_mb.step_data, _mb.value_data, _mb.wall_data)


def _block_range(first: int | None, last: int | None) -> list[Any]:
    conditions = []
    if first is not None:
        conditions.append(_mb.block >= first // BLOCK_STEPS)
    if last is not None:
        conditions.append(_mb.block <= last // BLOCK_STEPS)
    return conditions


def read_series(
    session: Session,
    run_id: int,
    key_id: int,
    rank: int,
    *,
    first: int | None = None,
    last: int | None = None,
) -> Points:
    """The series' points with ``first <= step <= last`` (open ends when None), in step order."""
    rows = session.execute(
        select(*_DATA)
        .where(_mb.run_id == run_id, _mb.key_id == key_id, _mb.rank == rank, *_block_range(first, last))
        .order_by(_mb.block)
    ).all()
    return unpack(rows).between(first, last)


def read_ranks(
    session: Session, run_id: int, key_id: int, *, first: int | None = None, last: int | None = None
) -> dict[int, Points]:
    """Per rank, the key's points with ``first <= step <= last``, in step order."""
    rows = session.execute(
        select(_mb.rank, *_DATA)
        .where(_mb.run_id == run_id, _mb.key_id == key_id, *_block_range(first, last))
        .order_by(_mb.rank, _mb.block)
    ).all()
    by_rank: dict[int, list[Any]] = {}
    for row in rows:
        by_rank.setdefault(row[0], []).append(row[1:])
    return {rank: unpack(blocks).between(first, last) for rank, blocks in by_rank.items()}


def newest(
    session: Session, run_id: int, key_id: int, rank: int, count: int, *, at_or_before: int | None = None
) -> Points:
    """The series' newest ``count`` points (at or before step ``at_or_before`` when given), in step order:
    the newest blocks are read until they hold enough."""
    query = select(*_DATA).where(
        _mb.run_id == run_id, _mb.key_id == key_id, _mb.rank == rank, *_block_range(None, at_or_before)
    )
    # Dense series fill a block per BLOCK_STEPS points; a sparse one may need a block per point.
    limit = count // BLOCK_STEPS + 2
    while True:
        rows = session.execute(query.order_by(_mb.block.desc()).limit(limit)).all()
        points = unpack(rows[::-1]).between(None, at_or_before)
        if len(points) >= count or len(rows) < limit:
            return points.tail(count)
        limit *= 4


def last_steps(session: Session, run_id: int, *, rank: int | None = None) -> dict[int, int]:
    """Each key's last step in the run (on ``rank`` when given, else on any rank)."""
    query = select(_mb.key_id, func.max(_mb.last_step)).where(_mb.run_id == run_id).group_by(_mb.key_id)
    if rank is not None:
        query = query.where(_mb.rank == rank)
    return {key_id: last for key_id, last in session.execute(query)}


def series_of(session: Session, run_id: int) -> list[tuple[int, int]]:
    """The run's series that hold points: (key_id, rank) pairs."""
    return [
        (key_id, rank)
        for key_id, rank in session.execute(
            select(_mb.key_id, _mb.rank).where(_mb.run_id == run_id).distinct()
        )
    ]
