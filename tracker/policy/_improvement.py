"""When does a value count as an improvement on the best so far? Shared by patience and checkpoint.

The margin is applied the way Lightning's ``EarlyStopping`` applies it: the value is moved by the margin
and compared with the best (``value + min_delta < best`` in mode min, ``value - min_delta > best`` in mode
max), never ``value - best > min_delta``. The two differ in floating point (4.4 - 4.2 is
0.20000000000000018), and only the first keeps the documented equivalence with Lightning bit for bit.
"""

from __future__ import annotations

import math

from tracker.policy._types import Mode, Ties, better

# A gain equal to the margin "up to float rounding": the moved value and the best differ by a few units in
# the last place of the numbers involved (each decimal input is already rounded once, the sum once more).
_TIE_ULPS = 4


def margin(best: float, min_delta: float, relative: bool) -> float:
    """The amount by which a value must beat ``best``: ``min_delta``, or ``min_delta * |best|``."""
    return min_delta * abs(best) if relative else min_delta


def is_tie(value: float, best: float, d: float, *, mode: Mode) -> bool:
    """True when ``value`` gains exactly the margin ``d`` on ``best``, up to float rounding
    (``3.8 - 0.1`` against ``3.7`` in mode max is a tie, although the float sum is 3.6999999999999997)."""
    moved = value - d if mode == "max" else value + d
    return abs(moved - best) <= _TIE_ULPS * math.ulp(max(abs(value), abs(best), d))


def improves(
    value: float, best: float | None, *, mode: Mode, min_delta: float, relative: bool, ties: Ties
) -> bool:
    """True when ``value`` beats ``best`` by more than the margin; with ``ties="improve"`` a gain equal to
    the margin (up to float rounding, see :func:`is_tie`) improves too.

    ``ties="wait"`` is Lightning's test to the bit: ``value + d < best`` (mode min), ``value - d > best``
    (mode max). A non-finite value never improves (the ``non_finite`` rule judges those). With no best yet,
    any finite value is an improvement.
    """
    if not math.isfinite(value):
        return False
    if best is None:
        return True
    d = margin(best, min_delta, relative)
    moved = value - d if mode == "max" else value + d
    if better(moved, best, mode):
        return True
    return ties == "improve" and is_tie(value, best, d, mode=mode)


def needed(best: float, *, mode: Mode, min_delta: float, relative: bool) -> float:
    """The value a new point has to pass to count as an improvement (for evidence and sentences)."""
    d = margin(best, min_delta, relative)
    return best + d if mode == "max" else best - d


def update_best(
    best: float | None, best_step: int | None, value: float, step: int, *, mode: Mode
) -> tuple[float | None, int | None]:
    """The best finite value and its step after seeing ``value`` (strict: ties keep the earlier step)."""
    # The engine's hottest test (several rules per observation): ``improves`` with no margin, without its
    # keyword handling.
    if math.isfinite(value) and (best is None or better(value, best, mode)):
        return value, step
    return best, best_step
