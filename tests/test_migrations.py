"""Alembic makes exactly the models' schema, and downgrade/upgrade round-trips, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def insert_old_runs(connection: Any, policy: dict[str, Any], judged_steps: list[int]) -> None:
    """A project, an experiment and one running run per judged step (-1: not judged yet), all stored with
    ``policy`` as an older revision stored it: raw rows, since the models describe today's schema."""
    from sqlalchemy import text

    moment = "2026-01-01 00:00:00"
    connection.execute(text("INSERT INTO project (id, name, created_at) VALUES (1, 'p', :t)"), {"t": moment})
    connection.execute(
        text("INSERT INTO experiment (id, project_id, name, created_at) VALUES (1, 1, 'e', :t)"),
        {"t": moment},
    )
    for run_id, judged in enumerate(judged_steps, start=1):
        connection.execute(
            text(
                "INSERT INTO run (id, project_id, experiment_id, name, run_key, config, tags, policy, "
                "status, world_size, started_at, last_heartbeat, judged_step, decision_seq, summary) "
                "VALUES (:id, 1, 1, 'r', :key, '{}', '[]', :policy, 'running', 1, :t, :t, :judged, 0, '{}')"
            ),
            {"id": run_id, "key": f"k{run_id}", "policy": json.dumps(policy), "t": moment, "judged": judged},
        )


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
    with engine.begin() as connection:
        insert_old_runs(connection, past, [-1])
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


def test_policies_on_the_old_default_read_on_the_rebuilt_one(tmp_path: Path) -> None:
    """A run stored under the default before it was rebuilt (``degenerate``, an ``outlook`` with parameters
    the new one refuses) reads and judges on: ``degenerate`` is dropped, ``outlook`` is the new one keeping
    the series it read, and the other rules keep their states at their new places (the checkpoint's best
    survives); a run being judged gets the new ``outlook`` as one that has spoken."""
    from sqlalchemy import text

    from plateau_tracker.server.policy import Observation, PolicySpec, evaluate

    url = f"sqlite:///{tmp_path / 'old.db'}"
    migrate.upgrade(url, "0013")
    old_rules = [
        {"rule": "non_finite"},
        {"rule": "divergence", "run_factor": 10.0, "confirm": 2},
        {"rule": "checkpoint", "tie_loss_key": ["val_loss", "val/loss"]},
        {"rule": "perfect"},
        {"rule": "degenerate", "window": 8, "max_distinct": 4, "lr_key": ["lr"], "loss_key": ["val_loss"]},
        {
            "rule": "outlook",
            "relative_delta": 0.015,
            "min_evaluations": 3,
            "lr_key": ["lr"],
            "loss_key": ["val_loss"],
        },
    ]
    engine = make_engine(url)
    wrapper = {"ema": None, "vote": None, "stopped": False}
    checkpoint_state = {"s": {}, **wrapper, "best": [0.9, 7]}
    old_states = {
        "non_finite": {"s": {}, **wrapper},
        "divergence": {"s": {"first": 0.1, "past": None, "streak": 0}, **wrapper},
        "checkpoint": checkpoint_state,
        "perfect": {"s": {"low": 0.1, "high": 0.9, "between": True, "run": 0}, **wrapper},
        "degenerate": {"s": {"ys": [0.9, 0.85]}, **wrapper},
        "outlook": {"s": {"path": [[7, 0.9]], "half": 2}, **wrapper},
    }
    with engine.begin() as connection:
        insert_old_runs(connection, {"monitor": "acc", "mode": "max", "rules": old_rules}, [7, -1])
        for index, rule in enumerate(old_rules):
            body = old_states[rule["rule"]]
            connection.execute(
                text(
                    "INSERT INTO rule_state (run_id, rule_index, rule, state, last_step) "
                    "VALUES (1, :i, :rule, :state, 7)"
                ),
                {"i": index, "rule": rule["rule"], "state": json.dumps(body)},
            )
    migrate.upgrade(url)
    with engine.connect() as connection:
        policies = [
            json.loads(p) for p in connection.execute(text("SELECT policy FROM run ORDER BY id")).scalars()
        ]
        states = connection.execute(
            text("SELECT rule_index, rule, state FROM rule_state WHERE run_id = 1 ORDER BY rule_index")
        ).all()
    engine.dispose()
    for stored in policies:
        policy = PolicySpec.model_validate(stored)
        assert [r.rule for r in policy.rules] == [
            "non_finite",
            "divergence",
            "checkpoint",
            "perfect",
            "outlook",
        ]
        assert stored["rules"][4] == {"rule": "outlook", "lr_key": ["lr"], "loss_key": ["val_loss"]}
    assert [(index, rule) for index, rule, _ in states] == [
        (0, "non_finite"),
        (1, "divergence"),
        (2, "checkpoint"),
        (3, "perfect"),
        (4, "outlook"),
    ]
    bodies = [json.loads(body) for _, _, body in states]
    assert bodies[2] == checkpoint_state
    assert bodies[4]["stopped"] is True
    # The judged run goes on: its states and its policy evaluate the next point together.
    policy = PolicySpec.model_validate(policies[0])
    fresh = [{**b, "s": {}} if i in (0, 2) else b for i, b in enumerate(bodies)]
    fresh[1] = {"s": {"first": None, "past": None, "streak": 0}, "ema": None, "vote": None, "stopped": False}
    fresh[3] = {
        "s": {"low": None, "high": None, "between": False, "run": 0},
        "ema": None,
        "vote": None,
        "stopped": False,
    }
    evaluation = evaluate(policy, fresh, [Observation(8, 0.8, 0.0)])
    assert evaluation.stop_step is None
