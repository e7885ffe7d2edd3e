"""Gradient staleness for asynchronous / parameter-server training.

The parameter store keeps a version counter, bumped at every applied update. A worker remembers the
version it read (``v_read``) before computing its gradient; when it applies it, staleness is
``v_apply - v_read``: how many other updates landed in between. Each worker reports the distribution
every ``report_every`` updates: ``dist/staleness_mean``, ``_p50``, ``_p95``, ``_max``,
``dist/staleness_share_over`` (share above ``bound``), ``dist/update_rate`` (updates/s) and a histogram
(``dist/staleness_hist/<lo>``: counts in power-of-two bins [lo, 2lo)).
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from typing import Any

from plateau_tracker._quantile import quantile
from plateau_tracker._run import Run

__all__ = ["StalenessMonitor", "VersionCounter"]


class VersionCounter:
    """A version counter shared between processes (``multiprocessing.Value``), with its own lock."""

    def __init__(self, value: Any | None = None) -> None:
        self.value = value if value is not None else multiprocessing.get_context("spawn").Value("q", 0)

    def read(self) -> int:
        return int(self.value.value)

    def apply(self, update: Callable[[], Any] | None = None) -> int:
        """Run ``update`` (e.g. ``optimizer.step``) under the lock and bump the version; returns the
        version the update was applied at."""
        with self.value.get_lock():
            version = int(self.value.value)
            if update is not None:
                update()
            self.value.value = version + 1
        return version


def _bin(staleness: int) -> int:
    return 0 if staleness <= 0 else 1 << (staleness.bit_length() - 1)


class StalenessMonitor:
    """Records one worker's staleness and reports its distribution to the run every few updates."""

    def __init__(
        self,
        run: Run,
        counter: VersionCounter,
        *,
        bound: int = 8,
        report_every: int = 20,
        rank: int | None = None,
    ) -> None:
        self.run = run
        self.counter = counter
        self.bound = bound
        self.report_every = report_every
        self.rank = run.rank if rank is None else rank
        self.updates = 0
        self._window: list[int] = []
        self._window_started = time.perf_counter()

    def begin(self) -> int:
        """Call before computing a gradient: the version it is computed against."""
        return self.counter.read()

    def apply(self, v_read: int, update: Callable[[], Any] | None = None) -> int:
        """Apply ``update`` against the store, record and return its staleness."""
        staleness = self.counter.apply(update) - v_read
        self.updates += 1
        self._window.append(staleness)
        if len(self._window) >= self.report_every:
            self.report()
        return staleness

    def report(self) -> dict[str, float]:
        window, self._window = sorted(self._window), []
        if not window:
            return {}
        elapsed = time.perf_counter() - self._window_started
        self._window_started = time.perf_counter()
        n = len(window)

        figures: dict[str, float] = {
            "dist/staleness_mean": sum(window) / n,
            "dist/staleness_p50": float(quantile(window, 0.5)),
            "dist/staleness_p95": float(quantile(window, 0.95)),
            "dist/staleness_max": float(window[-1]),
            "dist/staleness_share_over": sum(s > self.bound for s in window) / n,
            "dist/update_rate": n / elapsed if elapsed > 0 else 0.0,
        }
        for s in window:
            key = f"dist/staleness_hist/{_bin(s)}"
            figures[key] = figures.get(key, 0.0) + 1
        self.run.log(figures, step=self.updates, rank=self.rank)
        return figures
