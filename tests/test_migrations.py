"""Alembic makes exactly the models' schema, and downgrade/upgrade round-trips, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from tracker.db import migrate
from tracker.db.engine import make_engine
from tracker.db.models import Base


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
