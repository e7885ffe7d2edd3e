"""The one definition of a quantile that Plateau reports: linear interpolation between the closest ranks
(numpy's default, R's type 7, Optuna's pruners). The pruning rules, replay's report, the step-time profile
and the staleness figures all use it, so a "p95" means the same on every page."""

from __future__ import annotations

import math
from collections.abc import Sequence


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0 <= q <= 1) of values already sorted ascending; ``ValueError`` when empty."""
    if not sorted_values:
        raise ValueError("the quantile of no values")
    low, high, fraction = quantile_ranks(len(sorted_values), q)
    return interpolate(sorted_values[low], sorted_values[high], fraction)


def quantile_ranks(count: int, q: float) -> tuple[int, int, float]:
    """Which two ranks (0-based, ascending) of ``count`` values the ``q`` quantile lies between, and how
    far: what a store that can read one rank of a sorted index needs to fetch (two values, not all)."""
    position = q * (count - 1)
    low = math.floor(position)
    return low, min(low + 1, count - 1), position - low


def interpolate(low_value: float, high_value: float, fraction: float) -> float:
    """The quantile between the values at the two ranks :func:`quantile_ranks` named."""
    return low_value + (high_value - low_value) * fraction
