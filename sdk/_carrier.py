"""The batches of a process's runs, carried to their tracker together.

A process with many live runs (a sweep driver running trials in threads, several ranks on one host) has a
sender thread per run, and each would post a request of its own per flush: the tracker pays for HTTP, a
thread hop and a transaction per request, whatever the request holds. Here the senders of runs bound for
one tracker (one URL and token) take turns: one request is in flight at a time, and the batches queued
meanwhile go together in the next, as lines of ``POST /api/v1/batches``. Batches a loop waits on (those
that carry a monitored value) take turns of their own, so they never queue behind the others' requests.
A batch alone goes to its run's own route, so a process with one run sends exactly what it would without
carrying. There is no thread of its own: a sender that finds a turn free posts for everyone queued (as a
group commit does).

Each batch gets its own answer. The tracker refusing one line (a 422 naming its points, a 404) is that
sender's alone; the request failing (the tracker away, overloaded) fails every batch it held, each sender
going offline as it would alone. A tracker without the route, or refusing the request whole, is asked per
run instead.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

MAX_BATCHES = 256
"""Batches one request carries at most (the tracker takes 1,000)."""
MAX_BYTES = 8 * 1024 * 1024
"""Bytes one request carries at most (the tracker's default limit is 32 MiB)."""

Alone = Callable[[], Any]
"""Sends one batch on its run's own route: its answer, or the error that says why there is none."""
Together = Callable[[bytes], list[Any]]
"""Sends lines together: one answer or error per line, in order. Raises when the request as a whole
failed; :class:`UnsupportedError` when the tracker cannot take it (each batch is then sent alone)."""


class UnsupportedError(Exception):
    """The tracker refused the request as a whole; ``lasting``: it has no ``POST /api/v1/batches`` (it
    predates it), so no request of this carrier goes there again."""

    def __init__(self, message: str, *, lasting: bool) -> None:
        super().__init__(message)
        self.lasting = lasting


@dataclass(eq=False)
class _Parcel:
    line: bytes
    alone: Alone
    done: threading.Event = field(default_factory=threading.Event)
    answer: Any = None
    error: BaseException | None = None


@dataclass(eq=False)
class _Lane:
    """Batches that go together, one request in flight at a time."""

    waiting: deque[_Parcel] = field(default_factory=deque)
    turn: threading.Lock = field(default_factory=threading.Lock)


class Carrier:
    """Carries the batches of the runs of this process bound for one tracker (see the module)."""

    def __init__(self, together: Together) -> None:
        self._together = together
        # Two lanes: batches a loop waits on (they carry a monitored value) never queue behind the
        # others' requests, which carry most of the points.
        self._lanes = {True: _Lane(), False: _Lane()}
        self.supported = True

    def carry(self, run_id: int, body: bytes, alone: Alone, *, urgent: bool = False) -> Any:
        """The answer to ``body`` (a JSON object: the run's batch), sent alone or with others' batches.
        ``urgent``: a loop waits for its verdict (the batch carries a monitored value); such batches go
        together in requests of their own, beside the others'."""
        parcel = _Parcel(b'{"run_id":%d,%s' % (run_id, body[1:]), alone)
        lane = self._lanes[urgent]
        lane.waiting.append(parcel)
        while not parcel.done.is_set():
            with lane.turn:
                if not parcel.done.is_set():
                    self._send(list(_take(lane.waiting)))
        if parcel.error is not None:
            raise parcel.error
        return parcel.answer

    def _send(self, parcels: list[_Parcel]) -> None:
        try:
            if len(parcels) > 1 and self.supported:
                try:
                    outcomes = self._together(b"\n".join(parcel.line for parcel in parcels) + b"\n")
                except UnsupportedError as exc:
                    self.supported = not exc.lasting
                else:
                    for parcel, outcome in zip(parcels, outcomes, strict=True):
                        parcel.answer, parcel.error = _split(outcome)
                    return
            for parcel in parcels:
                try:
                    parcel.answer = parcel.alone()
                except Exception as exc:  # the sender's to handle, as when it sends alone
                    parcel.error = exc
        except Exception as exc:  # the request failed whole: every batch it held failed with it
            for parcel in parcels:
                if parcel.answer is None and parcel.error is None:
                    parcel.error = _copy(exc)
        finally:
            for parcel in parcels:
                parcel.done.set()


def _take(waiting: deque[_Parcel]) -> Iterator[_Parcel]:
    """The batches of the next request, in the order they came, within a request's bounds."""
    size = 0
    for count in range(MAX_BATCHES):
        try:
            parcel = waiting.popleft()
        except IndexError:
            return
        size += len(parcel.line) + 1
        if count and size > MAX_BYTES:
            waiting.appendleft(parcel)
            return
        yield parcel


def _split(outcome: Any) -> tuple[Any, BaseException | None]:
    return (None, outcome) if isinstance(outcome, BaseException) else (outcome, None)


def _copy(exc: Exception) -> Exception:
    """An error of its own for each sender (one exception object raised in many threads would share its
    traceback)."""
    try:
        copied = type(exc)(*exc.args)
    except Exception:
        return exc
    copied.__dict__.update(exc.__dict__)
    return copied


_carriers: dict[tuple[Any, ...], Carrier] = {}
_registry = threading.Lock()


def carrier_for(key: tuple[Any, ...], together: Callable[[], Together]) -> Carrier:
    """The process's carrier for ``key`` (the tracker's URL and token), made on first use with the sender
    of lines ``together()`` returns."""
    with _registry:
        carrier = _carriers.get(key)
        if carrier is None:
            carrier = _carriers[key] = Carrier(together())
        return carrier


def _forget_in_child() -> None:
    """A forked child starts with no carrier: the parent's may be mid-request, its turn held by a thread
    the child does not have."""
    global _registry
    _carriers.clear()
    _registry = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
