"""Bring the schema to the current revision before serving, and say in one line why a database cannot be
used."""

from __future__ import annotations

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError

from plateau_tracker.server.db import migrate
from plateau_tracker.server.db.engine import make_engine


class SchemaOutOfDateError(RuntimeError):
    """The database is not at the revision this tracker needs."""


class DatabaseUnavailableError(RuntimeError):
    """The database cannot be used; the message says what to do, in one line."""


def prepare_schema(url: str, *, upgrade_empty: bool = True) -> bool:
    """Upgrade the embedded SQLite database in place, and an empty PostgreSQL one (unless
    ``upgrade_empty`` is false); refuse a PostgreSQL one that is behind, whose upgrade is an explicit
    ``plateau db upgrade`` (replicas share it). Returns whether it upgraded an empty PostgreSQL database.
    Raises :class:`SchemaOutOfDateError` or :class:`DatabaseUnavailableError`, each one line."""
    try:
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite":
            migrate.upgrade(url)
            return False
        engine = make_engine(url)
        try:
            current = migrate.current_revision(engine)
        finally:
            engine.dispose()
        if current is None and upgrade_empty:
            migrate.upgrade(url)
            return True
    except (OperationalError, NoSuchModuleError, ArgumentError) as exc:
        raise DatabaseUnavailableError(explain(exc, url)) from None
    head = migrate.head_revision(url)
    if current != head:
        raise SchemaOutOfDateError(
            f"database schema is at revision {current or 'none'}, this tracker needs {head}: "
            "run `plateau db upgrade` with the same PLATEAU_DATABASE_URL"
        )
    return False


def explain(error: Exception, url: str) -> str:
    """One line for a database that cannot be used: what is wrong, and what to do."""
    try:
        parsed: URL | None = make_url(url)
    except ArgumentError:
        parsed = None
    if parsed is None or isinstance(error, (NoSuchModuleError, ArgumentError)):
        return (
            f"cannot use the database URL {_shown(url)}: use "
            "postgresql+psycopg://USER@HOST:PORT/DATABASE, or sqlite:///PATH"
        )
    text = str(getattr(error, "orig", None) or error).strip()
    if parsed.get_backend_name() == "sqlite":
        return f"cannot use the SQLite database {parsed.database}: {text.splitlines()[0] if text else error}"
    where = f"{parsed.host or 'localhost'}:{parsed.port or 5432}"
    if "does not exist" in text and "database" in text:
        name = parsed.database
        return (
            f'database "{name}" does not exist on the PostgreSQL server at {where}: create it '
            f"(createdb -h {parsed.host or 'localhost'} -p {parsed.port or 5432} {name}), then run this again"
        )
    lowered = text.lower()
    if "password authentication failed" in lowered or ("role" in lowered and "does not exist" in lowered):
        user = parsed.username
        return f"the PostgreSQL server at {where} refused user {user!r}: check the URL's user and password"
    if any(sign in lowered for sign in ("connection refused", "could not connect", "connection failed")):
        return f"no PostgreSQL server answers at {where}: start it, or correct PLATEAU_DATABASE_URL"
    return f"cannot use the database at {where}: {text.splitlines()[0] if text else type(error).__name__}"


def _shown(url: str) -> str:
    """The URL without its password."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return repr(url)
