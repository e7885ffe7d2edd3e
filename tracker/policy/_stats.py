"""Trend statistics for the statistical rules: slopes with autocorrelation-robust errors, Mann-Kendall.

Learning curves are autocorrelated (a good epoch is followed by a good epoch), so the ordinary least
squares standard error of a slope is too small. The batch-means estimator splits the residuals into ``m``
contiguous batches: their means are nearly independent, so ``b * var(batch means)`` estimates the long-run
variance of the residuals, and the slope's standard error uses it with ``m - 1`` degrees of freedom.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any


def _scipy_stats() -> Any:
    """``scipy.stats``, imported on first use. Importing it takes over a second (1.2 s of the 1.8 s that
    ``plateau replay`` spent importing, on a slow host), every ``plateau`` command and tracker start-up
    imports this module through the rules' registry, and the default policies never call it: only the
    statistical tests below do."""
    from scipy import stats

    return stats


@lru_cache(maxsize=512)
def t_quantile(q: float, df: int) -> float:
    return float(_scipy_stats().t.ppf(q, df))


@lru_cache(maxsize=64)
def z_quantile(q: float) -> float:
    return float(_scipy_stats().norm.ppf(q))


# Values beyond this size are brought down by a power of two before any statistic is computed: squares and
# sums of values near float64's limit would overflow (Python's ``**`` raises, sums become inf and then NaN),
# and a diverging run's values get there. Every statistic here is scale-equivariant, and dividing by a power
# of two is exact, so the scaled result is the same number (until it overflows back, to inf, not an error).
_LARGE = 2.0**400


# Relative size of float64 rounding left in differences of values: 64 ulps of the largest value.
_ROUNDING = 64 * 2.0**-52


def _scale_of(ys: Sequence[float]) -> float:
    """1.0 for ordinary values; a power of two near the largest magnitude when squares could overflow."""
    return _scale_at(max(map(abs, ys), default=0.0))


def _scale_at(top: float) -> float:
    """:func:`_scale_of` for values whose largest magnitude is ``top``."""
    return 1.0 if not top > _LARGE else math.ldexp(1.0, math.frexp(top)[1] - 1)  # top / scale in [1, 2)


@dataclass(frozen=True)
class Trend:
    """A fitted slope per step with a two-sided (1 - 2*alpha) interval; ``p_flat`` is the TOST p-value of
    "|slope| >= delta" (small: the slope is inside +-delta), ``sigma`` the residuals' noise level."""

    slope: float
    low: float
    high: float
    se: float
    df: int
    sigma: float


def ols(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, list[float]]:
    """(slope, intercept, residuals) of the least-squares line."""
    n = len(xs)
    mx = sum(xs) / n
    my = sum(ys) / n
    sxx = sum((x - mx) * (x - mx) for x in xs)
    slope = 0.0 if sxx == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    intercept = my - slope * mx
    return slope, intercept, [y - (intercept + slope * x) for x, y in zip(xs, ys, strict=True)]


def noise_sigma(ys: Sequence[float]) -> float:
    """Robust noise level from first differences: MAD / 0.6745 / sqrt(2) (a trend barely moves it)."""
    scale = _scale_of(ys)
    diffs = sorted(abs(b - a) / scale for a, b in itertools.pairwise(ys))
    if not diffs:
        return 0.0
    mid = len(diffs) // 2
    median = diffs[mid] if len(diffs) % 2 else (diffs[mid - 1] + diffs[mid]) / 2
    return median / 0.6745 / math.sqrt(2) * scale


def step_noise(ys: Sequence[float]) -> float:
    """Step-to-step noise: the spread of the detrended first differences / sqrt(2). Unlike the median
    absolute difference it is not zero on a coarse metric whose values mostly repeat. An exact line reads
    0, not the rounding of its differences (2.97e-17 in a decision's sentence says nothing)."""
    # The largest magnitude is read once, for the scale and the rounding both; ordinary values (scale 1) are
    # differenced without the divisions, which give the same numbers. It runs on retreat's every test.
    top = max(map(abs, ys), default=0.0)
    scale = _scale_at(top)
    if scale == 1.0:
        diffs = [b - a for a, b in itertools.pairwise(ys)]
    else:
        diffs = [b / scale - a / scale for a, b in itertools.pairwise(ys)]
    n = len(diffs)
    if n < 2:
        return 0.0
    mean = sum(diffs) / n
    spread = math.sqrt(sum([(d - mean) * (d - mean) for d in diffs]) / (n - 1) / 2)
    rounding = _ROUNDING * top / scale
    return spread * scale if spread > rounding else 0.0


