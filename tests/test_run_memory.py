"""What a worker remembers of a run between batches (tracker.services.run_memory) never stands in for what
the database holds: two workers that take turns on one run, each with its own memory, store and judge
exactly what one worker alone does, on SQLite and on PostgreSQL."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.schemas.metrics import MetricBatch
from plateau_tracker.server.schemas.runs import RunCreate
from plateau_tracker.server.services import ingest, runs
from plateau_tracker.server.services.block_format import SUMMARY_COLUMNS
from plateau_tracker.server.services.judging import as_stored
from plateau_tracker.server.services.keys import KeyCache
from plateau_tracker.server.services.policies import PolicyCache
from plateau_tracker.server.services.run_memory import RunMemories

POLICY = {
    "monitor": "val",
    "mode": "min",
    "rules": [
        {"rule": "patience", "patience": 4},
        {"rule": "checkpoint"},
        {"rule": "plateau"},
        {"rule": "divergence", "factor": 10.0},
    ],
}


@pytest.fixture
def database(store_url: str) -> Iterator[Database]:
    db = Database(store_url)
    yield db
    db.dispose()


def _batches(start_s: float) -> list[MetricBatch]:
    """A run's batches: training keys every step, a validation value every 5 steps (falling, then rising),
    and one batch out of order (steps inside blocks stored already); wall times from ``start_s`` on."""
    out = []
    for start in range(0, 600, 30):
        steps = list(range(start, start + 30))
        walls = [start_s + step / 100 for step in steps]
        series = [
            {"key": "loss", "steps": steps, "values": [1.0 / (s + 1) for s in steps], "wall_times": walls},
            {
                "key": "val",
                "steps": steps[::5],
                "values": [abs(s - 400) / 400 + 0.1 for s in steps[::5]],
                "wall_times": walls[::5],
            },
        ]
        out.append(MetricBatch.model_validate({"batch_id": f"b{start}", "series": series}))
    late = {
        "key": "loss",
        "steps": [7, 700, 701],
        "values": [math.nan, 0.5, 0.4],
        "wall_times": [start_s] * 3,
    }
    out.insert(7, MetricBatch.model_validate({"batch_id": "late", "series": [late]}))
    return out


def _ingest_all(
    database: Database, workers: int, start_s: float
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every batch of a new run, worker ``i % workers`` taking batch i; the answers, and what is stored."""
    keys = KeyCache()
    caches = [(PolicyCache(), RunMemories()) for _ in range(workers)]
    run = runs.create_or_join(database, RunCreate(project="p", experiment="e", policy=POLICY))
    answers = []
    for index, batch in enumerate(_batches(start_s)):
        policies, memories = caches[index % workers]
        outcome = ingest.ingest(database, keys, run.id, batch, policies, None, memories)
        answers.append(outcome.result.model_dump(exclude=_MOMENTS))
    with database.session() as session:
        blocks = session.execute(
            text(
                f"SELECT key_id, rank, block, {', '.join(SUMMARY_COLUMNS)}, last_step, step_data, value_data "
                "FROM metric_block WHERE run_id = :run ORDER BY key_id, rank, block"
            ),
            {"run": run.id},
        ).all()
        states = session.execute(
            text("SELECT rule_index, state FROM rule_state WHERE run_id = :run ORDER BY rule_index"),
            {"run": run.id},
        ).all()
    return answers, {"blocks": [tuple(row) for row in blocks], "states": [tuple(row) for row in states]}


_MOMENTS: Any = {"decision": {"created_at"}, "decisions": {"__all__": {"created_at"}}}


def test_two_workers_taking_turns_store_and_judge_as_one_does(database: Database) -> None:
    start_s = time.time() + 60  # after both runs start: the points keep their own wall times
    alone = _ingest_all(database, 1, start_s)
    turns = _ingest_all(database, 2, start_s)
    assert [a["decision"]["action"] for a in alone[0]][-1] == "stop"
    assert turns[0] == alone[0]
    assert repr(turns[1]) == repr(alone[1])  # NaN compares equal in its repr


def test_states_are_remembered_as_they_read_back() -> None:
    state = {"best": math.inf, "history": (1.0, math.nan), "by_step": {3: 0.5, "x": -math.inf}, "n": 2}
    assert as_stored(state) == {
        "best": "Infinity",
        "history": [1.0, "NaN"],
        "by_step": {"3": 0.5, "x": "-Infinity"},
        "n": 2,
    }
