"""Points, packed per series and block of steps (``metric_block``): storing a batch's new points, and
reading series back as numpy arrays.

Ingest holds the run's lock, so a block is read, extended and written back without a race. Most batches
only extend a series (their steps follow the stored ones): then the stored arrays are not even decoded,
the new points' bytes are appended to them. Plain driver SQL on this path: at hundreds of thousands of
points a second the ORM's per-row work would cost more than the database's.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing
from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from plateau_tracker.server.db import models
from plateau_tracker.server.db.models import BLOCK_STEPS
from plateau_tracker.server.services.block_format import (
    FLOAT_DTYPE,
    STEP_DTYPE,
    SUMMARY_COLUMNS,
    Points,
    StoredSummary,
    Summary,
    combine,
    pack,
    summarise_block,
    unpack,
)

# The points of a batch, per series: (key_id, rank) -> step -> (value, wall_time).
SeriesPoints = Mapping[tuple[int, int], dict[int, tuple[float, float]]]
Tails = dict[tuple[int, int], tuple[int, StoredSummary]]
"""Per series (key_id, rank): its last stored block, with that block's summary and last step."""

_BLOCK_COLUMNS = ("run_id", "key_id", "rank", "block", *SUMMARY_COLUMNS, "last_step")
_DATA_COLUMNS = ("step_data", "value_data", "wall_data")
_ALL_COLUMNS = (*_BLOCK_COLUMNS, *_DATA_COLUMNS)
_MARKS = {"sqlite": "?", "postgresql": "%s"}


def _upsert(dialect: str, *, append: bool) -> str:
    """Write block rows: a new block is inserted; a stored one takes the row's summary and either its data
    whole (``append=False``) or the row's data appended to the stored data, in the database, so a block
    being extended is never read back (``append=True``)."""
    mark = _MARKS[dialect]
    if not append:
        data = [f"{column} = excluded.{column}" for column in _DATA_COLUMNS]
    elif dialect == "sqlite":
        # SQLite's || concatenates the bytes of two blobs (as text in the database's UTF-8, unchanged;
        # the CAST makes the result a blob again).
        data = [f"{c} = CAST(metric_block.{c} || excluded.{c} AS BLOB)" for c in _DATA_COLUMNS]
    else:
        data = [f"{column} = metric_block.{column} || excluded.{column}" for column in _DATA_COLUMNS]
    return (
        f"INSERT INTO metric_block ({', '.join(_ALL_COLUMNS)}) "
        f"VALUES ({', '.join([mark] * len(_ALL_COLUMNS))}) "
        "ON CONFLICT (run_id, key_id, rank, block) DO UPDATE SET "
        + ", ".join([*(f"{column} = excluded.{column}" for column in _BLOCK_COLUMNS[4:]), *data])
    )


_APPEND = {dialect: _upsert(dialect, append=True) for dialect in _MARKS}
_REPLACE = {dialect: _upsert(dialect, append=False) for dialect in _MARKS}
# How many series one read of stored blocks asks for (a primary-key range each).
_SERIES_PER_READ = 100


# --- writing ----------------------------------------------------------------------------------------


