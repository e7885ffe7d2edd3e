"""Loading a run's row: the one statement every service starts from (with the row lock for writers)."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import Select, bindparam, select
from sqlalchemy.orm import Session, defer

from plateau_tracker.server.db import models
from plateau_tracker.server.errors import NotFoundError


def get_run_row(
    session: Session,
    run_id: int,
    *,
    lock: bool = False,
    unloaded: tuple[Any, ...] = (),
    also: tuple[Any, ...] = (),
) -> models.Run:
    """The run, or :class:`NotFoundError`. ``lock`` takes the row lock that serialises a run's writes;
    the ``unloaded`` columns are left unread until touched (their JSON is not parsed); ``also`` are
    expressions evaluated with the run in the same statement (ingest takes its experiment's shared lock
    that way, without a round trip of its own)."""
    run = session.execute(_run_query(lock, unloaded, also), {"run_id": run_id}).scalar_one_or_none()
    if not isinstance(run, models.Run):
        raise NotFoundError(f"run {run_id} does not exist")
    return run


@functools.cache
def _run_query(lock: bool, unloaded: tuple[Any, ...], also: tuple[Any, ...]) -> Select[Any]:
    """The statement behind :func:`get_run_row`, built once: building it (with its loader options) cost
    more than running it, on every ingest."""
    query: Select[Any] = select(models.Run, *also).where(models.Run.id == bindparam("run_id"))
    query = query.options(*(defer(column) for column in unloaded))
    # FOR NO KEY UPDATE, not FOR UPDATE: it serialises the run's writers just as well, and lets other
    # transactions insert rows that refer to the run (a view's build adds every run's rows; under FOR
    # UPDATE it waited for the run's batch while that batch waited for the build: a deadlock).
    return query.with_for_update(key_share=True) if lock else query