def trend(xs: Sequence[float], ys: Sequence[float], *, alpha: float, batches: int) -> Trend:
    """OLS slope of ``ys`` on ``xs`` with a batch-means standard error and a (1 - 2 alpha) interval."""
    scale = _scale_of(ys)
    if scale != 1.0:
        tr = trend(xs, [y / scale for y in ys], alpha=alpha, batches=batches)
        return Trend(
            tr.slope * scale, tr.low * scale, tr.high * scale, tr.se * scale, tr.df, tr.sigma * scale
        )
    n = len(xs)
    slope, _, residuals = ols(xs, ys)
    m = max(2, min(batches, n // 2))
    size = n // m
    means = [sum(residuals[i * size : (i + 1) * size]) / size for i in range(m)]
    grand = sum(means) / m
    long_run_var = size * sum((v - grand) * (v - grand) for v in means) / (m - 1)
    # Never below the white-noise variance: with few batches the batch-means estimate can collapse to 0.
    white_var = sum(r * r for r in residuals) / max(1, n - 2)
    variance = max(long_run_var, white_var)
    mx = sum(xs) / n
    sxx = sum((x - mx) * (x - mx) for x in xs)
    se = math.sqrt(variance / sxx) if sxx > 0 else math.inf
    df = m - 1
    half = t_quantile(1 - alpha, df) * se
    return Trend(slope, slope - half, slope + half, se, df, math.sqrt(white_var))


def tost_p(tr: Trend, delta: float) -> float:
    """p-value of the two one-sided tests of H0: |slope| >= delta (max of the two one-sided p-values)."""
    if tr.se == 0:
        return 0.0 if abs(tr.slope) < delta else 1.0
    if not math.isfinite(tr.se):
        return 1.0
    t_cdf = _scipy_stats().t.cdf
    p_low = 1 - float(t_cdf((tr.slope + delta) / tr.se, tr.df))
    p_high = 1 - float(t_cdf((delta - tr.slope) / tr.se, tr.df))
    return max(p_low, p_high)


def one_sided_p(tr: Trend, *, positive: bool) -> float:
    """p-value of H0: slope <= 0 (``positive``) or H0: slope >= 0 (not ``positive``)."""
    if tr.se == 0 or not math.isfinite(tr.se):
        return 0.0 if (tr.slope > 0) == positive and tr.slope != 0 else 1.0
    t = tr.slope / tr.se
    return 1 - float(_scipy_stats().t.cdf(t if positive else -t, tr.df))


@dataclass(frozen=True)
class MannKendall:
    """Mann-Kendall S with tie-corrected variance, its two-sided p-value, and Sen's slope with a
    (1 - 2*alpha) interval from the ordered pairwise slopes."""

    s: int
    p: float
    slope: float
    low: float
    high: float


def mann_kendall(xs: Sequence[float], ys: Sequence[float], *, alpha: float) -> MannKendall:
    scale = _scale_of(ys)
    if scale != 1.0:
        mk = mann_kendall(xs, [y / scale for y in ys], alpha=alpha)
        return MannKendall(mk.s, mk.p, mk.slope * scale, mk.low * scale, mk.high * scale)
    n = len(ys)
    s = 0
    slopes: list[float] = []
    for i in range(n - 1):
        for j in range(i + 1, n):
            diff = ys[j] - ys[i]
            s += (diff > 0) - (diff < 0)
            if xs[j] != xs[i]:
                slopes.append(diff / (xs[j] - xs[i]))
    counts: dict[float, int] = {}
    for y in ys:
        counts[y] = counts.get(y, 0) + 1
    var_s = (n * (n - 1) * (2 * n + 5) - sum(t * (t - 1) * (2 * t + 5) for t in counts.values())) / 18
    if var_s <= 0:
        z = 0.0
    else:
        z = (s - 1) / math.sqrt(var_s) if s > 0 else (s + 1) / math.sqrt(var_s) if s < 0 else 0.0
    p = 2 * (1 - float(_scipy_stats().norm.cdf(abs(z))))
    slopes.sort()
    count = len(slopes)
    if count == 0:
        return MannKendall(s, p, 0.0, 0.0, 0.0)
    median = slopes[count // 2] if count % 2 else (slopes[count // 2 - 1] + slopes[count // 2]) / 2
    c = z_quantile(1 - alpha) * math.sqrt(max(var_s, 0.0))
    lower = max(0, min(count - 1, math.floor((count - c) / 2) - 1))
    upper = max(0, min(count - 1, math.ceil((count + c) / 2)))
    return MannKendall(s, p, median, slopes[lower], slopes[upper])
