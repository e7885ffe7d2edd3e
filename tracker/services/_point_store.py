"""The ingest hot path's SQL: which steps of a series are stored already, and a bulk insert of points
with the per-block summaries (``series_block``) they move.

Plain driver SQL, not ORM objects or Core statements with a dict per row: at hundreds of thousands of
points a second, building and binding a mapping per point costs more than SQLite's own insert. SQLite
gets one ``executemany`` of tuples; PostgreSQL gets one ``INSERT ... SELECT FROM unnest(arrays)``, a
single statement and round trip per batch however many points it holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from tracker.db.models import BLOCK_STEPS

# The points to store, per series: (key_id, rank) -> step -> (value, wall_time).
SeriesPoints = Mapping[tuple[int, int], Mapping[int, tuple[float, float]]]

_SQLITE_INSERT = (
    "INSERT INTO metric_point (run_id, key_id, rank, step, value, wall_time) VALUES (?, ?, ?, ?, ?, ?)"
)
_POSTGRES_INSERT = (
    "INSERT INTO metric_point (run_id, key_id, rank, step, value, wall_time) "
    "SELECT %s, k, r, s, v, w FROM unnest(%s::integer[], %s::integer[], %s::bigint[], "
    "%s::double precision[], %s::double precision[]) AS t(k, r, s, v, w)"
)
# The primary key (run_id, key_id, rank, step) answers this with one range seek per series.
_STORED_STEPS = {
    "sqlite": "SELECT step FROM metric_point WHERE run_id = ? AND key_id = ? AND rank = ? "
    "AND step BETWEEN ? AND ?",
    "postgresql": "SELECT step FROM metric_point WHERE run_id = %s AND key_id = %s AND rank = %s "
    "AND step BETWEEN %s AND %s",
}


def stored_steps(session: Session, run_id: int, key_id: int, rank: int, steps: Iterable[int]) -> set[int]:
    """Which of ``steps`` the series (run, key, rank) holds already."""
    wanted = set(steps)
    if not wanted:
        return set()
    connection = session.connection()
    sql = _STORED_STEPS[connection.dialect.name]
    rows = connection.exec_driver_sql(sql, (run_id, key_id, rank, min(wanted), max(wanted)))
    return {step for (step,) in rows if step in wanted}


def insert_points(session: Session, run_id: int, points: SeriesPoints) -> None:
    """Insert points known not to be stored yet (the caller holds the run's lock and checked), in the
    shape each dialect takes fastest: rows for SQLite, one array per column for PostgreSQL; and fold them
    into their series' block summaries."""
    if not any(points.values()):
        return
    merge_summaries(
        session,
        run_id,
        {pair: summarise(series.items()) for pair, series in points.items()},
    )
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        key_ids: list[int] = []
        ranks: list[int] = []
        steps: list[int] = []
        values: list[float] = []
        walls: list[float] = []
        for (key_id, rank), series in points.items():
            key_ids += [key_id] * len(series)
            ranks += [rank] * len(series)
            steps += series.keys()
            for value, wall_time in series.values():
                values.append(value)
                walls.append(wall_time)
        connection.exec_driver_sql(_POSTGRES_INSERT, (run_id, key_ids, ranks, steps, values, walls))
    else:
        rows = [
            (run_id, key_id, rank, step, value, wall_time)
            for (key_id, rank), series in points.items()
            for step, (value, wall_time) in series.items()
        ]
        connection.exec_driver_sql(_SQLITE_INSERT, rows)


# One block's summary, in the order of SUMMARY_COLUMNS; the min and max fields are None while the block
# has no value but NaN.
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


def _wins(extreme: str, beats: str) -> str:
    """SQL: the batch's ``extreme`` (min or max) replaces the stored one."""
    new, old = f"excluded.{extreme}", f"series_block.{extreme}"
    step_new, step_old = f"excluded.{extreme[:3]}_step", f"series_block.{extreme[:3]}_step"
    return f"{old} IS NULL OR {new} {beats} {old} OR ({new} = {old} AND {step_new} < {step_old})"


# Merging a batch's summaries into the stored ones. Every expression in SET reads the row as it was, so
# the order of the assignments does not matter; a NULL (NaN-only) side never wins a comparison, and a tie
# goes to the earlier step, so the summary does not depend on the order batches arrive in.
_MERGE_BLOCKS = text(
    f"INSERT INTO series_block (run_id, key_id, rank, block, {', '.join(SUMMARY_COLUMNS)}) "
    f"VALUES (:run_id, :key_id, :rank, :block, {', '.join(':' + c for c in SUMMARY_COLUMNS)}) "
    "ON CONFLICT (run_id, key_id, rank, block) DO UPDATE SET "
    "points = series_block.points + excluded.points, "
    + ", ".join(
        f"{column} = CASE WHEN {wins} THEN excluded.{column} ELSE series_block.{column} END"
        for columns, wins in (
            (("first_step", "first_wall"), "excluded.first_step < series_block.first_step"),
            (("min_value", "min_step", "min_wall"), _wins("min_value", "<")),
            (("max_value", "max_step", "max_wall"), _wins("max_value", ">")),
        )
        for column in columns
    )
)


def summarise(points: Iterable[tuple[int, tuple[float | None, float]]]) -> dict[int, Summary]:
    """Per block (``step // BLOCK_STEPS``), the summary of ``(step, (value, wall_time))`` points (a series'
    ``items()``, as ingest holds them); a value that is None (SQLite's NaN) or NaN counts as NaN, +-inf as
    values. Ties go to the earlier step."""
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


def merge_summaries(
    session: Session, run_id: int, series: Mapping[tuple[int, int], dict[int, Summary]]
) -> None:
    """Fold new block summaries, per (key_id, rank), into ``series_block`` in the caller's transaction:
    one statement for the batch."""
    rows = [
        {
            "run_id": run_id,
            "key_id": key_id,
            "rank": rank,
            "block": block,
            **dict(zip(SUMMARY_COLUMNS, summary, strict=True)),
        }
        for (key_id, rank), blocks in series.items()
        for block, summary in blocks.items()
    ]
    if rows:
        session.execute(_MERGE_BLOCKS, rows)
