"""The upkeep of rung views (:class:`plateau_tracker.server.db.models.RungView`): per experiment, monitored
key and rung step, every run's value at its first point at or after the rung, which an ``asha`` judgement
compares with.

A rung's view is built by one scan in its own transaction, after the judgement that first needed it (that
judgement scans, exactly as without a view). From then on each batch of points keeps its run's rows
(:func:`record`), so a rung judgement's cost does not grow with the experiment.

On PostgreSQL a build and the batches of its experiment are ordered by an advisory lock on the experiment:
a batch holds it shared from before it reads which views exist until it commits, a build holds it alone.
So a batch either sees the view and keeps its rows, or has committed before the build's scan reads its
points. Batches do not wait for one another. SQLite's writes are serialised already.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from sqlalchemy import Select, and_, bindparam, func, insert, select, update
from sqlalchemy.orm import Session

from plateau_tracker.server.db import models
from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.services._upsert import insert_ignore
from plateau_tracker.server.services.block_format import decode_floats, decode_steps

# The advisory lock's first key, naming what the second (an experiment id) is locked for.
_LOCK_SPACE = 0x706C7276

_block, _run, _view, _value = models.MetricBlock, models.Run, models.RungView, models.RungValue

SHARED_LOCK = func.pg_advisory_xact_lock_shared(_LOCK_SPACE, _run.experiment_id)
"""Selected with a run (PostgreSQL only), it takes the run's experiment's lock shared until the commit."""

# The experiment's rung views with the run's rows in them: built once (building it cost more than running
# it, on every batch), and a no-op's cost when the experiment has no view.
_views_table, _values_table = _view.__table__, _value.__table__
_VIEWS_OF_RUN = (
    select(_views_table.c.key_id, _views_table.c.rung_step, _values_table.c.at_step)
    .select_from(
        _views_table.outerjoin(
            _values_table,
            and_(
                _values_table.c.experiment_id == _views_table.c.experiment_id,
                _values_table.c.run_id == bindparam("run_id"),
                _values_table.c.key_id == _views_table.c.key_id,
                _values_table.c.rung_step == _views_table.c.rung_step,
            ),
        )
    )
    .where(_views_table.c.experiment_id == bindparam("experiment_id"))
)

RunPoints = Mapping[tuple[int, int], Mapping[int, tuple[float, float]]]


def scan(session: Session, experiment_id: int, key_id: int, step: int) -> list[tuple[int, int, float]]:
    """``(run, step, value)`` of each run of the experiment at its first point at or after ``step`` on
    rank 0, read from the points: in each run's first block that reaches ``step`` (blocks hold consecutive
    step ranges, so that block holds the point). Values may be NaN or infinite."""
    on_key = and_(_block.run_id == _run.id, _block.key_id == key_id, _block.rank == 0)
    first_block = (
        select(_block.run_id, func.min(_block.block).label("first"))
        .join(_run, on_key)
        .where(_run.experiment_id == experiment_id, _block.last_step >= step)
        .group_by(_block.run_id)
        .subquery()
    )
    rows = session.execute(
        select(_block.run_id, _block.step_data, _block.value_data)
        .join(first_block, and_(_block.run_id == first_block.c.run_id, _block.block == first_block.c.first))
        .where(_block.key_id == key_id, _block.rank == 0)
    )
    found = []
    for run_id, step_data, value_data in rows:
        steps = decode_steps(step_data)
        index = int(np.searchsorted(steps, step))
        found.append((run_id, int(steps[index]), float(decode_floats(value_data)[index])))
    return found


def exists(session: Session, experiment_id: int, key_id: int, step: int) -> bool:
    return session.get(_view, (experiment_id, key_id, step)) is not None


def build(db: Database, experiment_id: int, key_id: int, step: int) -> None:
    """Build the view of one rung unless it exists: its own transaction, one scan of the experiment."""
    with db.session(write=True) as session:
        _lock_alone(session, experiment_id)
        created = session.execute(
            insert_ignore(session, _view)
            .values(experiment_id=experiment_id, key_id=key_id, rung_step=step)
            .returning(_view.rung_step)  # psycopg gives no rowcount for an insert that may do nothing
        ).first()
        if created is None:
            return  # built by another transaction while this one waited for the lock
        rows = [
            _row(experiment_id, run_id, key_id, step, at_step, value)
            for run_id, at_step, value in scan(session, experiment_id, key_id, step)
        ]
        if rows:
            session.execute(insert(_value), rows)


def record(session: Session, run: models.Run, fresh: RunPoints) -> None:
    """Keep the run's rows in its experiment's rung views for the points just stored (``fresh``: new points
    per ``(key id, rank)``). A row changes only when the batch holds the run's first point past the rung:
    the first batch that reaches it, or a late point before the one recorded.

    On PostgreSQL the transaction must hold the experiment's lock shared (:data:`SHARED_LOCK`, which ingest
    reads with the run's row) from a statement before this one: this one's snapshot then sees every view
    built before it."""
    reached = {key_id: points for (key_id, rank), points in fresh.items() if rank == 0 and points}
    if not reached:
        return
    experiment_id = run.experiment_id
    views = session.execute(_VIEWS_OF_RUN, {"experiment_id": experiment_id, "run_id": run.id}).all()
    for key_id, rung_step, recorded in views:
        points = reached.get(key_id)
        if points is None:
            continue
        # Every earlier point at or past the rung is at or after `recorded`: the batch's first one past the
        # rung is the run's first when it comes before it (or when nothing was recorded).
        first = min((step for step in points if step >= rung_step), default=None)
        if first is None or (recorded is not None and recorded <= first):
            continue
        row = _row(experiment_id, run.id, key_id, rung_step, first, points[first][0])
        if recorded is None:
            session.execute(insert(_value).values(**row))
        else:
            session.execute(
                update(_value)
                .where(
                    _value.experiment_id == experiment_id,
                    _value.run_id == run.id,
                    _value.key_id == key_id,
                    _value.rung_step == rung_step,
                )
                .values(at_step=first, value=row["value"])
            )


def values(
    session: Session, experiment_id: int, key_id: int, step: int, *, without: int
) -> Select[float | None]:
    """The finite values of the rung's view, but run ``without``'s (the run judged)."""
    return select(_value.value).where(
        _value.experiment_id == experiment_id,
        _value.key_id == key_id,
        _value.rung_step == step,
        _value.value.is_not(None),
        _value.run_id != without,
    )


def _row(
    experiment_id: int, run_id: int, key_id: int, rung_step: int, at_step: int, value: float
) -> dict[str, object]:
    return {
        "experiment_id": experiment_id,
        "run_id": run_id,
        "key_id": key_id,
        "rung_step": rung_step,
        "at_step": at_step,
        "value": value if math.isfinite(value) else None,
    }


def _lock_alone(session: Session, experiment_id: int) -> None:
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(_LOCK_SPACE, experiment_id)))
