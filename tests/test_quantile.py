"""One quantile everywhere: the pruning rules, replay's p95, step times and staleness agree with numpy's
default (linear interpolation) and with each other."""

from __future__ import annotations

import random
import statistics

import numpy as np
import pytest

from plateau_tracker._quantile import quantile
from plateau_tracker.complexity import StepTimes
from plateau_tracker.server.replay._report import _p95


def test_the_quantile_is_numpys_default_and_statistics_inclusive() -> None:
    rng = random.Random(3)
    for n in (1, 2, 3, 10, 101):
        values = sorted(rng.random() for _ in range(n))
        for q in (0.0, 0.05, 0.25, 0.5, 0.9, 0.95, 1.0):
            assert quantile(values, q) == pytest.approx(float(np.quantile(values, q)))
        if n > 1:
            cuts = statistics.quantiles(values, n=20, method="inclusive")
            assert quantile(values, 0.95) == pytest.approx(cuts[-1])
    with pytest.raises(ValueError, match="no values"):
        quantile([], 0.5)


def test_every_page_reports_the_same_quantile() -> None:
    durations = [0.4, 0.1, 0.9, 0.3, 0.7, 0.2, 0.5]
    times = StepTimes(skip_first=0)
    for seconds in durations:
        times.add(seconds)
    assert times.figures()["step_time_p90_s"] == pytest.approx(float(np.quantile(durations, 0.9)))
    assert _p95(durations) == pytest.approx(float(np.quantile(durations, 0.95)))