def store(session: Session, run_id: int, series: SeriesPoints, tails: Tails | None = None) -> None:
    """Store a batch's points for the run, whose lock the caller holds.

    Against the store the first value of a step wins: the steps held already are deleted from
    ``series``' own dicts, so afterwards it holds exactly the points that were new. Series left empty stay
    in ``series`` (empty). ``tails``: the last stored block of the run's series as far as the caller knows
    them (it keeps them between batches: :mod:`tracker.services.run_memory`); a batch that extends a known
    series reads nothing back, and the tails are brought up to date.
    """
    wanted: dict[tuple[int, int, int], list[int]] = {}
    spans: dict[tuple[int, int], tuple[int, int]] = {}  # per series, its first and last block
    for (key_id, rank), points in series.items():
        if not points:
            continue
        steps = sorted(points)
        spans[(key_id, rank)] = (steps[0] // BLOCK_STEPS, steps[-1] // BLOCK_STEPS)
        # Cut the sorted steps at block boundaries: a step a block of work, not a step a dict lookup.
        start = 0
        while start < len(steps):
            block = steps[start] // BLOCK_STEPS
            end = bisect_left(steps, (block + 1) * BLOCK_STEPS, start)
            wanted[(key_id, rank, block)] = steps[start:end]
            start = end
    if not wanted:
        return
    connection = session.connection()
    dialect = connection.dialect.name
    stored = _known_summaries(connection, dialect, run_id, spans, tails)
    appended, replaced, between = [], [], []
    written: dict[tuple[int, int, int], StoredSummary] = {}
    for (key_id, rank, block), steps in wanted.items():
        points = series[(key_id, rank)]
        held = stored.get((key_id, rank, block))
        if held is None or steps[0] > held.last_step:  # a new block, or the batch extends it: no read
            values = [points[step][0] for step in steps]
            walls = [points[step][1] for step in steps]
            new = summarise_block(steps, values, walls)
            merged = new if held is None else combine(held.summary, new)
            data = (pack("q", steps), pack("d", values), pack("d", walls))
            appended.append((run_id, key_id, rank, block, *merged, steps[-1], *data))
            written[(key_id, rank, block)] = StoredSummary(Summary(*merged), steps[-1])
            continue
        between.append(((key_id, rank, block), steps, held))
    if tails is not None:
        _move_tails(tails, spans, stored, written, {(key_id, rank) for (key_id, rank, _), _, _ in between})
    if between:
        # Steps at or before a block's last (batches arriving out of order): some may be stored already,
        # the rest go in between. One read for all such blocks.
        data_of = _stored_data(connection, dialect, run_id, [key for key, _, _ in between])
        for (key_id, rank, block), steps, summarised in between:
            row = _merged_block(
                (run_id, key_id, rank, block),
                steps,
                series[(key_id, rank)],
                summarised,
                data_of[(key_id, rank, block)],
            )
            if row is not None:
                replaced.append(row)
    if appended:
        connection.exec_driver_sql(_APPEND[dialect], appended)
    if replaced:
        connection.exec_driver_sql(_REPLACE[dialect], replaced)


_LAST_BLOCK = 2**62 // BLOCK_STEPS  # past every block: a read "to the series' end"


def _known_summaries(
    connection: Any,
    dialect: str,
    run_id: int,
    spans: Mapping[tuple[int, int], tuple[int, int]],
    tails: Tails | None,
) -> dict[tuple[int, int, int], StoredSummary]:
    """The stored summaries of the blocks the batch writes, by (key_id, rank, block): a series whose known
    tail is at or before its first block needs no read (its tail block, if the batch writes it, is known,
    and nothing is stored after it); the others are read, to the series' end when ``tails`` are kept (so
    that the series' last block is known afterwards)."""
    known: dict[tuple[int, int, int], StoredSummary] = {}
    unknown: dict[tuple[int, int], tuple[int, int]] = {}
    for (key_id, rank), (low, high) in spans.items():
        tail = tails.get((key_id, rank)) if tails is not None else None
        if tail is not None and low >= tail[0]:
            if low == tail[0]:
                known[(key_id, rank, low)] = tail[1]
            continue
        unknown[(key_id, rank)] = (low, high if tails is None else _LAST_BLOCK)
    if unknown:
        known.update(_stored_summaries(connection, dialect, run_id, unknown))
    return known


def _move_tails(
    tails: Tails,
    spans: Mapping[tuple[int, int], tuple[int, int]],
    known: Mapping[tuple[int, int, int], StoredSummary],
    written: Mapping[tuple[int, int, int], StoredSummary],
    rewritten: set[tuple[int, int]],
) -> None:
    """Each series' last block after the batch: the highest of its tail, the blocks read and the blocks
    the batch appended to. A series the batch wrote inside stored blocks is forgotten (read next time)."""
    last: dict[tuple[int, int], tuple[int, StoredSummary]] = {}
    for source in (known, written):  # written after known: a block the batch extended has its new summary
        for (key_id, rank, block), summary in source.items():
            held = last.get((key_id, rank))
            if held is None or block >= held[0]:
                last[(key_id, rank)] = (block, summary)
    for pair in spans:
        tail = tails.get(pair)
        found = last.get(pair)
        if pair in rewritten or found is None:
            tails.pop(pair, None)
        elif tail is None or found[0] >= tail[0]:
            tails[pair] = found


def _read_arms(
    connection: Any, dialect: str, columns: str, where: str, arms: list[tuple[Any, ...]]
) -> Iterator[Any]:
    """Rows of ``SELECT columns FROM metric_block WHERE where`` for each arm's parameters, ``UNION ALL``
    of ``_SERIES_PER_READ`` arms a statement. One primary-key lookup per arm: with the run outside an OR
    of the series, SQLite would scan every block of the run."""
    arm = f"SELECT {columns} FROM metric_block WHERE {where.replace('?', _MARKS[dialect])}"
    for start in range(0, len(arms), _SERIES_PER_READ):
        chunk = arms[start : start + _SERIES_PER_READ]
        params = tuple(value for params in chunk for value in params)
        yield from connection.exec_driver_sql(" UNION ALL ".join([arm] * len(chunk)), params)


def _stored_summaries(
    connection: Any, dialect: str, run_id: int, spans: Mapping[tuple[int, int], tuple[int, int]]
) -> dict[tuple[int, int, int], StoredSummary]:
    """The stored summaries and last steps of each series' blocks from its first to its last block, by
    (key_id, rank, block), without any block's data."""
    rows = _read_arms(
        connection,
        dialect,
        ", ".join(_BLOCK_COLUMNS[1:]),
        "run_id = ? AND key_id = ? AND rank = ? AND block BETWEEN ? AND ?",
        [(run_id, key_id, rank, low, high) for (key_id, rank), (low, high) in spans.items()],
    )
    return {(row[0], row[1], row[2]): StoredSummary(Summary(*row[3:-1]), row[-1]) for row in rows}


def _stored_data(
    connection: Any, dialect: str, run_id: int, blocks: list[tuple[int, int, int]]
) -> dict[tuple[int, int, int], Points]:
    """The points of stored blocks (key_id, rank, block)."""
    rows = _read_arms(
        connection,
        dialect,
        "key_id, rank, block, step_data, value_data, wall_data",
        "run_id = ? AND key_id = ? AND rank = ? AND block = ?",
        [(run_id, *block) for block in blocks],
    )
    return {(row[0], row[1], row[2]): unpack([row[3:]]) for row in rows}


def _merged_block(
    key: tuple[int, int, int, int],
    steps: list[int],
    points: dict[int, tuple[float, float]],
    summarised: StoredSummary,
    held: Points,
) -> tuple[Any, ...] | None:
    """The stored block ``key`` (run_id, key_id, rank, block), holding ``held`` and summarised by
    ``summarised``, with ``steps`` (sorted) of ``points`` merged in, in step order, as a
    whole row; the steps it holds already are deleted from ``points`` (the stored value wins). None when
    nothing is new."""
    wanted = np.array(steps, STEP_DTYPE)
    at = np.searchsorted(held.steps, wanted)
    stored = held.steps[np.minimum(at, len(held.steps) - 1)] == wanted
    if stored.any():
        for step in wanted[stored].tolist():
            del points[step]
        wanted, at = wanted[~stored], at[~stored]
        steps = wanted.tolist()
        if not steps:
            return None
    values = [points[step][0] for step in steps]
    walls = [points[step][1] for step in steps]
    merged = combine(summarised.summary, summarise_block(steps, values, walls))
    # Both sides are in step order: insert the new points at their places, no sort needed.
    data = (
        np.insert(held.steps, at, wanted).astype(STEP_DTYPE).tobytes(),
        np.insert(held.values, at, values).astype(FLOAT_DTYPE).tobytes(),
        np.insert(held.wall_times, at, walls).astype(FLOAT_DTYPE).tobytes(),
    )
    return (*key, *merged, max(summarised.last_step, steps[-1]), *data)


# --- reading ----------------------------------------------------------------------------------------

_block = models.MetricBlock
_DATA = (_block.step_data, _block.value_data, _block.wall_data)


def _block_range(first: int | None, last: int | None) -> list[Any]:
    conditions = []
    if first is not None:
        conditions.append(_block.block >= first // BLOCK_STEPS)
    if last is not None:
        conditions.append(_block.block <= last // BLOCK_STEPS)
    return conditions


def driver_select(
    columns: str, *, sqlite: bool, from_block: bool = False, blocks: Sequence[int] | None = None
) -> str:
    """SQL for the driver's own cursor (what long reads use, past SQLAlchemy's per-row cost): ``columns``
    of one series' blocks in block order, bound as ``run``, ``key``, ``rank`` (and ``block``, the first
    block, with ``from_block``) in the driver's own parameter style; with ``blocks``, only those (written
    into the SQL as integers: thousands of them, and no bound parameter per block)."""

    def mark(name: str) -> str:
        return f":{name}" if sqlite else f"%({name})s"

    where = f"run_id = {mark('run')} AND key_id = {mark('key')} AND rank = {mark('rank')}"
    if from_block:
        where += f" AND block >= {mark('block')}"
    if blocks is not None:
        where += f" AND block IN ({', '.join(str(int(block)) for block in blocks) or 'NULL'})"
    return f"SELECT {columns} FROM metric_block WHERE {where} ORDER BY block"


def driver_rows(
    session: Session,
    columns: str,
    series: tuple[int, int, int],
    *,
    sqlite: bool,
    blocks: Sequence[int] | None = None,
) -> list[Any]:
    """Every row of :func:`driver_select` for the series ``(run_id, key_id, rank)`` (``blocks`` only, if
    given), fetched through the driver's own cursor."""
    run_id, key_id, rank = series
    with closing(session.connection().connection.cursor()) as cursor:
        cursor.execute(
            driver_select(columns, sqlite=sqlite, blocks=blocks), {"run": run_id, "key": key_id, "rank": rank}
        )
        return list(cursor.fetchall())


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
        .where(
            _block.run_id == run_id, _block.key_id == key_id, _block.rank == rank, *_block_range(first, last)
        )
        .order_by(_block.block)
    ).all()
    return unpack(rows).between(first, last)


def read_ranks(
    session: Session, run_id: int, key_id: int, *, first: int | None = None, last: int | None = None
) -> dict[int, Points]:
    """Per rank, the key's points with ``first <= step <= last``, in step order."""
    rows = session.execute(
        select(_block.rank, *_DATA)
        .where(_block.run_id == run_id, _block.key_id == key_id, *_block_range(first, last))
        .order_by(_block.rank, _block.block)
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
        _block.run_id == run_id,
        _block.key_id == key_id,
        _block.rank == rank,
        *_block_range(None, at_or_before),
    )
    # Dense series fill a block per BLOCK_STEPS points; a sparse one may need a block per point.
    limit = count // BLOCK_STEPS + 2
    while True:
        rows = session.execute(query.order_by(_block.block.desc()).limit(limit)).all()
        points = unpack(rows[::-1]).between(None, at_or_before)
        if len(points) >= count or len(rows) < limit:
            return points.tail(count)
        limit *= 4


def last_steps(session: Session, run_id: int, *, rank: int | None = None) -> dict[int, int]:
    """Each key's last step in the run (on ``rank`` when given, else on any rank)."""
    query = (
        select(_block.key_id, func.max(_block.last_step))
        .where(_block.run_id == run_id)
        .group_by(_block.key_id)
    )
    if rank is not None:
        query = query.where(_block.rank == rank)
    return {key_id: last for key_id, last in session.execute(query)}


def series_of(session: Session, run_id: int) -> list[tuple[int, int, int]]:
    """The run's series that hold points: (key_id, rank, how many points) (read from the blocks'
    summaries, which their index covers)."""
    return [
        (key_id, rank, int(points))
        for key_id, rank, points in session.execute(
            select(_block.key_id, _block.rank, func.sum(_block.points))
            .where(_block.run_id == run_id)
            .group_by(_block.key_id, _block.rank)
        )
    ]
