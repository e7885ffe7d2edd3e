"""Reading decisions: the latest, the verdict for one step, the whole history."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select, tuple_
from sqlalchemy.orm import Session

from plateau_tracker.server.db import models
from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.schemas.decisions import DecisionPublic, DecisionsPublic
from plateau_tracker.server.services.convert import decision_public, no_decision
from plateau_tracker.server.services.run_rows import get_run_row


def latest(session: Session, run: models.Run) -> DecisionPublic:
    """The run's newest decision for the trainer (alerts are for people), or ``continue`` if none."""
    row = latest_row(session, run)
    return decision_public(row) if row is not None else no_decision(run)


def latest_row(session: Session, run: models.Run) -> models.Decision | None:
    """The run's newest decision that is not an alert, or None (no decision yet, or only alerts)."""
    if run.decision_seq == 0:
        return None
    row = session.get(models.Decision, (run.id, run.decision_seq))
    if row is not None and row.action == "alert":
        row = session.execute(
            select(models.Decision)
            .where(models.Decision.run_id == run.id, models.Decision.action != "alert")
            .order_by(models.Decision.seq.desc())
            .limit(1)
        ).scalar_one_or_none()
    return row


def has_alert(session: Session, run_id: int, rule: str) -> bool:
    """Whether the run has an alert of ``rule`` already (the alerts said once a run)."""
    decision = models.Decision
    said = session.execute(
        select(decision.seq).where(decision.run_id == run_id, decision.rule == rule).limit(1)
    ).first()
    return said is not None


def latest_of(session: Session, runs: Sequence[models.Run]) -> dict[int, DecisionPublic]:
    """:func:`latest` for many runs in one statement (two when some run's newest decision is an alert):
    each run's newest decision is at its ``decision_seq``, read by primary key."""
    wanted = [(run.id, run.decision_seq) for run in runs if run.decision_seq]
    found: dict[int, DecisionPublic] = {}
    alerted: list[int] = []
    if wanted:
        key = tuple_(models.Decision.run_id, models.Decision.seq)
        for row in session.execute(select(models.Decision).where(key.in_(wanted))).scalars():
            if row.action == "alert":
                alerted.append(row.run_id)
            else:
                found[row.run_id] = decision_public(row)
    if alerted:  # the newest decision for the trainer is the newest that is not an alert
        newest = (
            select(models.Decision.run_id, func.max(models.Decision.seq).label("seq"))
            .where(models.Decision.run_id.in_(alerted), models.Decision.action != "alert")
            .group_by(models.Decision.run_id)
            .subquery()
        )
        rows = session.execute(
            select(models.Decision).join(
                newest, (models.Decision.run_id == newest.c.run_id) & (models.Decision.seq == newest.c.seq)
            )
        ).scalars()
        for row in rows:
            found[row.run_id] = decision_public(row)
    return {run.id: found.get(run.id) or no_decision(run) for run in runs}


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
