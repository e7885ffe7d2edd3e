"""The packed block format of ``metric_block``: how a block's steps, values and wall times are laid out
as bytes (little-endian int64 steps, float64 values and wall times, in step order), how they are decoded
into numpy arrays, and the summary each block row carries (what downsampling reads without the data).
Pure: no database. ``tracker.services._point_store`` stores and reads blocks in this format.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

_LITTLE_ENDIAN = sys.byteorder == "little"
STEP_DTYPE = np.dtype("<i8")
FLOAT_DTYPE = np.dtype("<f8")

# One block's summary, in the order of SUMMARY_COLUMNS; the min and max fields are None while the block
# has no value but NaN.
Summary = list[Any]

SUMMARY_COLUMNS = (
    "points",
    "first_step",
    "first_wall",
    "min_value",
    "min_step",
    "min_wall",
    "max_value",
    "max_step",
    "max_wall",
)


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
    """The summary of one block's points given in step order (see :data:`SUMMARY_COLUMNS`)."""
    summary: Summary = [len(steps), steps[0], walls[0], None, None, None, None, None, None]
    finite = [value for value in values if value == value]  # NaN left out
    if finite:
        # index() finds the first occurrence: in step order, a tie keeps the earlier step.
        low, high = values.index(min(finite)), values.index(max(finite))
        summary[3:] = (values[low], steps[low], walls[low], values[high], steps[high], walls[high])
    return summary


def combine(stored: Summary, new: Summary) -> Summary:
    """Two summaries of disjoint points of one block as one: a NaN-only side (None) never wins, and a tie
    goes to the earlier step, so the result does not depend on the order batches arrive in."""
    out = list(stored)
    out[0] = stored[0] + new[0]
    if new[1] < stored[1]:
        out[1], out[2] = new[1], new[2]
    if new[3] is not None and (
        stored[3] is None or new[3] < stored[3] or (new[3] == stored[3] and new[4] < stored[4])
    ):
        out[3:6] = new[3:6]
    if new[6] is not None and (
        stored[6] is None or new[6] > stored[6] or (new[6] == stored[6] and new[7] < stored[7])
    ):
        out[6:9] = new[6:9]
    return out
