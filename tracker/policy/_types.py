"""The values that flow through the policy engine. Plain, frozen, serialisable."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from plateau_tracker._quantile import quantile

# The SDK's, re-exported for the engine and its rules: one definition of a mode, ties and "better".
from plateau_tracker._types import Mode as Mode
from plateau_tracker._types import Ties as Ties
from plateau_tracker._types import better as better

Action = Literal["continue", "checkpoint", "stop", "alert"]


@dataclass(frozen=True)
class Observation:
    """The monitored metric at one step, with the other keys rules asked for (``extras``) at that step.

    A key logged less often than the monitored one, or not yet at this step, is read at its latest step
    before this one and named in ``stale``: a trend (a loss watched for divergence) may read it so, a
    comparison of this very evaluation (the loss that breaks a tie at the best) may not.

    Time comes in as data: rules read no clock.
    """

    step: int
    value: float
    wall_time: float
    extras: Mapping[str, float] = field(default_factory=dict)
    rank: int = 0
    stale: frozenset[str] = frozenset()


class Cohort(Protocol):
    """What a cross-run rule may see of the other runs of its experiment."""

    def values_at(self, step: int, *, finished_only: bool) -> list[float]:
        """The monitored values other runs recorded at exactly ``step``, sorted. ``finished_only``: only
        runs that ended without being pruned (as Optuna's completed trials)."""
        ...

    def cut_from(self, step: int, q: float) -> tuple[float, int] | None:
        """The ``q`` quantile (:func:`plateau_tracker._quantile.quantile`) of each other run's monitored value
        at its first step at or after ``step`` (its first checkpoint past a rung; every run counts, running,
        finished or pruned), and how many values it was taken over; None when there are none. Runs with
        no point that late, or a non-finite one there, are left out. A store may answer without reading
        every value."""
        ...

    def cut_at(self, step: int, q: float) -> tuple[float, int] | None:
        """The ``q`` quantile (:func:`plateau_tracker._quantile.quantile`) of ``values_at(step,
        finished_only=True)`` and how many values it was taken over; None when there are none. A store may
        answer without reading every value."""
        ...

    def finished_at_least(self, count: int) -> bool:
        """Whether at least ``count`` other runs ended without being pruned (a store may stop counting
        there: an experiment of 10,000 finished runs need not be counted to pass 5)."""
        ...


def cut_of(sorted_values: Sequence[float], q: float) -> tuple[float, int] | None:
    """:meth:`Cohort.cut_at` for a cohort that holds its values in memory."""
    return (quantile(sorted_values, q), len(sorted_values)) if sorted_values else None


class BestSoFar(Protocol):
    """The best value so far of what a rule sees, kept by the engine
    (``plateau_tracker.server.policy._improvement.Best``) and moved once per observation before the rules that
    share it judge that observation.

    ``value``/``step``: the best after this observation (None before the first finite value that counts);
    ``previous``/``previous_step``: the best before it; ``improved``: whether this observation is the new
    best. Only finite values count, and only under the rule's improvement test (its margin, its ties and
    its warm-up), so ``patience`` and ``checkpoint`` with the same test share one best and cannot disagree
    about which step it is.
    """

    @property
    def value(self) -> float | None: ...

    @property
    def step(self) -> int | None: ...

    @property
    def previous(self) -> float | None: ...

    @property
    def previous_step(self) -> int | None: ...

    @property
    def improved(self) -> bool: ...


@dataclass(frozen=True)
class _NoBest:
    """The best so far where no engine keeps one (a rule judged on its own): nothing seen yet."""

    value: float | None = None
    step: int | None = None
    previous: float | None = None
    previous_step: int | None = None
    improved: bool = False


NO_BEST: BestSoFar = _NoBest()


@dataclass(frozen=True)
class Context:
    """Facts about the run that are not points: its planned length, its cohort (None if unknown), and the
    best so far of what the rule judging with this context sees (set by the engine, per rule)."""

    planned_steps: int | None = None
    cohort: Cohort | None = None
    best: BestSoFar = NO_BEST


@dataclass(slots=True)
class Verdict:
    """What a rule decided at a step, with a sentence for people and evidence for machines.

    A value: nothing changes a verdict once made (``dataclasses.replace`` makes a changed copy). It is
    not declared frozen because a frozen dataclass sets each field through ``object.__setattr__``, which
    makes building one 3.5 times slower (870 ns against 240 ns here), and ``checkpoint`` builds one on
    every new best.
    """

    action: Action
    rule: str
    step: int
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)
    best_step: int | None = None
    best_value: float | None = None


def fmt(value: float | None) -> str:
    """A metric value as people read it: 6 significant digits, NaN and inf spelled out."""
    if value is None:
        return "none"
    if math.isfinite(value):  # the common case first: a checkpoint reason formats two per new best
        return f"{value:.6g}"
    if math.isnan(value):
        return "NaN"
    return "inf" if value > 0 else "-inf"
