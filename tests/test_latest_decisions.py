"""Ingest's answer carries the run's latest decision for the trainer without reading it back on every
batch (tracker.services.latest_decisions): the answer is always the decision a fresh read gives, on
SQLite and on PostgreSQL, through checkpoints, alerts, late points, a stop and training-only batches."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.schemas.metrics import MetricBatch
from plateau_tracker.server.schemas.runs import RunCreate
from plateau_tracker.server.services import decisions, ingest, runs
from plateau_tracker.server.services.keys import KeyCache
from plateau_tracker.server.services.latest_decisions import LatestDecisions
from plateau_tracker.server.services.policies import run_identity
from plateau_tracker.server.services.run_rows import get_run_row

POLICY = {
    "monitor": "val",
    "mode": "min",
    "rules": [{"rule": "patience", "patience": 3}, {"rule": "checkpoint"}],
}


@pytest.fixture
def database(store_url: str) -> Iterator[Database]:
    db = Database(store_url)
    yield db
    db.dispose()


def _batch(batch_id: str, points: list[tuple[str, int, float]]) -> MetricBatch:
    return MetricBatch.model_validate(
        {"batch_id": batch_id, "points": [{"key": k, "step": s, "value": v} for k, s, v in points]}
    )


def _fresh(database: Database, run_id: int) -> dict[str, Any]:
    with database.session() as session:
        return decisions.latest(session, get_run_row(session, run_id)).model_dump()


def test_every_answer_is_the_latest_decision_as_a_fresh_read_gives_it(database: Database) -> None:
    keys, latest = KeyCache(), LatestDecisions()
    run = runs.create_or_join(database, RunCreate(project="p", experiment="e", policy=POLICY))
    batches = [
        [("loss", 0, 1.0)],  # training only, before any decision: "no decision yet"
        [("val", 0, 0.9)],  # a checkpoint
        [("loss", 1, 0.8)],  # training only: the checkpoint, remembered
        [("val", 1, 0.7), ("val", 2, 0.5)],  # two checkpoints in one batch: the newer
        [("loss", 3, 0.6)],
        [("val", 1, 0.1)],  # a late point: an alert, which the trainer's answer skips
        [("loss", 4, 0.5)],  # after the alert: the checkpoint at step 2 still
        [("val", 3, 0.6), ("val", 4, 0.6)],  # no new best: no decision
        [("val", 5, 0.6)],  # patience 3 runs out: the stop
        [("loss", 6, 0.4)],  # after the stop: the stop
    ]
    answers = []
    for number, points in enumerate(batches):
        answer = ingest.ingest(database, keys, run.id, _batch(f"b{number}", points), latest=latest)
        assert answer.result.decision.model_dump() == _fresh(database, run.id), number
        answers.append(answer.result.decision)
    assert [a.action for a in answers] == [
        "continue",
        "checkpoint",
        "checkpoint",
        "checkpoint",
        "checkpoint",
        "checkpoint",
        "checkpoint",
        "checkpoint",
        "stop",
        "stop",
    ]
    assert answers[3].step == 2
    assert answers[6].step == 2
    assert len(latest) == 1


def test_a_run_with_only_alerts_is_answered_continue_at_its_judged_step(database: Database) -> None:
    """The remembered answer of a run whose decisions are all alerts is "continue" at the run's judged
    step now, which moves without a decision."""
    keys, latest = KeyCache(), LatestDecisions()
    policy = {"monitor": "val", "mode": "min", "rules": [{"rule": "patience", "patience": 50}]}
    run = runs.create_or_join(database, RunCreate(project="p", experiment="e", policy=policy))
    ingest.ingest(database, keys, run.id, _batch("a", [("val", 5, 1.0)]), latest=latest)
    late = ingest.ingest(database, keys, run.id, _batch("b", [("val", 2, 1.0)]), latest=latest)
    assert [d.rule for d in late.result.decisions] == ["late"]
    for number, step in enumerate((6, 7, 8)):
        answer = ingest.ingest(
            database, keys, run.id, _batch(f"c{number}", [("val", step, 2.0)]), latest=latest
        )
        assert answer.result.decision.action == "continue"
        assert answer.result.decision.step == step
        assert answer.result.decision.model_dump() == _fresh(database, run.id)


def test_a_remembered_answer_is_used_only_at_its_decision_seq(database: Database) -> None:
    latest = LatestDecisions(capacity=2)
    created = [
        runs.create_or_join(database, RunCreate(project="p", experiment="e", name=f"r{i}")) for i in range(3)
    ]
    with database.session() as session:
        rows = [get_run_row(session, run.id) for run in created]
        first = decisions.latest(session, rows[0])
        latest.remember(run_identity(rows[0]), 0, first)
        assert latest.get(rows[0]) is first
        rows[0].decision_seq = 1  # the run decided something since
        assert latest.get(rows[0]) is None
        rows[0].decision_seq = 0
        latest.remember(run_identity(rows[1]), 0, first)
        latest.remember(
            run_identity(rows[2]), 0, first
        )  # past capacity: the least recently used (run 0) goes
        assert latest.get(rows[0]) is None
        assert latest.get(rows[2]) is first
        assert len(latest) == 2
        # A run that takes a deleted run's id (SQLite reuses the largest) is another run: not answered for.
        rows[2].started_at = rows[2].started_at + timedelta(microseconds=1)
        assert latest.get(rows[2]) is None
        session.rollback()
