"""A best-so-far path kept as a run goes: where the best stood at any earlier step, in bounded space."""

from __future__ import annotations

import bisect
from operator import itemgetter

# A best-so-far path keeps at most this many points: thinning only ever makes the looked-up earlier best
# older (so the measured pace larger, the outlook more hopeful), never the reverse.
MAX_PATH = 64
_step_of = itemgetter(0)


def keep_best(path: list[list[float]], step: int, value: float) -> None:
    """Append a new best to a best-so-far path (in place), thinning its middle past ``MAX_PATH`` points
    (the first and the latest stay)."""
    path.append([step, value])
    if len(path) > MAX_PATH:
        del path[1:-1:2]


def best_at_half(path: list[list[float]], t: int) -> float | None:
    """The best so far at step ``t / 2``: the last entry of the step-ordered path at or before it; None
    when the path starts later."""
    at_half = bisect.bisect_right(path, t / 2, key=_step_of)
    return path[at_half - 1][1] if at_half else None
