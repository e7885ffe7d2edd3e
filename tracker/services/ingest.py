"""Batch ingest: points, rule state and decisions in one transaction, applied at most once per batch id."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import bindparam, exists, func, insert, literal, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from plateau_tracker.server.db import models
from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.policy import PolicySpec
from plateau_tracker.server.schemas._common import as_utc
from plateau_tracker.server.schemas.decisions import DecisionPublic
from plateau_tracker.server.schemas.metrics import IngestResult, MetricBatch
from plateau_tracker.server.services import _point_store, cohort_view, decisions, rung_view, wakeups
from plateau_tracker.server.services.convert import decision_public, judged_step, no_decision
from plateau_tracker.server.services.crashes import revive
from plateau_tracker.server.services.judging import NewPoints, judge
from plateau_tracker.server.services.keys import KeyCache
from plateau_tracker.server.services.latest_decisions import LatestDecisions
from plateau_tracker.server.services.policies import PolicyCache, run_identity
from plateau_tracker.server.services.run_memory import RunMemories, RunMemory
from plateau_tracker.server.services.run_rows import get_run_row

_log = logging.getLogger("plateau.tracker")

BatchPoints = dict[tuple[str, int], dict[int, tuple[float, float]]]
"""A batch's points per series, as sent: (key, rank) -> step -> (value, wall time)."""


@dataclass(frozen=True)
class Ingested:
    """What :func:`ingest` did: the trainer's answer, and how many webhook deliveries it queued (the
    delivery loop is woken only when there are some)."""

    result: IngestResult
    deliveries: int


def ingest(
    db: Database,
    keys: KeyCache,
    run_id: int,
    batch: MetricBatch,
    policies: PolicyCache | None = None,
    latest: LatestDecisions | None = None,
    memories: RunMemories | None = None,
) -> Ingested:
    """Store ``batch`` for the run and judge the monitored metric's new steps. ``policies``: the app's
    parsed policies (without it, the run's policy is parsed for this batch); ``latest``: the app's latest
    decisions of its runs (without it, the run's latest decision is read for this batch).

    Everything happens in one transaction under the run's row lock, so a crash stores all of it or none,
    and two replicas never judge the same step twice. On SQLite, batches that arrive together share that
    transaction, each in a savepoint of its own (:mod:`plateau_tracker.server.db.group_commit`): the same
    outcome for each, one commit for all.
    """
    now = time.time()

    def work(session: Session) -> tuple[Ingested, Callable[[], None]]:
        return _ingest_in(session, db, keys, run_id, batch, (policies, latest, memories), now)

    if db.write_groups is not None:
        outcome, after_commit = db.write_groups.run(work, urgent=is_urgent(policies, run_id, batch))
    else:
        with db.session(write=True) as session:
            outcome, after_commit = work(session)
    after_commit()
    return outcome


LINES_AT_ONCE = 4
"""Batches of one request stored at once on a server database, each in a transaction of its own (most of
each transaction is waiting for the server)."""


def ingest_all(
    db: Database,
    keys: KeyCache,
    batches: list[tuple[int, MetricBatch]],
    policies: PolicyCache | None = None,
    latest: LatestDecisions | None = None,
    memories: RunMemories | None = None,
) -> list[Ingested | Exception]:
    """:func:`ingest` for each ``(run id, batch)``, in order: what each did, or the error that kept it from
    being stored (each batch is stored whole or not at all, whatever happens to the others). On SQLite
    they share group-commit transactions (:mod:`plateau_tracker.server.db.group_commit`); elsewhere each
    batch is a transaction of its own, so that no transaction holds the row locks of many runs, and
    :data:`LINES_AT_ONCE` of them run at a time."""
    now = time.time()

    def work_of(run_id: int, batch: MetricBatch) -> Callable[[Session], tuple[Ingested, Callable[[], None]]]:
        return lambda session: _ingest_in(session, db, keys, run_id, batch, (policies, latest, memories), now)

    works = [work_of(run_id, batch) for run_id, batch in batches]
    if db.write_groups is not None:
        urgent = [is_urgent(policies, run_id, batch) for run_id, batch in batches]
        outcomes = db.write_groups.run_all(works, urgent=urgent)
    else:

        def alone(work: Callable[[Session], tuple[Ingested, Callable[[], None]]]) -> Any:
            try:
                with db.session(write=True) as session:
                    return work(session)
            except Exception as exc:  # this batch's alone: the others go on
                return exc

        # On threads of this request's own: a pool shared by requests queued one request's batches (a
        # loop waiting on them) behind another's.
        with ThreadPoolExecutor(min(LINES_AT_ONCE, len(works) or 1)) as pool:
            outcomes = list(pool.map(alone, works))
    done: list[Ingested | Exception] = []
    for outcome in outcomes:
        if isinstance(outcome, Exception):
            done.append(outcome)
            continue
        ingested, after_commit = outcome
        after_commit()
        done.append(ingested)
    return done


