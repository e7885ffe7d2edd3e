"""Records in, series batches out: how the sender turns what ``log()`` queued into the tracker's columns.

Pure apart from the ``warn`` callback: no thread, no I/O, no clock. The sender owns the queue and decides
when to take a batch; the batcher decides what a batch holds.
"""

from __future__ import annotations

import operator
import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Record = tuple[int, float, tuple[Any, ...], tuple[Any, ...], int | None]
"""(step, wall_time, keys, values, rank or None). Keys and values apart, not a dict copy: a loop logs the
same keys every step, so one keys tuple is shared by every record that has them, and a record takes about
a third of the memory (it matters when many runs queue at once)."""

MAX_SERIES_PER_BATCH = 10_000
"""The tracker's bound on distinct (key, rank) series in one batch (README, "API"): larger records are
split."""

MAX_KEY_LENGTH = 250
# The wall times the tracker takes (2000 to 2100, its schema's bounds): a clock outside them (a machine
# booted without its clock set reads 1970) is sent as the nearest bound, which the tracker then replaces
# with its own clock, rather than having the batch refused.
EARLIEST_WALL_TIME = 946_684_800.0
LATEST_WALL_TIME = 4_102_444_800.0
MAX_STEP = 2**62
MAX_RANK = 100_000
"""The tracker's bounds on a point's key, step and rank: a point past them would have the whole batch
refused, so it is dropped alone here, counted and named."""

BACKLOG_BATCHES = 20
"""With a backlog, a batch holds this many times ``batch_points``: the round trip, not the points, is what
one sender thread pays for, and the tracker takes 100,000 points a batch."""


@dataclass
class Marker:
    """Put in the queue by ``flush``; set once everything before it is sent or safe in the spool."""

    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class Batch:
    """One request's worth of points, and the flush markers it completes."""

    batch_id: str
    series: list[dict[str, Any]]  # per (key, rank): {"key", "rank", "steps", "values", "wall_times"}
    points: int
    markers: list[Marker]
    monitor_step: int | None = None  # the newest step of the monitored metric (own rank) it carries
    salvaged: bool = False  # what is left after the tracker refused some of its points


Queue = deque[Record | Marker]


