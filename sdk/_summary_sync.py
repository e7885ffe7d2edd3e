"""The run's summary figures (complexity, timings, time to converge): merged as they come, sent when they
change, kept in the spool while the tracker cannot take them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from plateau_tracker._spool import Spool
from plateau_tracker._transport import RejectedError, RetryableError, Transport


class SummarySync:
    """``update`` may be called from any thread; ``sync`` from the sender's thread (or at close, once the
    thread has stopped). A change made during a send is sent again."""

    def __init__(self, transport: Transport, spool: Spool | None, warn: Callable[[str, str], None]) -> None:
        self._transport = transport
        self._spool = spool
        self._warn = warn
        self._figures: dict[str, Any] = {}
        self._version = 0  # counts changes
        self._sent = 0  # the version the tracker has
        self._spooled = 0  # the version the spool has
        self._lock = threading.Lock()

    def update(self, figures: Mapping[str, Any]) -> None:
        """Merge ``figures`` into the summary."""
        with self._lock:
            self._figures.update(figures)
            self._version += 1

    def sync(self, run_id: int | None) -> RetryableError | None:
        """Send the summary to run ``run_id`` if it changed; with no ``run_id`` (the run is not created,
        the tracker is away, or sending is not allowed now) keep it in the spool instead, for the reconnect
        or a later process (``plateau sync``). Returns the error of a send that could not reach the
        tracker (the summary is then in the spool)."""
        with self._lock:
            version = self._version
            if version == self._sent:
                return None
            summary = dict(self._figures)
        if run_id is None:
            if self._spool is not None and version != self._spooled:
                self._spool.write_summary(summary)
                self._spooled = version
            return None
        try:
            self._transport.update_summary(run_id, summary)
        except RetryableError as exc:
            self.sync(None)
            return exc
        except RejectedError as exc:
            self._warn("summary", f"plateau: the tracker rejected the run summary: {exc}")
        with self._lock:
            self._sent = max(self._sent, version)
        return None
