"""Group commit on SQLite (tracker.db.group_commit): write jobs that arrive together share one transaction
and one commit, and each keeps the outcome of a transaction of its own."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import event, func, insert, select

from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.db.models import MetricBlock, MetricKey, Run
from plateau_tracker.server.db.prepare import prepare_schema
from plateau_tracker.server.errors import ConflictError, NotFoundError
from plateau_tracker.server.schemas.metrics import MetricBatch, parse_batch
from plateau_tracker.server.schemas.runs import RunCreate
from plateau_tracker.server.services import ingest, runs
from plateau_tracker.server.services.keys import KeyCache
from plateau_tracker.server.services.policies import PolicyCache


@pytest.fixture
def database(tmp_path: Path) -> Database:
    url = f"sqlite:///{tmp_path / 'plateau.db'}"
    prepare_schema(url)
    return Database(url)


def _commits(database: Database) -> list[int]:
    commits: list[int] = []
    event.listen(database.engine, "commit", lambda _connection: commits.append(1))
    return commits


def _names(database: Database) -> set[str]:
    with database.session() as session:
        return set(session.execute(select(MetricKey.name)).scalars())


def _group_behind_a_held_leader(database: Database, works: list) -> list[object]:
    """Runs ``works`` from threads that queue while a first job holds the writer, so the next leader
    takes them all in one group; each thread's outcome (its result or its error), in order."""
    assert database.write_groups is not None
    held, release = threading.Event(), threading.Event()

    def holder(session):
        held.set()
        release.wait(10)
        return "held"

    outcomes: list[object] = [None] * len(works)

    def call(index: int, work) -> None:
        try:
            outcomes[index] = database.write_groups.run(work)
        except BaseException as exc:  # the caller's own error, as a lone transaction would raise it
            outcomes[index] = exc

    first = threading.Thread(target=lambda: database.write_groups.run(holder))
    first.start()
    assert held.wait(10)
    threads = [threading.Thread(target=call, args=(i, w)) for i, w in enumerate(works)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while len(database.write_groups._waiting) < len(works) and time.monotonic() < deadline:
        time.sleep(0.005)
    release.set()
    first.join(10)
    for thread in threads:
        thread.join(10)
    return outcomes


def _add(name: str, fail: bool = False):
    def work(session):
        session.execute(insert(MetricKey).values(name=name))
        if fail:
            raise ValueError(f"{name} failed after writing")
        return name

    return work


def test_jobs_that_queue_together_share_one_commit(database: Database) -> None:
    commits = _commits(database)
    outcomes = _group_behind_a_held_leader(database, [_add(f"k{i}") for i in range(8)])
    assert outcomes == [f"k{i}" for i in range(8)]
    assert len(commits) == 1  # one for the eight (the holder wrote nothing, so it never began one)
    assert _names(database) == {f"k{i}" for i in range(8)}


def test_a_failing_job_is_rolled_back_alone_and_its_caller_gets_its_error(database: Database) -> None:
    works = [_add("a"), _add("b", fail=True), _add("c"), _add("a"), _add("d")]
    outcomes = _group_behind_a_held_leader(database, works)
    assert [outcomes[0], outcomes[2], outcomes[4]] == ["a", "c", "d"]
    assert isinstance(outcomes[1], ValueError)
    assert isinstance(outcomes[3], ConflictError)  # "a" again: unique name, as Database.session says it
    assert "conflicting write" in str(outcomes[3])
    assert _names(database) == {"a", "c", "d"}  # b's write undone with its savepoint, the others kept


class _Interrupted(BaseException):
    """Not an Exception: as KeyboardInterrupt or SystemExit raised inside a job."""


def test_a_job_interrupted_in_a_group_answers_every_caller_and_stores_nothing(database: Database) -> None:
    def interrupted(session):
        session.execute(insert(MetricKey).values(name="interrupted"))
        raise _Interrupted

    outcomes = _group_behind_a_held_leader(database, [_add("a"), interrupted, _add("c")])
    assert all(isinstance(outcome, _Interrupted) for outcome in outcomes), outcomes  # none left waiting
    assert _names(database) == set()


def test_a_lone_job_is_a_transaction_of_its_own(database: Database) -> None:
    assert database.write_groups is not None
    commits = _commits(database)
    assert database.write_groups.run(_add("x")) == "x"
    with pytest.raises(ConflictError):
        database.write_groups.run(_add("x"))
    with pytest.raises(ValueError, match="y failed after writing"):
        database.write_groups.run(_add("y", fail=True))
    assert len(commits) == 1
    assert _names(database) == {"x"}


def test_concurrent_batches_are_each_stored_once_and_answered_as_alone(database: Database) -> None:
    """16 threads post 25 batches each to 4 runs (two threads per batch id, so every batch is also
    retried at once), through ingest as the route calls it: every point stored once, every batch
    answered as accepted by exactly one of its two posts and as a replay by the other; a batch for a run
    that does not exist gets its own error."""
    keys = KeyCache()
    run_ids = [
        runs.create_or_join(database, RunCreate(project="p", experiment="e", name=f"r{i}")).id
        for i in range(4)
    ]
    answers: dict[str, list[int]] = {}
    lock = threading.Lock()
    missing: list[Exception] = []

    def post(thread: int) -> None:
        for n in range(25):
            run_id = run_ids[(thread // 2) % 4]
            batch_id = f"t{thread // 2}-{n}"
            step = (thread // 2) // 4 * 1000 + n
            body = (
                f'{{"batch_id": "{batch_id}", "points": [{{"key": "loss", "step": {step}, "value": {n}}}]}}'
            )
            answer = ingest.ingest(database, keys, run_id, parse_batch(body.encode()))
            with lock:
                answers.setdefault(batch_id, []).append(answer.result.accepted)
        try:
            ingest.ingest(database, keys, 999_999, parse_batch(b'{"batch_id": "x", "points": []}'))
        except NotFoundError as exc:
            missing.append(exc)

    threads = [threading.Thread(target=post, args=(t,)) for t in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(answers) == 8 * 25
    assert all(sorted(accepted) == [0, 1] for accepted in answers.values())
    assert len(missing) == 16
    with database.session() as session:
        stored = session.execute(select(func.sum(MetricBlock.points))).scalar_one()
    assert stored == 8 * 25


def test_a_batch_rolled_back_in_a_group_leaves_nothing_of_its_judging_to_the_next(database: Database) -> None:
    """Ingest writes a run's progress (judged step, decision count) in Core: when a batch that judged
    steps is rolled back to its savepoint, the next batch of the same run in the same group judges from
    what is stored, not from the rolled-back progress the session still held."""
    keys = KeyCache()
    policy = {"monitor": "val", "mode": "min", "rules": [{"rule": "checkpoint"}]}
    run_id = runs.create_or_join(database, RunCreate(project="p", experiment="e", policy=policy)).id
    now = time.time()

    def batch(batch_id: str, steps: range) -> MetricBatch:
        points = [{"key": "val", "step": s, "value": 1.0 / (s + 1)} for s in steps]
        return MetricBatch.model_validate({"batch_id": batch_id, "points": points})

    alone = (None, None, None)  # no caches: the policy parsed, the decision and the run read each batch

    def judged_then_failed(session):
        ingest._ingest_in(session, database, keys, run_id, batch("a", range(0, 6)), alone, now)
        raise ValueError("failed after judging")

    def judged(session):
        return ingest._ingest_in(
            session, database, keys, run_id, batch("b", range(0, 2)), (None, None, None), now
        )

    outcomes = _group_behind_a_held_leader(database, [judged_then_failed, judged])
    assert isinstance(outcomes[0], ValueError)
    answer = outcomes[1][0].result
    assert answer.judged_step == 1
    assert answer.late_points == 0
    assert [(d.seq, d.step) for d in answer.decisions] == [(1, 0), (2, 1)]
    with database.session() as session:
        stored = session.get(Run, run_id)
        assert (stored.judged_step, stored.decision_seq) == (1, 2)


def test_urgent_jobs_go_before_those_queued_earlier_and_alone(database: Database) -> None:
    """A job a trainer waits on (a judged batch) queued behind training-only jobs is run in the next group,
    in a group of urgent jobs only: it waits for the group being run, not for those queued before it."""
    assert database.write_groups is not None
    groups = database.write_groups
    held, release = threading.Event(), threading.Event()
    order: list[str] = []

    def holder(session):
        held.set()
        release.wait(10)
        return "held"

    def job(name: str):
        def work(session):
            order.append(name)
            session.execute(insert(MetricKey).values(name=name))
            return name

        return work

    commits = _commits(database)
    first = threading.Thread(target=lambda: groups.run(holder))
    first.start()
    assert held.wait(10)
    bulk = [f"train{i}" for i in range(40)]
    outcomes: dict[str, object] = {}
    threads = [
        threading.Thread(
            target=lambda: outcomes.update(zip(bulk, groups.run_all([job(n) for n in bulk]), strict=True))
        )
    ]
    threads[0].start()
    deadline = time.monotonic() + 10
    while len(groups._waiting) < len(bulk) and time.monotonic() < deadline:
        time.sleep(0.005)
    threads.append(
        threading.Thread(target=lambda: outcomes.update(judged=groups.run(job("judged"), urgent=True)))
    )
    threads[1].start()
    while not groups._urgent and time.monotonic() < deadline:
        time.sleep(0.005)
    release.set()
    for thread in [first, *threads]:
        thread.join(10)
    assert outcomes == {**{n: n for n in bulk}, "judged": "judged"}
    assert order[0] == "judged"
    assert order[1:] == bulk  # the others in the order they queued
    assert len(commits) == 2  # the judged job alone in its commit, then the 40 together
    assert _names(database) == {*bulk, "judged"}


def test_a_group_that_sees_an_urgent_job_arrive_commits_what_it_ran_and_lets_it_go_next(
    database: Database,
) -> None:
    """An urgent job that arrives while a group of others runs waits for the job being run and a commit,
    not for the rest of the group: those are put back first in line and run after it."""
    assert database.write_groups is not None
    groups = database.write_groups
    running, queued = threading.Event(), threading.Event()
    order: list[str] = []

    def job(name: str):
        def work(session):
            order.append(name)
            session.execute(insert(MetricKey).values(name=name))
            if name == "train2":
                running.set()
                assert queued.wait(10)
            return name

        return work

    commits = _commits(database)
    bulk = [f"train{i}" for i in range(10)]
    outcomes: dict[str, object] = {}
    group = threading.Thread(
        target=lambda: outcomes.update(zip(bulk, groups.run_all([job(n) for n in bulk]), strict=True))
    )
    group.start()
    assert running.wait(10)
    judged = threading.Thread(target=lambda: outcomes.update(judged=groups.run(job("judged"), urgent=True)))
    judged.start()
    deadline = time.monotonic() + 10
    while not groups._urgent and time.monotonic() < deadline:
        time.sleep(0.005)
    queued.set()
    group.join(10)
    judged.join(10)
    assert outcomes == {**{n: n for n in bulk}, "judged": "judged"}
    assert order == ["train0", "train1", "train2", "judged", *bulk[3:]]
    assert len(commits) == 3  # the first three, the judged job alone, the other seven
    assert _names(database) == {*bulk, "judged"}


def test_run_all_refuses_flags_that_do_not_match_its_jobs(database: Database) -> None:
    assert database.write_groups is not None
    with pytest.raises(ValueError, match="2 jobs, 1 urgent flags"):
        database.write_groups.run_all([_add("a"), _add("b")], urgent=[True])


def test_a_batch_is_urgent_when_it_brings_a_judged_key_or_its_run_is_not_known_yet(
    database: Database,
) -> None:
    """What SQLite's writer takes first (ingest.is_urgent): a run's first batch here, since its rules are
    not known yet; then only batches that bring the monitored key; never a batch of a run without rules."""
    keys, policies = KeyCache(), PolicyCache()
    policy = {"monitor": "val/acc", "rules": [{"rule": "patience", "patience": 3}]}
    watched = runs.create_or_join(database, RunCreate(project="p", experiment="e", policy=policy)).id
    unwatched = runs.create_or_join(database, RunCreate(project="p", experiment="e", name="plain")).id

    def batch(batch_id: str, *names: str) -> MetricBatch:
        points = [{"key": name, "step": 1, "value": 0.5} for name in names]
        return MetricBatch.model_validate({"batch_id": batch_id, "points": points})

    training, judged = batch("t", "train/loss", "lr"), batch("j", "train/loss", "val/acc")
    columns = MetricBatch.model_validate(
        {"batch_id": "c", "series": [{"key": "val/acc", "steps": [2], "values": [0.6]}]}
    )
    for run_id in (watched, unwatched):
        assert ingest.is_urgent(policies, run_id, training)  # nothing known of the run yet
        ingest.ingest(database, keys, run_id, batch(f"first-{run_id}", "lr"), policies)
    assert not ingest.is_urgent(policies, watched, training)
    assert ingest.is_urgent(policies, watched, judged)
    assert ingest.is_urgent(policies, watched, columns)
    assert not ingest.is_urgent(policies, unwatched, judged)
    assert ingest.is_urgent(None, watched, training)  # without the app's caches, every batch
