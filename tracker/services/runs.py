"""Runs: create or join by ``run_key``, read, list, finish."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import ColumnElement, bindparam, cast, exists, func, literal, select
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session

from plateau_tracker.server.db import models
from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.errors import ConflictError
from plateau_tracker.server.schemas.runs import RunCreate, RunFinish, RunPublic, RunsPublic
from plateau_tracker.server.services import cohort_view, decisions, webhooks
from plateau_tracker.server.services._upsert import insert_ignore
from plateau_tracker.server.services.convert import run_public
from plateau_tracker.server.services.run_rows import get_run_row
from plateau_tracker.server.services.wakeups import announce


def _aware(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes (stored in UTC)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def ensure_project(session: Session, name: str) -> int:
    """The id of project ``name``, created if it does not exist yet."""
    return _found_or_added(session, _PROJECT_ID, {"name": name}, models.Project)


def _experiment_id(session: Session, project_id: int, name: str) -> int:
    return _found_or_added(
        session, _EXPERIMENT_ID, {"project_id": project_id, "name": name}, models.Experiment
    )


def _found_or_added(session: Session, query: Any, key: dict[str, Any], model: type[models.Base]) -> int:
    """The id ``query`` finds for ``key``; when there is none, the row (``key`` and the time) is inserted
    first. Insert-or-ignore, then read back: creators racing on PostgreSQL all get the one row."""
    found: int | None = session.execute(query, key).scalar_one_or_none()
    if found is not None:
        return found
    session.execute(insert_ignore(session, model), [{**key, "created_at": _now()}])
    return int(session.execute(query, key).scalar_one())


def _public(
    session: Session, run: models.Run, *, joined: bool = False, names: tuple[str, str] | None = None
) -> RunPublic:
    """The run as answered, with its project's and experiment's ``names`` (read when not given: an
    experiment belongs to the run's project)."""
    if names is None:
        found = session.execute(_NAMES, {"experiment_id": run.experiment_id}).first()
        if found is None:  # foreign keys make this unreachable
            raise RuntimeError(f"run {run.id} has lost its project or experiment")
        names = (found[0], found[1])
    return run_public(
        run,
        project=names[0],
        experiment=names[1],
        decision=decisions.latest(session, run),
        joined=joined,
    )


# The statements of every run's creation and end, built once and in Core where no object is wanted:
# building them cost about as much as running them.
_projects = models.table_of(models.Project).c
_experiments = models.table_of(models.Experiment).c
_PROJECT_ID = select(_projects.id).where(_projects.name == bindparam("name"))
_EXPERIMENT_ID = select(_experiments.id).where(
    _experiments.project_id == bindparam("project_id"), _experiments.name == bindparam("name")
)
_NAMES = (
    select(_projects.name, _experiments.name)
    .join_from(models.table_of(models.Experiment), models.table_of(models.Project))
    .where(_experiments.id == bindparam("experiment_id"))
)
_RUN_BY_KEY = select(models.Run).where(
    models.Run.project_id == bindparam("project_id"), models.Run.run_key == bindparam("run_key")
)


def create_or_join(db: Database, request: RunCreate) -> RunPublic:
    """Create the run, or return the one with the same ``run_key`` in the project (``joined=True``).

    A joiner's name, config and policy are ignored: the first creator's stand. A joiner in another
    experiment is a conflict.
    """
    run_key = request.run_key or uuid.uuid4().hex
    with db.session(write=True) as session:
        project_id = ensure_project(session, request.project)
        experiment_id = _experiment_id(session, project_id, request.experiment)
        now = _now()
        # Ranks of one job create the same run_key at the same moment: insert-or-ignore, then read back,
        # so exactly one insert wins and the others join (a plain check-then-insert races on PostgreSQL).
        created_id = session.execute(
            insert_ignore(session, models.Run)
            .values(
                **{
                    "project_id": project_id,
                    "experiment_id": experiment_id,
                    "run_key": run_key,
                    "name": request.name or f"run-{run_key[:8]}",
                    "config": request.config,
                    "tags": request.tags,
                    "policy": request.policy.model_dump(mode="json") if request.policy else None,
                    "status": "running",
                    "world_size": request.world_size,
                    "started_at": now if request.started_at is None else min(now, _aware(request.started_at)),
                    "ended_at": None,
                    "last_heartbeat": now,
                    "judged_step": -1,
                    "decision_seq": 0,
                    "stop_step": None,
                    "stop_rule": None,
                    "planned_steps": request.planned_steps,
                    "summary": {},
                }
            )
            .returning(models.Run.id)
        ).scalar_one_or_none()
        run = session.execute(_RUN_BY_KEY, {"project_id": project_id, "run_key": run_key}).scalar_one()
        if run.experiment_id != experiment_id:
            raise ConflictError(
                f"run_key {run_key!r} belongs to run {run.id} of another experiment "
                f"than {request.experiment!r}"
            )
        names = (request.project, request.experiment)
        return _public(session, run, joined=created_id is None, names=names)


def get(db: Database, run_id: int) -> RunPublic:
    with db.session() as session:
        return _public(session, get_run_row(session, run_id))


def list_runs(
    db: Database,
    *,
    project: str | None = None,
    experiment: str | None = None,
    status: Sequence[str] | None = None,
    name: str | None = None,
    tags: Sequence[str] = (),
    limit: int = 100,
    offset: int = 0,
    before: int | None = None,
) -> RunsPublic:
    """Runs, newest first, filtered by project, experiment, statuses, a part of the name and tags (a run
    holding every one of ``tags``), each in SQL; ``count`` is
    the total matched. ``before`` (a run id, the last page's ``next``) reads the page after it by key,
    which costs the same on page 1 and page 100 (``offset`` walks past every skipped run).

    Three statements whatever the page holds: the count, the runs with their project and experiment
    names, and their latest decisions (the runs list used to cost one query per run)."""
    run, project_table, experiment_table = models.Run, models.Project, models.Experiment
    query = (
        select(run, project_table.name, experiment_table.name)
        .join(project_table, project_table.id == run.project_id)
        .join(experiment_table, experiment_table.id == run.experiment_id)
    )
    if project is not None:
        query = query.where(project_table.name == project)
    if experiment is not None:
        query = query.where(experiment_table.name == experiment)
    if status:
        query = query.where(run.status.in_(status))
    if name is not None:
        query = query.where(func.lower(run.name).contains(name.lower(), autoescape=True))
    for tag in tags:
        query = query.where(_has_tag(db, tag))
    with db.session() as session:
        count = session.execute(select(func.count()).select_from(query.subquery())).scalar_one()
        page = query.order_by(run.id.desc()).limit(limit)
        # A cursor past every id the stores hold is before every run (PostgreSQL refuses the comparison).
        page = page.where(run.id < min(before, models.MAX_ID)) if before is not None else page.offset(offset)
        rows = session.execute(page).all()
        latest = decisions.latest_of(session, [row[0] for row in rows])
        data = [
            run_public(row[0], project=row[1], experiment=row[2], decision=latest[row[0].id]) for row in rows
        ]
    following = data[-1].id if len(data) == limit else None
    return RunsPublic(data=data, count=count, next=following)


def _has_tag(db: Database, tag: str) -> ColumnElement[bool]:
    """The run's tags (a JSON list) hold ``tag``: SQLite walks the list with ``json_each``, PostgreSQL
    asks ``@>`` of it as JSONB."""
    if db.is_sqlite:
        item = func.json_each(models.Run.tags).table_valued("value").alias("tag_item")
        return exists(select(literal(1)).select_from(item).where(item.c.value == tag))
    return cast(models.Run.tags, JSONB).contains([tag])


def finish(db: Database, run_id: int, request: RunFinish) -> RunPublic:
    """Mark the run ended with ``status``. Finishing twice keeps the first end time."""
    with db.session(write=True) as session:
        run = get_run_row(session, run_id, lock=True)
        # A run marked crashed that finishes after all ends now: its end was only its last heartbeat.
        first_end = run.ended_at is None or run.status == "crashed"
        was_running = run.status in ("running", "crashed")
        run.status = request.status
        if was_running:
            cohort_view.refresh(session, run)  # it now counts among its experiment's finished runs
        if first_end:
            now = _now()
            ended = request.ended_at
            if ended is not None and ended.tzinfo is None:
                ended = ended.replace(tzinfo=timezone.utc)
            # A replayed end time stays within [started, now]: a wrong clock cannot end a run before it
            # began or after the tracker heard of it.
            run.ended_at = now if ended is None else min(now, max(_aware(run.started_at), ended))
            webhooks.enqueue(session, run, "run_finished", None)
        announce(session, run_id, deliveries=first_end)
        session.flush()
        return _public(session, run)
