"""Engine creation and the one session scope.

SQLite runs in WAL mode; writes take the database lock at ``BEGIN IMMEDIATE`` so two writers never
deadlock upgrading a read lock ("database is locked"), while reads stay concurrent. On PostgreSQL
per-run writes are serialised by a row lock on the run (see ``services``).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from plateau_tracker.server.db.group_commit import GroupCommit
from plateau_tracker.server.errors import ConflictError

_WRITE_OPTION = "plateau_write"


def store_identity(url: str) -> str:
    """A short fingerprint of the store ``url`` names, the same for every spelling of one store: the
    SQLite file's real path, or the server URL without its password. ``/api/v1/health`` carries it, so a
    command can tell that the tracker answering on a port is the one its own settings name (and not
    another one, on another database, that happened to hold the port). The URL itself is not shown: it
    may name users and hosts the health check need not reveal."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ":memory:"
        if database != ":memory:":
            database = os.path.realpath(Path(database).expanduser())
        canonical = f"sqlite:{database}"
    else:
        canonical = parsed.set(password=None, drivername=parsed.get_backend_name()).render_as_string()
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


DEFAULT_POOL_SIZE = 12


def make_engine(url: str, *, pool_size: int = DEFAULT_POOL_SIZE) -> Engine:
    """An engine for ``url``; for SQLite, creates the parent folder and sets WAL and busy timeout; for a
    server, a pool of ``pool_size`` connections (``PLATEAU_DB_POOL_SIZE``)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        # A bounded pool, and requests beyond it wait for a connection (up to 30 s) rather than open more:
        # with 20 + 20 per worker, 4 workers under 300 live runs asked PostgreSQL for more than its
        # default 100 connections and got "too many clients" (HTTP 500). 12 per worker, plus one listening
        # connection, keeps 4 workers and a second replica's 4 within 100; a server allowing more
        # connections can be given more with the setting.
        return create_engine(url, pool_pre_ping=True, pool_size=pool_size, max_overflow=0, pool_timeout=30)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
    _configure_sqlite(engine)
    return engine


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from pysqlite so BEGIN is ours to emit.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        immediate = connection.get_execution_options().get(_WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


class Database:
    """An engine plus the session scope every service uses."""

    def __init__(self, url: str, *, pool_size: int = DEFAULT_POOL_SIZE) -> None:
        self.url = url
        self.identity = store_identity(url)
        self.engine = make_engine(url, pool_size=pool_size)
        self.is_sqlite = self.engine.dialect.name == "sqlite"
        # SQLite takes one writer at a time. Within this process writers queue on this lock and start the
        # moment the previous one commits; at BEGIN IMMEDIATE they would wait in SQLite's busy handler,
        # which sleeps in steps of milliseconds (most of a busy ingest's time). Other processes still
        # meet at SQLite's lock.
        self._sqlite_writers = threading.RLock() if self.is_sqlite else None
        # Ingest's transactions that arrive together share one commit on SQLite (one writer at a time
        # anyway); on PostgreSQL each batch commits alone, as replicas and workers write side by side.
        self.write_groups = GroupCommit(self.session) if self.is_sqlite else None

    @contextmanager
    def session(self, *, write: bool = False) -> Iterator[Session]:
        """Commit on success, roll back on error, always close.

        ``write=True`` marks a transaction that will write: on SQLite it starts with ``BEGIN IMMEDIATE``.
        Integrity errors become :class:`ConflictError`.
        """
        writers = self._sqlite_writers if write and self._sqlite_writers is not None else nullcontext()
        with writers, self.engine.connect() as connection:
            if write:
                connection.execution_options(**{_WRITE_OPTION: True})
            session = Session(bind=connection, expire_on_commit=False, autoflush=False)
            try:
                yield session
                session.commit()
            except IntegrityError as exc:
                session.rollback()
                raise ConflictError(f"conflicting write: {exc.orig}") from exc
            except BaseException:
                session.rollback()
                raise
            finally:
                session.close()

    def dispose(self) -> None:
        self.engine.dispose()
