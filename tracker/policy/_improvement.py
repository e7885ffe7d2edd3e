"""When does a value count as an improvement on the best so far? Shared by patience and checkpoint."""

from __future__ import annotations

import math

from tracker.policy._types import Mode, Ties, better


def margin(best: float, min_delta: float, relative: bool) -> float:
    """The amount by which a value must beat ``best``: ``min_delta``, or ``min_delta * |best|``."""
    return min_delta * abs(best) if relative else min_delta


def improves(
    value: float, best: float | None, *, mode: Mode, min_delta: float, relative: bool, ties: Ties
) -> bool:
    """True when ``value`` beats ``best`` by more than the margin (by at least it, with ``ties="improve"``).

    A non-finite value never improves (the ``non_finite`` rule judges those). With no best yet, any finite
    value is an improvement.
    """
    if not math.isfinite(value):
        return False
    if best is None:
        return True
    d = margin(best, min_delta, relative)
    gain = value - best if mode == "max" else best - value
    return gain >= d if ties == "improve" else gain > d


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
