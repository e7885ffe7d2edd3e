"""Server settings, read from the environment (prefix ``PLATEAU_``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from plateau_tracker.server.db.urls import normalized_url

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


class Settings(BaseSettings):
    """Where the tracker keeps its data and where it listens.

    ``database_url`` defaults to the embedded SQLite file ``$PLATEAU_HOME/plateau.db``.
    """

    model_config = SettingsConfigDict(env_prefix="PLATEAU_", extra="ignore")

    home: Path = Field(default_factory=lambda: Path.home() / ".plateau")
    database_url: str | None = None
    host: str = DEFAULT_HOST
    # Names clients reach the tracker by, beyond loopback and the address it binds (comma-separated): a
    # request naming another host in its Host header answers 400 (tracker/api/request_guard.py).
    allowed_hosts: str = ""
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    # PostgreSQL connections each worker process keeps open (requests beyond them wait for one, up to
    # 30 s, rather than open more). Workers x replicas x (this + 1 listening connection) must stay under
    # the server's max_connections (100 by default): 12 keeps 4 workers on each of 2 replicas within it.
    db_pool_size: int = Field(default=12, ge=1, le=1000)
    # Longest long-poll a client may ask for; keeps idle connections bounded.
    max_wait_seconds: float = Field(default=60.0, gt=0)
    # A long-poll looks at the database this often when no notification can wake it: SQLite (another
    # worker process may write), or PostgreSQL while the listening connection is down.
    longpoll_fallback_s: float = Field(default=0.25, gt=0, le=60)
    # Largest request body accepted by the ingest route, in bytes.
    max_body_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    # Webhook delivery: how often to look for due deliveries, and the retry backoff.
    webhook_poll_s: float = Field(default=0.5, gt=0)
    webhook_backoff_base_s: float = Field(default=1.0, gt=0)
    webhook_backoff_max_s: float = Field(default=60.0, gt=0)
    webhook_max_attempts: int = Field(default=30, ge=1)
    webhook_deadline_s: float = Field(
        default=15.0, gt=0, le=600, description="a whole delivery attempt at most"
    )
    # A running run whose trainer has sent nothing (no point, no heartbeat) for this long is marked crashed;
    # its next point or heartbeat makes it running again. 0 never marks one. The SDK sends a heartbeat
    # every minute while its loop logs nothing, so a long epoch is not a crash.
    crash_after_s: float = Field(default=300.0, ge=0)
    # Receivers at addresses webhooks may not reach otherwise (loopback, private networks): host names and
    # networks, comma-separated (tracker/services/webhook_targets.py).
    webhook_allow: str = ""

    def resolved_database_url(self) -> str:
        """The configured database URL (``postgres://`` read as ``postgresql+psycopg://``), or the embedded
        SQLite file under ``home``."""
        if self.database_url:
            return normalized_url(self.database_url)
        return f"sqlite:///{self.home.expanduser() / 'plateau.db'}"

    def is_sqlite(self) -> bool:
        return self.resolved_database_url().startswith("sqlite")
