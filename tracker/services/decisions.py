"""Reading decisions: the latest, the verdict for one step, the whole history."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import Select, bindparam, select
from sqlalchemy.orm import Session, defer

from tracker.db import models
from tracker.db.engine import Database
from tracker.errors import NotFoundError
from tracker.schemas.decisions import DecisionPublic, DecisionsPublic
from tracker.services.convert import decision_public, no_decision


def get_run_row(
    session: Session, run_id: int, *, lock: bool = False, unloaded: tuple[Any, ...] = ()
) -> models.Run:
    """The run, or :class:`NotFoundError`. ``lock`` takes the row lock that serialises a run's writes;
    the ``unloaded`` columns are left unread until touched (their JSON is not parsed)."""
    run = session.execute(_run_query(lock, unloaded), {"run_id": run_id}).scalar_one_or_none()
    if run is None:
        raise NotFoundError(f"run {run_id} does not exist")
    return run


@functools.cache
def _run_query(lock: bool, unloaded: tuple[Any, ...]) -> Select[models.Run]:
    """The statement behind :func:`get_run_row`, built once: building it (with its loader options) cost
    more than running it, on every ingest."""
    query = select(models.Run).where(models.Run.id == bindparam("run_id"))
    query = query.options(*(defer(column) for column in unloaded))
    return query.with_for_update() if lock else query


def latest(session: Session, run: models.Run) -> DecisionPublic:
    """The run's newest decision for the trainer (alerts are for people), or ``continue`` if none."""
    if run.decision_seq == 0:
        return no_decision(run)
    row = session.get(models.Decision, (run.id, run.decision_seq))
    if row is not None and row.action == "alert":
        row = session.execute(
            select(models.Decision)
            .where(models.Decision.run_id == run.id, models.Decision.action != "alert")
            .order_by(models.Decision.seq.desc())
            .limit(1)
        ).scalar_one_or_none()
    return decision_public(row) if row is not None else no_decision(run)


def at_step(session: Session, run: models.Run, step: int) -> DecisionPublic:
    """The verdict for exactly ``step``: stop if the run stopped at or before it, checkpoint if a new best
    was seen at it, else continue; ``judged=False`` (with the latest decision) if it is not judged yet."""
    if run.stop_step is not None and run.stop_step <= step:
        stop = session.execute(
            select(models.Decision)
            .where(models.Decision.run_id == run.id, models.Decision.action == "stop")
            .order_by(models.Decision.seq)
            .limit(1)
        ).scalar_one_or_none()
        if stop is not None:
            return decision_public(stop)
    if run.judged_step < step:
        return latest(session, run).model_copy(update={"judged": False})
    row = session.execute(
        select(models.Decision)
        .where(
            models.Decision.run_id == run.id,
            models.Decision.step == step,
            models.Decision.action != "alert",
        )
        .order_by(models.Decision.seq.desc())
        .limit(1)
    ).scalar_one_or_none()
    if row is not None:
        return decision_public(row)
    return DecisionPublic(
        seq=run.decision_seq, action="continue", step=step, reason=f"no rule fired at step {step}"
    )


def at_steps(session: Session, run_id: int, first: int, last: int) -> list[DecisionPublic]:
    """The run's decisions about steps ``first`` to ``last``, oldest first."""
    rows = session.execute(
        select(models.Decision)
        .where(models.Decision.run_id == run_id, models.Decision.step.between(first, last))
        .order_by(models.Decision.seq)
    ).scalars()
    return [decision_public(row) for row in rows]


def poll(db: Database, run_id: int, *, after: int | None, step: int | None) -> tuple[DecisionPublic, bool]:
    """One look for a long-poll: (decision, ready). Ready when a step-exact verdict exists, or when the
    newest decision is newer than ``after``."""
    with db.session() as session:
        run = get_run_row(session, run_id)
        if step is not None:
            decision = at_step(session, run, step)
            return decision, decision.judged
        decision = latest(session, run)
        return decision, after is None or decision.seq > after


def history(db: Database, run_id: int, *, step: int | None = None) -> DecisionsPublic:
    """Every decision of the run in order; with ``step``, those about that step only."""
    with db.session() as session:
        get_run_row(session, run_id)
        if step is not None:
            data = at_steps(session, run_id, step, step)
        else:
            rows = session.execute(
                select(models.Decision).where(models.Decision.run_id == run_id).order_by(models.Decision.seq)
            ).scalars()
            data = [decision_public(row) for row in rows]
    return DecisionsPublic(data=data, count=len(data))
