"""Replaying a policy over curves, one run at a time or as a sweep in arrival order."""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from plateau_tracker.server.policy import (
    PRUNING_RULES,
    Context,
    Mode,
    Observation,
    PolicySpec,
    Verdict,
    cut_of,
    evaluate,
    initial_states,
)
from plateau_tracker.server.replay._curves import Curve


@dataclass(frozen=True)
class RunResult:
    """Where the policy stopped a curve (``stop_index``, the last checkpoint trained), which checkpoint it
    kept (the best watched value up to there, as the ``checkpoint`` rule saves it, a tie at that value
    broken by a loss where the rule breaks ties) and the full run's best (``full_best_index``: the first
    evaluation at the best watched value of the whole curve, one reference for every policy)."""

    curve: Curve
    stop_index: int
    kept_index: int
    full_best_index: int
    stopped_by: str | None
    mode: Mode = "max"

    @property
    def cost_full(self) -> float:
        return self.curve.cost[-1]

    @property
    def cost_used(self) -> float:
        return self.curve.cost[self.stop_index]

    @property
    def regret(self) -> float:
        """How much worse the kept checkpoint scores than the full run's best one (in the score's units,
        positive is worse)."""
        full, kept = self.curve.score[self.full_best_index], self.curve.score[self.kept_index]
        if math.isnan(full):
            return 0.0
        if math.isnan(kept):
            return math.inf
        return self.curve.score_sign(self.mode) * (full - kept)


def best_index(values: Sequence[float], upto: int, mode: Mode) -> int:
    """Index of the best finite value in ``values[: upto + 1]`` (earliest on ties; 0 if none is finite)."""
    chosen, best = 0, None
    for i in range(upto + 1):
        v = values[i]
        if math.isfinite(v) and (best is None or (v > best if mode == "max" else v < best)):
            chosen, best = i, v
    return chosen


def _kept_index(curve: Curve, verdicts: Sequence[Verdict], stop_index: int, mode: Mode) -> int:
    """The checkpoint the run kept up to ``stop_index``: the first evaluation at its best watched value,
    or a later one at that same value that the ``checkpoint`` rule saved, breaking the tie by a loss
    (``tie_loss_key``). A checkpoint saved only past a margin or a warm-up is not read here: the kept model
    is the best value's, as the replay has always scored it."""
    kept = best_index(curve.watch, stop_index, mode)
    ties = [v.step for v in verdicts if v.action == "checkpoint" and v.evidence.get("tie")]
    if ties:
        tied = curve.steps.index(ties[-1])
        if kept < tied <= stop_index and curve.watch[tied] == curve.watch[kept]:
            return tied
    return kept


class SweepCohort:
    """The runs of a sweep replayed so far, indexed by step for cross-run rules.

    A run stopped early without being pruned (it converged, or was stopped as hopeless) counts at the
    steps after its stop with its last value: its curve is taken as flat from there, as it would have
    stayed. Runs that ran to their end count only where they have values (as Optuna's completed trials).
    """

    def __init__(self) -> None:
        self._all: dict[int, list[float]] = defaultdict(list)
        self._finished: dict[int, list[float]] = defaultdict(list)
        self._ended: list[tuple[int, float]] = []  # (last step, last finite value) of finished runs
        self._count = 0
        # Every run's (steps, values, pruned) up to its stop, and values_from's answers, kept up to date
        # as runs are added (a sweep asks the same few rung steps again and again).
        self._runs: list[tuple[Sequence[int], Sequence[float], bool]] = []
        self._from: dict[tuple[int, bool], list[float]] = {}

    def add(self, curve: Curve, stop_index: int, *, pruned: bool, stopped: bool) -> None:
        last: tuple[int, float] | None = None
        for i in range(stop_index + 1):
            value = curve.watch[i]
            if math.isfinite(value):
                bisect.insort(self._all[curve.steps[i]], value)
                if not pruned:
                    bisect.insort(self._finished[curve.steps[i]], value)
                last = (curve.steps[i], value)
        if not pruned:
            self._count += 1
            if stopped and last is not None:
                self._ended.append(last)
        run = (curve.steps[: stop_index + 1], curve.watch[: stop_index + 1], pruned)
        self._runs.append(run)
        for (step, finished_only), values in self._from.items():
            self._insert_from(values, run, step, finished_only)

    @staticmethod
    def _insert_from(
        values: list[float], run: tuple[Sequence[int], Sequence[float], bool], step: int, finished_only: bool
    ) -> None:
        steps, watched, pruned = run
        index = bisect.bisect_left(steps, step)
        if index < len(steps) and not (finished_only and pruned) and math.isfinite(watched[index]):
            bisect.insort(values, watched[index])

    def cut_from(self, step: int, q: float) -> tuple[float, int] | None:
        return cut_of(self.values_from(step, finished_only=False), q)

    def values_from(self, step: int, *, finished_only: bool) -> list[float]:
        values = self._from.get((step, finished_only))
        if values is None:
            values = self._from[(step, finished_only)] = []
            for run in self._runs:
                self._insert_from(values, run, step, finished_only)
        return values

    def values_at(self, step: int, *, finished_only: bool) -> list[float]:
        if not finished_only:
            return self._all.get(step, [])
        carried = [value for last_step, value in self._ended if last_step < step]
        recorded = self._finished.get(step, [])
        return sorted(recorded + carried) if carried else recorded

    def cut_at(self, step: int, q: float) -> tuple[float, int] | None:
        return cut_of(self.values_at(step, finished_only=True), q)

    def finished_at_least(self, count: int) -> bool:
        return self._count >= count


def replay_curve(policy: PolicySpec, curve: Curve, cohort: SweepCohort | None = None) -> RunResult:
    """Judge ``curve`` with ``policy`` from its first checkpoint; the run stops at the first stop."""
    keys = policy.required_keys()
    observations = [
        Observation(step, value, curve.cost[i], {k: curve.extras[k][i] for k in keys if k in curve.extras})
        for i, (step, value) in enumerate(zip(curve.steps, curve.watch, strict=True))
    ]
    ctx = Context(planned_steps=curve.planned_steps, cohort=cohort)
    evaluation = evaluate(policy, initial_states(policy), observations, ctx)
    last = len(curve.steps) - 1
    stop_index, stopped_by = last, None
    if evaluation.stop_step is not None:
        stop_index = curve.steps.index(evaluation.stop_step)
        stopped_by = next(v.rule for v in evaluation.verdicts if v.action == "stop")
    return RunResult(
        curve=curve,
        stop_index=stop_index,
        kept_index=_kept_index(curve, evaluation.verdicts, stop_index, policy.mode),
        full_best_index=best_index(curve.watch, last, policy.mode),
        stopped_by=stopped_by,
        mode=policy.mode,
    )


def replay_sweep(policy: PolicySpec, curves: Sequence[Curve]) -> list[RunResult]:
    """Replay ``curves`` in arrival order; cross-run rules see only the runs replayed before."""
    cohort = SweepCohort()
    results = []
    for curve in curves:
        result = replay_curve(policy, curve, cohort)
        cohort.add(
            curve,
            result.stop_index,
            pruned=result.stopped_by in PRUNING_RULES,
            stopped=result.stopped_by is not None,
        )
        results.append(result)
    return results
