"""A long command's progress on one terminal line: what is done of how much, the rate, the time left.

Drawn on standard error only when it is a terminal, at most five times a second, so a piped or logged
command prints its result alone. ``add`` is a counter increment and a clock read every few thousand
calls: cheap enough to call once per point.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

_EVERY = 4096  # calls of add() between clock reads
_INTERVAL_S = 0.2


class Progress:
    """``label: 120,000 / 1,000,000 points, 310,000/s, 3 s left``, redrawn in place."""

    def __init__(
        self,
        label: str,
        total: int | None = None,
        unit: str = "points",
        stream: TextIO | None = None,
        *,
        clock_every: int = _EVERY,
    ) -> None:
        """``clock_every``: calls of ``add(1)`` between clock reads; 1 for slow units (runs, files)."""
        self.label, self.total, self.unit = label, total, unit
        self.clock_every = clock_every
        self.stream = stream if stream is not None else sys.stderr
        self.shown = _is_terminal(self.stream)
        self.done = 0
        self._calls = 0
        self._started = self._drawn = time.monotonic()

    def add(self, count: int = 1) -> None:
        self.done += count
        if not self.shown:
            return
        self._calls += 1
        if self._calls % self.clock_every and count == 1:
            return
        now = time.monotonic()
        if now - self._drawn >= _INTERVAL_S:
            self._drawn = now
            self._draw(now)

    def close(self) -> None:
        """The last figures, and the line ended so the result prints below it."""
        if self.shown:
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()

    def line(self, now: float) -> str:
        elapsed = max(now - self._started, 1e-9)
        rate = self.done / elapsed
        of = f" / {self.total:,}" if self.total is not None else ""
        text = f"{self.label}: {self.done:,}{of} {self.unit}, {rate:,.0f}/s"
        if self.total is not None and rate > 0 and self.done < self.total:
            text += f", {_duration((self.total - self.done) / rate)} left"
        return text

    def _draw(self, now: float) -> None:
        self.stream.write("\r\x1b[K" + self.line(now))
        self.stream.flush()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"