def is_urgent(policies: PolicyCache | None, run_id: int, batch: MetricBatch) -> bool:
    """Whether a trainer waits on the batch's answer: it brings a key the run's rules judge, or the run's
    rules are not known here yet. SQLite's writer takes such batches first."""
    watched = policies.watched(run_id) if policies is not None else None
    if watched is None:
        return True
    if not watched:
        return False
    return any(point.key in watched for point in batch.points or ()) or any(
        column.key in watched for column in batch.series or ()
    )


def _ingest_in(
    session: Session,
    db: Database,
    keys: KeyCache,
    run_id: int,
    batch: MetricBatch,
    caches: tuple[PolicyCache | None, LatestDecisions | None, RunMemories | None],
    now: float,
) -> tuple[Ingested, Callable[[], None]]:
    """:func:`ingest`'s transaction: what it answers, and what is done once it has committed (the new keys
    remembered, the rung views it missed built)."""
    run = get_run_row(
        session,
        run_id,
        lock=True,
        unloaded=_UNUSED_BY_INGEST,
        also=() if db.is_sqlite else _WITH_RUNG_LOCK,
    )
    if session.execute(_SEEN, {"run_id": run_id, "batch_id": batch.batch_id}).first() is not None:
        return Ingested(_replayed(session, run, batch), 0), _nothing
    policies, latest, memories = caches
    memory = memories.take(run) if memories is not None else None
    revive(session, run)
    gathered = _gather(batch, now, as_utc(run.started_at).timestamp() - CLOCK_SKEW_S)
    key_ids, created_keys = keys.resolve(session, {key for key, _ in gathered})
    fresh = _store_new_points(session, run_id, key_ids, gathered, memory)
    rung_view.record(session, run, fresh)
    accepted = sum(len(points) for points in fresh.values())
    # "is not None": the cache has a length, and an empty one is falsy; it would never fill.
    policy = None if run.policy is None else (policies.of(run) if policies is not None else _parse(run))
    if policies is not None:
        policies.note_watched(run_id, policy)
    stopped_before = run.stop_step
    judged = judge(session, run, policy, key_ids, fresh, now, memory)
    if run.status != "running" and (accepted or run.stop_step != stopped_before):
        # Points or a stop after the run finished change what its cohort compares with.
        cohort_view.refresh(session, run)
    duplicates = batch.size() - accepted
    run.write_seq += 1  # written with the run's progress
    _note_batch(session, db, run, batch.batch_id, (accepted, duplicates), now, judged.deliveries > 0)
    if judged.deliveries:
        session.flush()  # the webhook deliveries the rules queued (autoflush is off)
    decision, to_remember = _latest_decision(session, run, judged.decisions, latest)
    result = IngestResult(
        accepted=accepted,
        duplicates=duplicates,
        decision=decision,
        judged_step=judged_step(run),
        decisions=[decision_public(row) for row in judged.decisions],
        late_points=judged.late_points,
    )
    experiment_id, unviewed = run.experiment_id, judged.unviewed_rungs
    decision_seq, identity, write_seq = run.decision_seq, run_identity(run), run.write_seq

    def after_commit() -> None:
        keys.remember(created_keys)
        if memories is not None and memory is not None:
            memories.keep(identity, write_seq, memory)
        if latest is not None and to_remember is not None:
            latest.remember(identity, decision_seq, to_remember.decision)
        _build_rung_views(db, experiment_id, unviewed)

    return Ingested(result, judged.deliveries), after_commit


@dataclass(frozen=True)
class _Newest:
    """What :class:`LatestDecisions` is to remember for a run once the batch has committed: its newest
    decision that is not an alert (None: every decision so far is an alert)."""

    decision: DecisionPublic | None


