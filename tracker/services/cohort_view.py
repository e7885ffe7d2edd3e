"""The upkeep of cohort views (:class:`plateau_tracker.server.db.models.CohortView`): per experiment and
monitored key, the finished unpruned runs' values a ``percentile`` judgement compares with, kept as index
rows.

A view is built by one scan the first time a judgement needs it; from then on it changes only when a run
of its experiment joins or leaves the finished cohort or gets points while finished (:func:`refresh`), so
a judgement's cost does not grow with the experiment.

Both the build and a refresh take the experiment's row lock first. On PostgreSQL (read committed) that
orders them: a run that finishes while a view is being built is either seen finished by the build's scan
or, waiting for the lock, sees the new view and adds itself. SQLite's writes are serialised already.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import ColumnElement, and_, bindparam, delete, insert, or_, select
from sqlalchemy.orm import Session

from plateau_tracker.server.db import models
from plateau_tracker.server.policy import PRUNING_RULES
from plateau_tracker.server.services._upsert import insert_ignore
from plateau_tracker.server.services.block_format import unpack

_block, _run = models.MetricBlock, models.Run


def is_member(run: models.Run) -> bool:
    """Whether the run counts as finished for its cohort: ended, and not pruned by a cross-run rule."""
    return run.status != "running" and (run.stop_rule is None or run.stop_rule not in PRUNING_RULES)


def finished_condition(run: Any = models.Run) -> list[ColumnElement[bool]]:
    """:func:`is_member` in SQL, over ``run``: ``models.Run``, or its table's columns for a Core
    statement."""
    return [run.status != "running", or_(run.stop_rule.is_(None), run.stop_rule.not_in(PRUNING_RULES))]


def ensure(session: Session, experiment_id: int, key_id: int) -> None:
    """Build the experiment's view of ``key_id`` unless it exists (one scan of its finished runs)."""
    if session.execute(_VIEW_EXISTS, {"experiment_id": experiment_id, "key_id": key_id}).first() is not None:
        return
    _lock_experiment(session, experiment_id)
    # RETURNING says whether this insert made the row (psycopg reports no rowcount for it here).
    created = session.execute(
        insert_ignore(session, models.CohortView)
        .values(experiment_id=experiment_id, key_id=key_id)
        .returning(models.CohortView.key_id)
    ).first()
    if created is None:
        return  # built by another transaction while this one waited for the lock
    blocks = session.execute(
        select(_run.id, _run.stop_step, _block.step_data, _block.value_data, _block.wall_data)
        .join(_block, and_(_block.run_id == _run.id, _block.key_id == key_id, _block.rank == 0))
        .where(_run.experiment_id == experiment_id, *finished_condition())
        .order_by(_run.id, _block.block)
    ).all()
    by_run: dict[int, tuple[int | None, list[Sequence[bytes]]]] = {}
    for run_id, stop_step, *data in blocks:
        by_run.setdefault(run_id, (stop_step, []))[1].append(data)
    for run_id, (stop_step, run_blocks) in by_run.items():
        _insert_member(session, experiment_id, key_id, run_id, stop_step, run_blocks)


# Asked on every judgement that reads a view, and on every run's end: built once, in Core (through the
# ORM each cost several times the database's work).
_views = models.table_of(models.CohortView).c
_VIEW_EXISTS = select(_views.key_id).where(
    _views.experiment_id == bindparam("experiment_id"), _views.key_id == bindparam("key_id")
)
_VIEWS_OF = select(_views.key_id).where(_views.experiment_id == bindparam("experiment_id"))
_experiments = models.table_of(models.Experiment).c
_LOCK_EXPERIMENT = (
    select(_experiments.id).where(_experiments.id == bindparam("experiment_id")).with_for_update()
)
_FORGET_MEMBER = [
    delete(table).where(
        table.c.experiment_id == bindparam("experiment_id"), table.c.run_id == bindparam("run_id")
    )
    for table in (models.table_of(models.CohortValue), models.table_of(models.CohortCarry))
]
_ADD_VALUES = insert(models.table_of(models.CohortValue))
_ADD_CARRY = insert(models.table_of(models.CohortCarry))


def refresh(session: Session, run: models.Run) -> None:
    """Bring the run's rows in every view of its experiment up to date: after it finished, was stopped
    or pruned while finished, or got points while finished. A no-op for experiments without views."""
    experiment_id = run.experiment_id
    # Views are read under the lock, never before it: a build that has not committed yet must either be
    # waited for (and its view refreshed here) or see this run's change (its scan comes after the lock).
    _lock_experiment(session, experiment_id)
    key_ids = _views_of(session, experiment_id)
    if not key_ids:
        return
    for forget in _FORGET_MEMBER:
        session.execute(forget, {"experiment_id": experiment_id, "run_id": run.id})
    if not is_member(run):
        return
    blocks = session.execute(
        select(_block.key_id, _block.step_data, _block.value_data, _block.wall_data)
        .where(_block.run_id == run.id, _block.key_id.in_(key_ids), _block.rank == 0)
        .order_by(_block.key_id, _block.block)
    ).all()
    by_key: dict[int, list[Sequence[bytes]]] = {}
    for key_id, *data in blocks:
        by_key.setdefault(key_id, []).append(data)
    for key_id, key_blocks in by_key.items():
        _insert_member(session, experiment_id, key_id, run.id, run.stop_step, key_blocks)


def _views_of(session: Session, experiment_id: int) -> list[int]:
    return list(session.execute(_VIEWS_OF, {"experiment_id": experiment_id}).scalars())


def _lock_experiment(session: Session, experiment_id: int) -> None:
    # FOR UPDATE is left out on SQLite, whose write transactions hold the database already.
    session.execute(_LOCK_EXPERIMENT, {"experiment_id": experiment_id})


def _insert_member(
    session: Session,
    experiment_id: int,
    key_id: int,
    run_id: int,
    stop_step: int | None,
    blocks: Iterable[Sequence[bytes]],
) -> None:
    """A run's rows for one key: its finite values, and, when the policy stopped it early, its last value
    carried past its stop (or its last point, if later), when finite."""
    points = unpack(list(blocks))
    if not len(points):
        return
    common = {"experiment_id": experiment_id, "key_id": key_id, "run_id": run_id}
    rows = [
        {**common, "step": step, "value": value}
        for step, value in zip(points.steps.tolist(), points.values.tolist(), strict=True)
        if math.isfinite(value)
    ]
    if rows:
        session.execute(_ADD_VALUES, rows)
    last_value = float(points.values[-1])
    if stop_step is not None and math.isfinite(last_value):
        after = max(stop_step, int(points.steps[-1]))
        session.execute(_ADD_CARRY, {**common, "after_step": after, "value": last_value})
