"""The packed block format of ``metric_block``: how a block's steps, values and wall times are laid out
as bytes (little-endian int64 steps, float64 values and wall times, in step order), how they are decoded
into numpy arrays, and the summary each block row carries (what downsampling reads without the data).
Pure: no database. ``plateau_tracker.server.services._point_store`` stores and reads blocks in this format.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

_LITTLE_ENDIAN = sys.byteorder == "little"
STEP_DTYPE = np.dtype("<i8")
FLOAT_DTYPE = np.dtype("<f8")


class Summary(NamedTuple):
    """One block's summary, stored beside its data in the columns of the same names (what downsampling
    reads without decoding the block). The min and max fields are None while the block has no value but
    NaN; a tie keeps the earlier step."""

    points: int
    first_step: int
    first_wall: float
    min_value: float | None
    min_step: int | None
    min_wall: float | None
    max_value: float | None
    max_step: int | None
    max_wall: float | None


SUMMARY_COLUMNS = Summary._fields


class StoredSummary(NamedTuple):
    """A stored block's summary and its last step (whether a batch extends the block or falls inside it)."""

    summary: Summary
    last_step: int


def pack(typecode: str, numbers: Iterable[float]) -> bytes:
    """Numbers as stored: little-endian int64 (``"q"``, steps) or float64 (``"d"``, values, wall times)."""
    packed = array(typecode, numbers)
    if not _LITTLE_ENDIAN:
        packed.byteswap()
    return packed.tobytes()


def decode_steps(data: bytes) -> np.ndarray:
    """A block's ``step_data`` as an int64 array."""
    return np.frombuffer(data, STEP_DTYPE)


def decode_floats(data: bytes) -> np.ndarray:
    """A block's ``value_data`` or ``wall_data`` as a float64 array."""
    return np.frombuffer(data, FLOAT_DTYPE)


@dataclass(frozen=True)
class Points:
    """A series' points in step order, as three numpy arrays of the same length."""

    steps: np.ndarray
    values: np.ndarray
    wall_times: np.ndarray

    def __len__(self) -> int:
        return len(self.steps)

    def between(self, first: int | None, last: int | None) -> Points:
        """The points with ``first <= step <= last`` (an open end when None)."""
        lo = 0 if first is None else int(np.searchsorted(self.steps, first, side="left"))
        hi = len(self.steps) if last is None else int(np.searchsorted(self.steps, last, side="right"))
        if lo == 0 and hi == len(self.steps):
            return self
        return Points(self.steps[lo:hi], self.values[lo:hi], self.wall_times[lo:hi])

    def head(self, count: int) -> Points:
        """The first ``count`` points."""
        if count >= len(self.steps):
            return self
        return Points(self.steps[:count], self.values[:count], self.wall_times[:count])

    def tail(self, count: int) -> Points:
        """The last ``count`` points."""
        if count >= len(self.steps):
            return self
        start = len(self.steps) - count
        return Points(self.steps[start:], self.values[start:], self.wall_times[start:])


EMPTY = Points(np.empty(0, STEP_DTYPE), np.empty(0, FLOAT_DTYPE), np.empty(0, FLOAT_DTYPE))


def unpack(rows: Sequence[Sequence[Any]]) -> Points:
    """The points of block rows ``(step_data, value_data, wall_data)`` given in block order."""
    if not rows:
        return EMPTY
    return Points(
        decode_steps(b"".join(row[0] for row in rows)),
        decode_floats(b"".join(row[1] for row in rows)),
        decode_floats(b"".join(row[2] for row in rows)),
    )


def summarise_block(steps: Sequence[int], values: Sequence[float], walls: Sequence[float]) -> Summary:
    """The summary of one block's points given in step order."""
    finite = [value for value in values if value == value]  # NaN left out
    if not finite:
        return Summary(len(steps), steps[0], walls[0], None, None, None, None, None, None)
    # index() finds the first occurrence: in step order, a tie keeps the earlier step.
    low, high = values.index(min(finite)), values.index(max(finite))
    return Summary(
        len(steps),
        steps[0],
        walls[0],
        values[low],
        steps[low],
        walls[low],
        values[high],
        steps[high],
        walls[high],
    )


def combine(stored: Summary, new: Summary) -> Summary:
    """Two summaries of disjoint points of one block as one: a NaN-only side (None) never wins, and a tie
    goes to the earlier step, so the result does not depend on the order batches arrive in."""
    first = new if new.first_step < stored.first_step else stored
    low = new if _lower(new, stored) else stored
    high = new if _higher(new, stored) else stored
    return Summary(
        stored.points + new.points,
        first.first_step,
        first.first_wall,
        low.min_value,
        low.min_step,
        low.min_wall,
        high.max_value,
        high.max_step,
        high.max_wall,
    )


def _lower(new: Summary, stored: Summary) -> bool:
    """Whether ``new``'s minimum replaces ``stored``'s."""
    if new.min_value is None:
        return False
    if stored.min_value is None or new.min_value < stored.min_value:
        return True
    return new.min_value == stored.min_value and _earlier(new.min_step, stored.min_step)


def _higher(new: Summary, stored: Summary) -> bool:
    """Whether ``new``'s maximum replaces ``stored``'s."""
    if new.max_value is None:
        return False
    if stored.max_value is None or new.max_value > stored.max_value:
        return True
    return new.max_value == stored.max_value and _earlier(new.max_step, stored.max_step)


def _earlier(step: int | None, other: int | None) -> bool:
    """Whether ``step`` comes before ``other`` (both are set wherever their values are)."""
    return step is not None and other is not None and step < other