def _latest_decision(
    session: Session, run: models.Run, made: list[models.Decision], latest: LatestDecisions | None
) -> tuple[DecisionPublic, _Newest | None]:
    """The run's newest decision for the trainer (alerts are for people), and what to remember of it once
    the batch has committed (None: nothing new). The newest non-alert this batch made is it; else the one
    remembered at the run's ``decision_seq``; else it is read."""
    for row in reversed(made):  # in the order of their seq
        if row.action != "alert":
            answer = decision_public(row)
            return answer, _Newest(answer)
    known = latest.get(run) if latest is not None else None
    if known is not None:
        return known, None
    newest = decisions.latest_row(session, run)
    if newest is None:  # no decision yet (nothing to remember), or only alerts
        return no_decision(run), _Newest(None) if run.decision_seq else None
    answer = decision_public(newest)
    return answer, _Newest(answer)


def _nothing() -> None:
    """Nothing to do after the commit (a batch applied before)."""


def _replayed(session: Session, run: models.Run, batch: MetricBatch) -> IngestResult:
    """The answer to a batch applied before (a retry): nothing stored, the run's decisions as they are."""
    return IngestResult(
        accepted=0,
        duplicates=batch.size(),
        replayed=True,
        decision=decisions.latest(session, run),
        judged_step=judged_step(run),
        decisions=decisions.at_steps(session, run.id, *_step_range(batch)),
    )


def _note_batch(
    session: Session,
    db: Database,
    run: models.Run,
    batch_id: str,
    counts: tuple[int, int],
    now: float,
    deliveries: bool,
) -> None:
    """The run's heartbeat and what judging moved (its judged step, stop and decision count); the batch id
    recorded, with its ``counts`` (points accepted, duplicates), so that a retry of it is applied at most
    once; and, on PostgreSQL, when the batch brought points, the notification that wakes other replicas'
    long-polls (and their webhook senders when ``deliveries`` were enqueued) at commit.

    The run's row is written in Core, in the statement that writes the heartbeat: through the ORM it was a
    unit of work and a second UPDATE on every judged batch. The attributes are then marked as stored, so
    the session's flush does not write them again (and a savepoint rolled back under them expires the
    session: :mod:`plateau_tracker.server.db.group_commit`). On PostgreSQL, where every statement is a round
    trip to the server, the record and the notification ride in the same statement as common table
    expressions."""
    moment = datetime.fromtimestamp(now, timezone.utc)
    progress = {name: getattr(run, name) for name in _PROGRESS_COLUMNS}
    accepted, duplicates = counts
    params = {
        "run_id": run.id,
        "moment": moment,
        "batch_id": batch_id,
        "accepted": accepted,
        "duplicates": duplicates,
        **progress,
    }
    if db.is_sqlite:  # nothing to notify: one process writes, and its wake-ups are in memory
        session.execute(_PROGRESS, params)
        session.execute(_RECORD, params)
    elif accepted:
        notice = {"channel": wakeups.CHANNEL, "payload": wakeups.payload(run.id, deliveries=deliveries)}
        session.execute(_NOTED_AND_ANNOUNCED, {**params, **notice})
    else:
        session.execute(_NOTED, params)
    for name, value in progress.items():
        set_committed_value(run, name, value)


def _build_rung_views(db: Database, experiment_id: int, rungs: list[tuple[int, int]]) -> None:
    """After the commit, in its own transaction: a build must not wait for batches while holding the run's
    lock (tracker/services/rung_view.py). The answer stands whether or not it succeeds."""
    for key_id, rung_step in rungs:
        try:
            rung_view.build(db, experiment_id, key_id, rung_step)
        except Exception:
            _log.exception("building the view of rung %s of experiment %s failed", rung_step, experiment_id)


# Ingest reads and writes the run's progress, never its config, tags or summary: left unloaded, their JSON
# is not parsed on every batch.
CLOCK_SKEW_S = 300.0
"""How far a client's clock may run ahead of the tracker's (or a point predate its run's start) before the
tracker keeps its own clock for the point instead."""
_UNUSED_BY_INGEST = (models.Run.config, models.Run.tags, models.Run.summary)
# On PostgreSQL, the experiment's lock shared with the run's row, for rung_view.record (no round trip).
_WITH_RUNG_LOCK = (rung_view.SHARED_LOCK,)

