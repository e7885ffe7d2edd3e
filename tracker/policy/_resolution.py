"""A metric's resolution, read from its values: an accuracy over n validation samples is a multiple of 1/n.

On a small validation set that step is coarse (1/36) and a learning run repeats values by chance; on a fine
one (thousands of samples) or a continuous metric (a loss), exact repeats mean the predictions stopped
changing. ``degenerate`` reads the step to tell the two apart.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

# Past this denominator a metric counts as continuous: finer than any validation set it could count over.
_MAX_DENOMINATOR = 10**7
# Relative precision a value must be read to: float32's (2^-23, about 1.2e-7), as many trainers store an
# accuracy; relative, so that 60/50,000 reads 3/2,500 and not the looser 1/833.
_FLOAT32_PRECISION = 1.2e-7


def resolution(values: Iterable[float]) -> float:
    """The step the values move in, read from the values themselves: an accuracy over n samples is a
    multiple of 1/n, so each value is taken as the simplest fraction within float32's precision of it (the
    first convergent of its continued fraction there) and the step is 1 over the least common multiple of
    their denominators. A metric with no such structure (a loss, an accuracy averaged over batches) has
    large denominators and so a tiny step; one too fine to tell is 0. The step read can be a multiple of
    the true one (11/36 and 1/36 read 1/36; 10/36 reads 1/18 alone), never a fraction of it."""
    common = 1
    for value in values:
        denominator = _denominator(value)
        if denominator is None:
            return 0.0
        common = math.lcm(common, denominator)
        if common > _MAX_DENOMINATOR:
            return 0.0
    return 1.0 / common


def step_between(values: Iterable[float]) -> float:
    """The step the values move by, whatever their offset and scale: the greatest common divisor of their
    differences, each value read as its simplest fraction as :func:`resolution` reads it. An accuracy over
    30 samples moves by 1/30, and so does it read in percent (10/3) relative to its scale, where
    :func:`resolution` reads percent as thirds; a metric with no such structure (a loss) reads 0, and so do
    values that never moved. Like :func:`resolution`, what it reads is never finer than the truth."""
    fractions = []
    for value in values:
        fraction = _fraction(value)
        if fraction is None:
            return 0.0
        fractions.append(fraction)
    common = 1
    for _, denominator in fractions:
        common = math.lcm(common, denominator)
        if common > _MAX_DENOMINATOR:
            return 0.0
    numerators = [numerator * (common // denominator) for numerator, denominator in fractions]
    divisor = 0
    for numerator in numerators[1:]:
        divisor = math.gcd(divisor, numerator - numerators[0])
    return divisor / common


def _denominator(value: float) -> int | None:
    """The denominator of the first convergent of ``value`` within float32's relative precision, or None past
    ``_MAX_DENOMINATOR``."""
    fraction = _fraction(value)
    return None if fraction is None else fraction[1]


def _fraction(value: float) -> tuple[int, int] | None:
    """``value`` as the first convergent of its continued fraction within float32's relative precision
    (signed numerator, denominator), or None past ``_MAX_DENOMINATOR`` or for a value that is not finite."""
    if not math.isfinite(value):
        return None
    tolerance = max(_FLOAT32_PRECISION * abs(value), 1e-12)
    x = abs(value)
    p_prev, q_prev, p, q = 1, 0, math.floor(x), 1
    rest = x - math.floor(x)
    while abs(x - p / q) > tolerance:
        if rest < 1e-12 or q > _MAX_DENOMINATOR:
            return None
        x_next = 1.0 / rest
        a = math.floor(x_next)
        rest = x_next - a
        p_prev, q_prev, p, q = p, q, a * p + p_prev, a * q + q_prev
    return (p if value >= 0 else -p), q
