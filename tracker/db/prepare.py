"""Bring the schema to the current revision before serving."""

from __future__ import annotations

from sqlalchemy.engine import make_url

from plateau_tracker.server.db import migrate
from plateau_tracker.server.db.engine import make_engine


class SchemaOutOfDateError(RuntimeError):
    """The database is not at the revision this tracker needs."""


def prepare_schema(url: str) -> None:
    """Upgrade the embedded SQLite database in place; refuse a PostgreSQL one that is behind.

    PostgreSQL deployments are shared by replicas, so their upgrade is an explicit ``plateau db upgrade``.
    """
    if make_url(url).get_backend_name() == "sqlite":
        migrate.upgrade(url)
        return
    engine = make_engine(url)
    try:
        current = migrate.current_revision(engine)
    finally:
        engine.dispose()
    head = migrate.head_revision(url)
    if current != head:
        raise SchemaOutOfDateError(
            f"database schema is at revision {current or 'none'}, this tracker needs {head}: "
            "run `plateau db upgrade` with the same PLATEAU_DATABASE_URL"
        )
