"""Alembic makes exactly the models' schema, and downgrade/upgrade round-trips, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from plateau_tracker.server.db import migrate
from plateau_tracker.server.db.engine import make_engine
from plateau_tracker.server.db.models import Base


def schema_differences(url: str) -> list:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            return list(compare_metadata(context, Base.metadata))
    finally:
        engine.dispose()


def table_names(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def check_round_trip(url: str) -> None:
    migrate.upgrade(url)
    assert schema_differences(url) == []
    assert table_names(url) >= set(Base.metadata.tables)
    migrate.downgrade(url, "base")
    assert table_names(url) - {"alembic_version"} == set()
    migrate.upgrade(url)
    assert schema_differences(url) == []
    engine = make_engine(url)
    try:
        assert migrate.current_revision(engine) == migrate.head_revision(url)
    finally:
        engine.dispose()


def test_sqlite_schema_matches_models_and_round_trips(tmp_path: Path) -> None:
    check_round_trip(f"sqlite:///{tmp_path / 'plateau.db'}")


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plateau.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    engine.dispose()


@pytest.mark.postgres
def test_postgres_schema_matches_models_and_round_trips(postgres_url: str) -> None:
    check_round_trip(postgres_url)


def test_policies_stored_past_the_rules_bounds_are_brought_within_them(tmp_path: Path) -> None:
    from sqlalchemy import text

    from plateau_tracker.server.policy import PolicySpec

    url = f"sqlite:///{tmp_path / 'old.db'}"
    migrate.upgrade(url, "0007")
    past = {
        "monitor": "acc",
        "mode": "max",
        "rules": [
            {"rule": "asha", "reduction_factor": 1.0000000000000002, "min_step": 2**70},
            {"rule": "plateau", "test": "mann_kendall", "window": 1000, "noise_factor": 1e300},
            {"rule": "patience", "patience": 3},
        ],
    }
    engine = make_engine(url)
    moment = "2026-01-01 00:00:00"
    with engine.begin() as connection:
        connection.execute(
            text("INSERT INTO project (id, name, created_at) VALUES (1, 'p', :t)"), {"t": moment}
        )
        connection.execute(
            text("INSERT INTO experiment (id, project_id, name, created_at) VALUES (1, 1, 'e', :t)"),
            {"t": moment},
        )
        connection.execute(
            text(
                "INSERT INTO run (project_id, experiment_id, name, run_key, config, tags, policy, status, "
                "world_size, started_at, last_heartbeat, judged_step, decision_seq, summary) "
                "VALUES (1, 1, 'r', 'k', '{}', '[]', :policy, 'running', 1, :t, :t, -1, 0, '{}')"
            ),
            {"policy": json.dumps(past), "t": moment},
        )
    migrate.upgrade(url)
    with engine.connect() as connection:
        stored = json.loads(connection.execute(text("SELECT policy FROM run")).scalar_one())
    engine.dispose()
    policy = PolicySpec.model_validate(stored)  # legal now: reads and batches of the run work again
    assert [r.rule for r in policy.rules] == ["asha", "plateau", "patience"]
    assert stored["rules"][0] == {"rule": "asha", "reduction_factor": 1.01, "min_step": 2**62}
    assert stored["rules"][1]["window"] == 200
    assert stored["rules"][1]["noise_factor"] == 1e9
    assert stored["rules"][2] == {"rule": "patience", "patience": 3}
