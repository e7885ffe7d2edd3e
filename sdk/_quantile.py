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
    position = q * (len(sorted_values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)
