"""Runs whose trainer went silent: marked ``crashed`` after the heartbeat time, revived by their next word.

Every ingest and every heartbeat (``POST /runs/{id}/heartbeat``, which the SDK sends while its loop logs
nothing) moves a run's ``last_heartbeat``. A sweep in each tracker process marks every running run silent
for longer than ``crash_after_s`` as ``crashed``, with its end at its last heartbeat, and queues the
``crashed`` webhook in the same transaction. A crashed run that speaks again (a point or a heartbeat: a
trainer that was only paused, or a network that came back) is running again, its end cleared.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta, timezone

from sqlalchemy import select
from sqlalchemy.orm import Session

from plateau_tracker.server.db import models
from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.services import cohort_view, webhooks
from plateau_tracker.server.services.run_rows import get_run_row
from plateau_tracker.server.services.wakeups import announce

logger = logging.getLogger(__name__)

# Runs marked per transaction: a sweep after a long outage of the tracker marks many, in bounded steps.
_BATCH = 500


def mark_silent(db: Database, crash_after_s: float, now: datetime | None = None) -> list[int]:
    """Mark ``crashed`` every running run whose last heartbeat is older than ``crash_after_s``; their ids.

    Several processes may sweep at once: the update is conditional on the run still running, under the
    run's row lock (skipped when another transaction holds it: that run is being written, so not silent)."""
    cutoff = (now or datetime.now(timezone.utc)) - timedelta(seconds=crash_after_s)
    marked: list[int] = []
    while True:
        with db.session(write=True) as session:
            query = (
                select(models.Run)
                .where(models.Run.status == "running", models.Run.last_heartbeat < cutoff)
                .order_by(models.Run.id)
                .limit(_BATCH)
            )
            if not db.is_sqlite:
                query = query.with_for_update(skip_locked=True)
            silent = list(session.execute(query).scalars())
            for run in silent:
                run.status = "crashed"
                run.ended_at = run.last_heartbeat
                cohort_view.refresh(session, run)
                queued = webhooks.enqueue(session, run, "crashed", None)
                announce(session, run.id, deliveries=queued > 0)
            session.flush()
        marked += [run.id for run in silent]
        if len(silent) < _BATCH:
            return marked


def revive(session: Session, run: models.Run) -> None:
    """A crashed run that speaks again is running again (call under its row lock)."""
    if run.status != "crashed":
        return
    run.status = "running"
    run.ended_at = None
    # Written now: ingest writes the rest of the row's changes itself, after this.
    session.flush()
    cohort_view.refresh(session, run)  # it no longer counts among its experiment's finished runs


def heartbeat(db: Database, run_id: int) -> None:
    """The trainer is alive though it logs nothing now: move the run's heartbeat, reviving it if crashed."""
    with db.session(write=True) as session:
        run = get_run_row(session, run_id, lock=True)
        run.last_heartbeat = datetime.now(timezone.utc)
        revive(session, run)


async def sweep_forever(db: Database, crash_after_s: float) -> None:
    """Sweep every fifth of the heartbeat time (at most every 30 s) until cancelled; a failed sweep (the
    database away) is logged and tried again at the next."""
    interval = min(30.0, crash_after_s / 5)
    while True:
        await asyncio.sleep(interval)
        try:
            marked = await asyncio.to_thread(mark_silent, db, crash_after_s)
        except Exception:
            logger.warning("plateau: the sweep for silent runs failed; trying again", exc_info=True)
            continue
        if marked:
            logger.info("plateau: %d silent run(s) marked crashed: %s", len(marked), marked[:20])
