"""When does a value count as an improvement on the best so far, and the best so far itself: the tracker's
policy engine keeps one :class:`Best` per improvement test, and every rule reads it from its context; the
SDK judges with the same code while the tracker is away. Defined once, here, in the dependency-free SDK.

The margin is applied the way Lightning's ``EarlyStopping`` applies it: the value is moved by the margin
and compared with the best (``value + min_delta < best`` in mode min, ``value - min_delta > best`` in mode
max), never ``value - best > min_delta``. The two differ in floating point (4.4 - 4.2 is
0.20000000000000018), and only the first keeps the documented equivalence with Lightning bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from plateau_tracker._types import Mode, Ties, better

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


@dataclass(frozen=True)
class ImprovementTest:
    """What moves a best: a finite value that beats it by more than the margin (``min_delta``, relative to
    ``|best|`` when ``relative``; with ``ties="improve"`` by at least it), at a step at or past
    ``from_step`` (the rule's warm-up). The default is the plain test: any finite value strictly better."""

    mode: Mode
    min_delta: float = 0.0
    relative: bool = False
    ties: Ties = "wait"
    from_step: int = 0

    @property
    def plain(self) -> bool:
        """Whether this is a strict comparison without margin (the engine's fast path)."""
        return self.min_delta == 0.0 and self.ties == "wait"


class Best:
    """The best so far under one :class:`ImprovementTest` (the tracker's ``BestSoFar``):
    the engine moves it with :meth:`see` once per observation, before the rules that share it judge the
    observation, and stores it with the rules' states (:meth:`stored`)."""

    __slots__ = (
        "_from",
        "_max",
        "_plain",
        "improved",
        "previous",
        "previous_step",
        "seen",
        "step",
        "test",
        "value",
    )

    def __init__(self, test: ImprovementTest) -> None:
        self.test = test
        self.value: float | None = None
        self.step: int | None = None
        self.previous: float | None = None
        self.previous_step: int | None = None
        self.improved = False
        self.seen: object = None  # the observation last seen: one move per observation, however many rules
        # The test's fields, unpacked once: see() runs per observation and test, on the engine's hot path.
        self._plain, self._max, self._from = test.plain, test.mode == "max", test.from_step

    def see(self, value: float, step: int) -> None:
        """Move the best by one observation (of the value the rules sharing it judge)."""
        best = self.previous = self.value
        self.previous_step = self.step
        if step < self._from:
            improved = False
        elif self._plain:  # any finite value strictly better, without improves()'s keyword handling
            improved = math.isfinite(value) and (
                best is None or (value > best if self._max else value < best)
            )
        else:
            test = self.test
            improved = improves(
                value, best, mode=test.mode, min_delta=test.min_delta, relative=test.relative, ties=test.ties
            )
        self.improved = improved
        if improved:
            self.value, self.step = value, step

    def copy(self) -> Best:
        """An independent copy (to judge a point without moving this best)."""
        other = Best(self.test)
        other.value, other.step = self.value, self.step
        return other

    def stored(self) -> list[Any] | None:
        """The best as a rule state stores it: ``[value, step]``, or None before any."""
        return None if self.value is None else [self.value, self.step]

    def restore(self, wrapper: dict[str, Any]) -> None:
        """Take the best stored in a rule's state wrapper. States stored before the engine kept the best
        hold it in the rule's own state (``best``/``best_step``); of several such, the better one (a rule
        that had stopped kept an older best) wins, a tie going to the earlier step."""
        stored = wrapper.get("best")
        if stored is not None:
            self.value, self.step = stored[0], stored[1]
            return
        if "best" in wrapper:  # stored by the engine as None: nothing yet
            return
        inner = wrapper.get("s") or {}
        value, step = inner.get("best"), inner.get("best_step")
        if value is None or step is None:
            return
        if self.value is None or better(value, self.value, self.test.mode):
            self.value, self.step = value, step
        elif value == self.value and self.step is not None and step < self.step:
            self.step = step