# The statements of every batch, built once and in Core: building a statement cost more than running it,
# and the ORM's unit of work (a heartbeat set on the run object, flushed) several times more.
_batches = models.table_of(models.IngestBatch)
_run = models.table_of(models.Run)
_SEEN = select(_batches.c.run_id).where(
    _batches.c.run_id == bindparam("run_id"), _batches.c.batch_id == bindparam("batch_id")
)
_RECORD = insert(_batches).values(
    run_id=bindparam("run_id"),
    batch_id=bindparam("batch_id"),
    accepted=bindparam("accepted"),
    duplicates=bindparam("duplicates"),
    created_at=bindparam("moment"),
)
# What judging changes on the run's row (tracker/services/judging.py), written with the heartbeat.
_PROGRESS_COLUMNS = ("judged_step", "stop_step", "stop_rule", "decision_seq", "write_seq")
_PROGRESS = (
    update(_run)
    .where(_run.c.id == bindparam("run_id"))
    .values(
        last_heartbeat=bindparam("moment"),
        **{name: bindparam(name, type_=_run.c[name].type) for name in _PROGRESS_COLUMNS},
    )
)
# PostgreSQL: the progress, the record and the notification in one statement (pg_notify runs once: a CTE
# calling a volatile function is evaluated once, and is delivered at commit as NOTIFY is).
_NOTED = _PROGRESS.add_cte(_RECORD.cte("recorded"))
_ANNOUNCED = select(func.pg_notify(bindparam("channel"), bindparam("payload")).label("sent")).cte("announced")
_NOTED_AND_ANNOUNCED = _NOTED.add_cte(_ANNOUNCED).where(exists(select(literal(1)).select_from(_ANNOUNCED)))


def _step_range(batch: MetricBatch) -> tuple[int, int]:
    """The first and last step of a batch's points (a replayed batch is answered with its decisions)."""
    steps = [point.step for point in batch.points or ()]
    for column in batch.series or ():
        if column.steps:
            steps += [min(column.steps), max(column.steps)]
    return (min(steps), max(steps)) if steps else (0, -1)


def _gather(batch: MetricBatch, now: float, earliest: float) -> BatchPoints:
    """The batch's points per (key, rank) series, in both wire forms; within the batch the first value
    of a step wins. A point without a wall time, or with one before ``earliest`` or past the tracker's
    clock by more than :data:`CLOCK_SKEW_S`, takes the tracker's clock: the time rules and the summary read
    these times, and a client's clock set a year ahead must not stop a run, nor disable its budget."""
    latest = now + CLOCK_SKEW_S
    series: BatchPoints = {}
    for point in batch.points or ():
        wall = point.wall_time
        wall_time = now if wall is None or not earliest <= wall <= latest else wall
        series.setdefault((point.key, point.rank), {}).setdefault(point.step, (point.value, wall_time))
    for column in batch.series or ():
        walls = column.wall_times if column.wall_times is not None else [now] * len(column.steps)
        if walls and not earliest <= min(walls) <= max(walls) <= latest:
            walls = [wall if earliest <= wall <= latest else now for wall in walls]
        pairs = zip(column.values, walls, strict=True)
        points = series.get((column.key, column.rank))
        if points is None:
            points = series[(column.key, column.rank)] = dict(zip(column.steps, pairs, strict=True))
            if len(points) == len(column.steps):
                continue  # each step once: the common case, built in C
            points.clear()  # a step repeated in the column: the first value must win
            pairs = zip(column.values, walls, strict=True)
        for step, pair in zip(column.steps, pairs, strict=True):
            if step not in points:
                points[step] = pair
    return series


def _store_new_points(
    session: Session, run_id: int, key_ids: dict[str, int], gathered: BatchPoints, memory: RunMemory | None
) -> NewPoints:
    """Store the gathered points not stored yet (against the store the first value wins) and return them,
    keyed by key id. The stored steps are dropped from ``gathered``'s own dicts rather than copied."""
    series: NewPoints = {(key_ids[key], rank): points for (key, rank), points in gathered.items()}
    _point_store.store(session, run_id, series, memory.tails if memory is not None else None)
    return {pair: points for pair, points in series.items() if points}


def _parse(run: models.Run) -> PolicySpec:
    return PolicySpec.model_validate(run.policy)
