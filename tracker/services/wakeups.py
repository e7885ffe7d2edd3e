"""Wake-ups across replicas through PostgreSQL's ``LISTEN``/``NOTIFY``.

A write that changes a run (a batch of points, a finish) sends ``NOTIFY plateau_runs, '<run id>'`` inside
its own transaction, so the notification is delivered exactly when the change is committed, to every
replica. Each worker keeps one listening connection (a thread here) and turns each notification into the
in-process wake-up of that run's long-polls (:class:`~tracker.services.notify.RunNotifier`) and of the
webhook sender. While the connection is up, a long-poll waits on its event alone: an idle long-poll costs
the database nothing. While it is down, long-polls fall back to looking every ``fallback_s``, and the log
says so; it reconnects with backoff.

SQLite has one process writing: its in-process events are enough, and nothing here runs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

logger = logging.getLogger("plateau.tracker")

CHANNEL = "plateau_runs"
_DELIVERIES = "d"  # payload suffix: the change enqueued webhook deliveries
_NOTIFY = text("SELECT pg_notify(:channel, :payload)")


def announce(session: Session, run_id: int, *, deliveries: bool = False) -> None:
    """Tell every replica, at commit, that ``run_id`` changed (PostgreSQL only; a no-op on SQLite)."""
    if session.get_bind().dialect.name != "postgresql":
        return
    session.execute(_NOTIFY, {"channel": CHANNEL, "payload": payload(run_id, deliveries=deliveries)})


def payload(run_id: int, *, deliveries: bool = False) -> str:
    """The notification that says ``run_id`` changed (and whether webhook deliveries were enqueued), for a
    statement that sends it itself (``pg_notify(CHANNEL, payload)``; ingest sends it with its own write)."""
    return f"{run_id}{_DELIVERIES if deliveries else ''}"


class Listener:
    """One listening connection, in a daemon thread. ``up`` says whether notifications arrive now."""

    def __init__(
        self,
        url: str,
        *,
        on_run: Callable[[int], None],
        on_deliveries: Callable[[], None],
        on_down: Callable[[], None] = lambda: None,
        reconnect_max_s: float = 10.0,
    ) -> None:
        # psycopg takes the libpq URI: the SQLAlchemy URL without its "+driver".
        self._conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        self._on_run = on_run
        self._on_deliveries = on_deliveries
        self._on_down = on_down
        self._reconnect_max_s = reconnect_max_s
        self._stop = threading.Event()
        self._up = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="plateau-listen", daemon=True)

    @property
    def up(self) -> bool:
        return self._up.is_set()

    def start(self) -> None:
        self._thread.start()

    def wait_up(self, timeout: float) -> bool:
        return self._up.wait(timeout)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    def _loop(self) -> None:
        import psycopg

        delay = 0.1
        was_up = False
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True, connect_timeout=5) as connection:
                    connection.execute(f"LISTEN {CHANNEL}")
                    self._up.set()
                    if was_up:
                        logger.warning(
                            "plateau: listening for changes again; long-polls wait on notifications"
                        )
                    was_up, delay = True, 0.1
                    while not self._stop.is_set():
                        for notification in connection.notifies(timeout=1.0):
                            self._dispatch(notification.payload)
            except Exception as exc:  # any failure of the connection: fall back to polling, reconnect
                if self._up.is_set():
                    logger.warning(
                        "plateau: the listening connection to PostgreSQL is down (%s); long-polls look at "
                        "the database on a timer until it is back",
                        exc,
                    )
                if self._up.is_set():
                    self._up.clear()
                    self._on_down()  # waiters on notifications alone go back to looking on a timer
                self._stop.wait(delay)
                delay = min(self._reconnect_max_s, delay * 2)
        self._up.clear()

    def _dispatch(self, payload: str) -> None:
        deliveries = payload.endswith(_DELIVERIES)
        try:
            run_id = int(payload.removesuffix(_DELIVERIES))
        except ValueError:
            return  # not ours
        self._on_run(run_id)
        if deliveries:
            self._on_deliveries()
