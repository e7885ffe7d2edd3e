"""Whether the tracker can reach its database now, and whether a write failed on storage lately: what
``/health`` reports (503 when the database cannot be reached)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from sqlalchemy import text

from plateau_tracker.server.db.engine import Database

RECENT_S = 30.0
"""A storage failure this recent makes the tracker "degraded" even when the database answers (a full disk
still serves reads)."""

_PING_EVERY_S = 0.5  # health probes come often (commands, load balancers): one ping serves them all


@dataclass(frozen=True)
class StorageState:
    reachable: bool
    cause: str | None  # the newest storage failure's cause, within RECENT_S; or why the ping failed
    seconds_ago: float | None


class StorageHealth:
    """The newest storage failure (noted by the error answer) and a cached ping of the database."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failure: tuple[float, str] | None = None
        self._ping: tuple[float, bool] | None = None

    def note_failure(self, cause: str) -> None:
        """A request failed on storage: said by the next health check, which pings afresh."""
        with self._lock:
            self._failure = (time.monotonic(), cause)
            self._ping = None

    def state(self, database: Database) -> StorageState:
        """Ping the database (at most every half second) and say what was seen."""
        now = time.monotonic()
        with self._lock:
            ping = self._ping
        if ping is None or now - ping[0] >= _PING_EVERY_S:
            ping = (now, _reachable(database))
            with self._lock:
                self._ping = ping
        with self._lock:
            failure = self._failure
        if not ping[1]:
            return StorageState(False, "unreachable", 0.0)
        if failure is not None and now - failure[0] < RECENT_S:
            return StorageState(True, failure[1], round(now - failure[0], 1))
        return StorageState(True, None, None)


def _reachable(database: Database) -> bool:
    try:
        with database.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception:
        return False
    return True


STORAGE = StorageHealth()
"""This process's: every app in it shares one database per URL in practice, and tests reset it."""
