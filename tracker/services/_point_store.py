"""The ingest hot path's SQL: which steps of a series are stored already, and a bulk insert of points.

Plain driver SQL, not ORM objects or Core statements with a dict per row: at hundreds of thousands of
points a second, building and binding a mapping per point costs more than SQLite's own insert. SQLite
gets one ``executemany`` of tuples; PostgreSQL gets one ``INSERT ... SELECT FROM unnest(arrays)``, a
single statement and round trip per batch however many points it holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sqlalchemy.orm import Session

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
    shape each dialect takes fastest: rows for SQLite, one array per column for PostgreSQL."""
    if not any(points.values()):
        return
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
