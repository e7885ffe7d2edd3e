"""The values a policy's rules read beside the monitored metric (a rate, a validation or training loss) that a
batch does not bring are read from what the run stored, in a fixed number of statements: the default names
tens of spellings of those series, and a shared tracker holds many of them for other runs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import event, select

from plateau_tracker.server.db import models
from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.schemas.metrics import MetricBatch
from plateau_tracker.server.schemas.runs import RunCreate
from plateau_tracker.server.services import runs
from plateau_tracker.server.services.ingest import ingest
from plateau_tracker.server.services.keys import KeyCache
from tests.benchmarks._client_side import OTHER_TRAINERS_KEYS


@pytest.fixture
def database(store_url: str) -> Iterator[Database]:
    db = Database(store_url)
    yield db
    db.dispose()


def _batch(batch_id: str, step: int, values: dict[str, float]) -> MetricBatch:
    points = [{"key": key, "step": step, "value": value} for key, value in values.items()]
    return MetricBatch.model_validate({"batch_id": batch_id, "points": points})


def _block_reads(db: Database) -> list[str]:
    seen: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM metric_block" in statement:
            seen.append(statement)

    event.listen(db.engine, "before_cursor_execute", record)
    return seen


def test_a_stored_rate_is_read_without_reading_the_spellings_other_runs_logged(database: Database) -> None:
    keys = KeyCache()
    other = runs.create_or_join(database, RunCreate(project="p", experiment="other", name="other"))
    ingest(database, keys, other.id, _batch("other", 0, dict.fromkeys(OTHER_TRAINERS_KEYS, 1.0)))
    run = runs.create_or_join(
        database,
        RunCreate(project="p", experiment="e", name="r", policy={"monitor": "val/acc"}, planned_steps=99),
    )
    reads = _block_reads(database)
    for step in range(5):  # the rate in a batch of its own, then the evaluation
        ingest(database, keys, run.id, _batch(f"lr-{step}", step, {"lr": 0.1 * (step + 1)}))
        reads.clear()
        ingest(database, keys, run.id, _batch(f"val-{step}", step, {"val/acc": 0.5 + 0.01 * step}))
        # The rate's newest value at or before the step, and nothing for the spellings only other runs have.
        newest_reads = [statement for statement in reads if "ORDER BY" in statement]
        assert len(newest_reads) == 1, reads
    with database.session() as session:
        states = session.execute(
            select(models.RuleState.rule, models.RuleState.state).where(models.RuleState.run_id == run.id)
        ).all()
    outlook = next(state for rule, state in states if rule == "outlook")
    assert outlook["s"]["lr"] == pytest.approx(0.5)  # the stored rate of step 4, read at step 4
    assert outlook["s"]["lr_peak"] == pytest.approx(0.5)