class Batcher:
    """Builds batches from the front of a queue of records.

    ``rank`` is this process's rank, given to records logged without one. ``warn(topic, message)`` is
    called for points that are dropped (a bad step, a bad key, a value that is not a number); the caller
    says each topic once."""

    def __init__(
        self,
        *,
        monitor: str | None,
        rank: int,
        batch_points: int,
        warn: Callable[[str, str], None],
        max_series: int = MAX_SERIES_PER_BATCH,
    ) -> None:
        self._monitor = monitor
        self._rank = rank
        self._batch_points = batch_points
        self._warn = warn
        self._max_series = max_series
        # A batch is full when its records hold about batch_points points; records hold ~10 keys at most.
        self.wake_records = max(1, batch_points // 4)
        self.invalid_points = 0  # values that cannot become a float64, dropped alone
        self.keys_logged: set[str] = set()  # every key batched so far

    def take(self, pending: Queue) -> Batch | None:
        """Pop one batch from the front of ``pending``: up to the point limit, or up to and including the
        first flush marker. None when ``pending`` holds nothing."""
        series: dict[tuple[str, int], dict[str, Any]] = {}
        markers: list[Marker] = []
        points = 0
        limit = self._batch_points * (BACKLOG_BATCHES if len(pending) > 2 * self.wake_records else 1)
        while pending and points < limit:
            item = pending.popleft()
            if isinstance(item, Marker):
                markers.append(item)
                break
            room = self._max_series - len(series)
            if len(item[2]) > room:  # the tracker refuses a batch of more distinct keys: split the record
                step, wall_time, keys, values, rank = item
                if room <= 0:
                    pending.appendleft(item)
                    break
                pending.appendleft((step, wall_time, keys[room:], values[room:], rank))
                item = (step, wall_time, keys[:room], values[:room], rank)
            points += self._append_points(series, item)
        if not points and not markers:
            return None
        monitored = series.get((self._monitor, self._rank)) if self._monitor is not None else None
        monitor_step = max(monitored["steps"]) if monitored else None
        return Batch(uuid.uuid4().hex, list(series.values()), points, markers, monitor_step)

    def _append_points(self, series: dict[tuple[str, int], dict[str, Any]], record: Record) -> int:
        """Add a record's values to their (key, rank) columns; returns how many were added."""
        step, wall_time, keys, values, rank = record
        if not EARLIEST_WALL_TIME <= wall_time <= LATEST_WALL_TIME:
            wall_time = min(max(wall_time, EARLIEST_WALL_TIME), LATEST_WALL_TIME)
        rank = self._rank if rank is None else rank
        place = _place_problem(step, rank)
        if place is not None:
            self.invalid_points += len(keys)
            self._warn(
                place[0], f"plateau: {place[1]}; its points are dropped and counted in run.invalid_points"
            )
            return 0
        added = 0
        for key, value in zip(keys, values, strict=False):  # equal unless the mapping changed meanwhile
            try:
                number = float(value)  # int, float, bool, numpy scalars, one-element torch tensors
            except Exception as exc:
                # Dropped alone: raising here once lost the whole batch being built around it.
                self.invalid_points += 1
                self._warn(
                    f"value:{key}",
                    f"plateau: {key!r} = {_short(value)} at step {step} cannot become a float64 "
                    f"({type(exc).__name__}); dropped, and counted in run.invalid_points (this key is warned "
                    "about once)",
                )
                continue
            column = series.get((key, rank))
            if column is None:
                problem = key_problem(key)
                if problem is not None:
                    self.invalid_points += 1
                    self._warn(
                        f"key:{_short(key)}",
                        f"plateau: metric key {_short(key)} at step {step} {problem}; dropped, and counted "
                        "in run.invalid_points (this key is warned about once)",
                    )
                    continue
                column = series[(key, rank)] = {
                    "key": key,
                    "rank": rank,
                    "steps": [],
                    "values": [],
                    "wall_times": [],
                }
                self.keys_logged.add(key)
            column["steps"].append(step)
            column["values"].append(number)
            column["wall_times"].append(wall_time)
            added += 1
        return added


def key_problem(key: Any) -> str | None:
    """Why the tracker would refuse ``key`` as a metric key, or None: it is a non-empty string of at most
    250 characters that every store can keep (no NUL, no lone surrogate)."""
    if not isinstance(key, str) or not key:
        return "is not a non-empty string"
    if len(key) > MAX_KEY_LENGTH:
        return f"is {len(key)} characters long, more than the tracker's {MAX_KEY_LENGTH}"
    if "\x00" in key:
        return "holds the NUL character"
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return "holds a lone surrogate, which has no UTF-8"
    return None


def _place_problem(step: Any, rank: Any) -> tuple[str, str] | None:
    """(warning topic, sentence) when a record's step or rank is outside what the tracker stores."""
    try:
        if not 0 <= operator.index(step) <= MAX_STEP:
            raise ValueError
    except (TypeError, ValueError):
        return "step", f"step must be a whole number from 0 to 2**62, got {_short(step)}"
    try:
        if not 0 <= operator.index(rank) <= MAX_RANK:
            raise ValueError
    except (TypeError, ValueError):
        return "rank", f"rank must be a whole number from 0 to {MAX_RANK:,}, got {_short(rank)}"
    return None


def queued_points(pending: Queue) -> int:
    """Points waiting in ``pending`` (markers hold none)."""
    return sum(len(r[2]) for r in list(pending) if not isinstance(r, Marker))


def _short(value: Any) -> str:
    """A value as a warning shows it: its repr, cut short (a huge int's repr alone can fail or be huge)."""
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."
