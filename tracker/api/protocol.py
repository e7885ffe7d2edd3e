"""uvicorn's HTTP/1.1 protocol with bounds on clients that connect and never finish a request's headers.

Uvicorn closes a keep-alive connection that stays idle after a response, but waits for ever on a new
connection, or a keep-alive one, whose request headers never complete. 1,100 such connections took every
file descriptor of a tracker allowed 1,024, and no new client could connect. Here a request's headers
must arrive within ``HEADER_TIMEOUT_S`` of its first byte (or of the connection), and when connections
near the process's descriptor limit, the oldest one still waiting for headers is closed to make room:
a client that sends a request is served, whatever idle ones do.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HEADER_TIMEOUT_S = 10.0
# Descriptors kept for everything but client connections: the database, logs, outgoing webhooks.
_RESERVED_DESCRIPTORS = 128


def connection_limit() -> int:
    """How many client connections this process may hold: its descriptor limit, less a reserve."""
    try:
        import resource  # Unix only

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 1024
    if soft == resource.RLIM_INFINITY:
        return 100_000
    return max(16, soft - _RESERVED_DESCRIPTORS)


def raise_descriptor_limit() -> None:
    """Lift the soft limit on open descriptors to the hard one (Linux often starts processes at 1,024)."""
    try:
        import resource  # Unix only

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, OSError, ValueError):
        pass


class _HeaderDeadline:
    """Mixed into uvicorn's HTTP protocols: closes connections waiting too long for a request's headers,
    and the oldest such connection when the process nears its descriptor limit."""

    # uvicorn's protocol attributes this relies on (both implementations have them).
    cycle: Any
    connections: Any
    loop: Any
    transport: Any
    _limit: int | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._waiting_since: float | None = None  # headers expected since (None: a request is in hand)
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._expect_headers()
        if _HeaderDeadline._limit is None:
            _HeaderDeadline._limit = connection_limit()
        if len(self.connections) > _HeaderDeadline._limit:
            self._close_oldest_waiting()

    def data_received(self, data: bytes) -> None:
        if self._waiting_since is None and (self.cycle is None or self.cycle.response_complete):
            self._expect_headers()  # the next request of a keep-alive connection has begun
        super().data_received(data)  # type: ignore[misc]
        if self.cycle is not None and not self.cycle.response_complete:
            self._headers_arrived()

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_arrived()
        super().connection_lost(exc)  # type: ignore[misc]

    def _expect_headers(self) -> None:
        self._waiting_since = time.monotonic()
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(HEADER_TIMEOUT_S, self._headers_late)

    def _headers_arrived(self) -> None:
        self._waiting_since = None
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self._waiting_since is None:
            return
        late = time.monotonic() - self._waiting_since
        if late >= HEADER_TIMEOUT_S:
            self.transport.close()
        else:  # headers began later than the timer: wait out the rest
            self._header_timer = self.loop.call_later(HEADER_TIMEOUT_S - late, self._headers_late)

    def _close_oldest_waiting(self) -> None:
        waiting = [
            c
            for c in self.connections
            if isinstance(c, _HeaderDeadline) and c is not self and c._waiting_since is not None
        ]
        if waiting:
            oldest = min(waiting, key=lambda c: c._waiting_since or 0.0)
            oldest.transport.close()


class BoundedHttpToolsProtocol(_HeaderDeadline, HttpToolsProtocol):
    """uvicorn's protocol on httptools' C parser (what uvicorn picks itself: ~0.4 ms off every request,
    and httptools is a dependency), with the header deadline. At module level: workers unpickle the
    config that names it."""
