"""Wakes this process's long-polls when a run changes. Other replicas' writes arrive through PostgreSQL's
notifications (``plateau_tracker.server.services.wakeups``), or are found by polling where none can come."""

from __future__ import annotations

import asyncio
import contextlib


class RunNotifier:
    """One asyncio event per run with waiters; ``notify`` may be called from any thread."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._events: dict[int, asyncio.Event] = {}

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def event(self, run_id: int) -> asyncio.Event:
        """The event the next change of ``run_id`` sets. Take it *before* looking at the database, so a
        change between the look and the wait is not missed."""
        event = self._events.get(run_id)
        if event is None:
            event = self._events[run_id] = asyncio.Event()
        return event

    def notify(self, run_id: int) -> None:
        """Wake ``run_id``'s waiters. Call it after the change is committed: a waiter that takes its
        event after this look finds the change in the database, so no waiter means nothing to do (and
        no thread-safe call, which costs the loop a wake-up on every ingest)."""
        if run_id not in self._events:
            return
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._wake, run_id)

    def wake_all(self) -> None:
        """Wake every waiter (the listening connection went down: they go back to polling)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._wake_all)

    def _wake_all(self) -> None:
        events, self._events = self._events, {}
        for event in events.values():
            event.set()

    def _wake(self, run_id: int) -> None:
        event = self._events.pop(run_id, None)
        if event is not None:
            event.set()

    @staticmethod
    async def wait(event: asyncio.Event, timeout: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)
