"""Cross-run pruning within an experiment: ``percentile`` (median) and ``asha`` (successive halving)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from tracker.policy._base import Rule, RuleParams, State
from tracker.policy._improvement import update_best
from tracker.policy._types import Context, Observation, Verdict, better, fmt

PRUNING_RULES = frozenset({"percentile", "asha"})
"""Rules whose stop prunes a run: such runs do not count as finished for cross-run comparisons."""


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of already sorted values."""
    position = q * (len(sorted_values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


class PercentileParams(RuleParams):
    """Prune when the run's best so far is worse than the ``percentile``-th best of the finished runs'
    values at the same step (50: the median pruner). No pruning before ``n_startup_runs`` runs have
    finished, before step ``warmup_steps`` or the run's ``warmup_evaluations``-th evaluation, or with fewer
    than ``min_runs_at_step`` values at the step."""

    rule: Literal["percentile"] = "percentile"
    percentile: float = Field(default=50.0, gt=0.0, lt=100.0)
    n_startup_runs: int = Field(default=5, ge=0)
    warmup_steps: int = Field(default=0, ge=0)
    warmup_evaluations: int = Field(default=0, ge=0, description="evaluations of this run before pruning")
    min_runs_at_step: int = Field(default=1, ge=1)


class Percentile(Rule[PercentileParams]):
    """As Optuna's PercentilePruner: "best" runs are the top ``percentile`` percent, so a run survives while
    it is at least as good as that cut. NaN never survives a comparison. A guard under ``combine: all``."""

    name = "percentile"
    guard = True

    def initial_state(self) -> State:
        return {"best": None, "best_step": None, "seen": 0, "stopped": False}

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        p = self.params
        best, best_step = update_best(state["best"], state["best_step"], obs.value, obs.step, mode=self.mode)
        seen = state.get("seen", 0) + 1
        state = {**state, "best": best, "best_step": best_step, "seen": seen}
        cohort = ctx.cohort
        if state["stopped"] or cohort is None or obs.step < p.warmup_steps or seen <= p.warmup_evaluations:
            return state, None
        if cohort.finished_runs() < p.n_startup_runs:
            return state, None
        values = cohort.values_at(obs.step, finished_only=True)
        if len(values) < max(1, p.min_runs_at_step):
            return state, None
        # The cut that keeps the best `percentile` percent.
        cut = quantile(values, 1 - p.percentile / 100 if self.mode == "max" else p.percentile / 100)
        if best is not None and not better(cut, best, self.mode):
            return state, None
        reason = (
            f"{self.monitor} best so far {fmt(best)} is worse than the {p.percentile:g}th-percentile cut "
            f"{fmt(cut)} of {len(values)} finished runs at step {obs.step}"
        )
        verdict = self.stop(
            obs,
            reason=reason,
            evidence={"best": best, "cut": cut, "runs_at_step": len(values), "percentile": p.percentile},
            best_step=best_step,
            best_value=best,
        )
        return {**state, "stopped": True}, verdict


class AshaParams(RuleParams):
    """Rungs at ``min_step * reduction_factor**k``. At its first point at or past a rung, a run continues
    only if it is in the top 1/``reduction_factor`` of the values every run recorded at that rung (the
    asynchronous, stopping form of successive halving, as Ray Tune's ASHA)."""

    rule: Literal["asha"] = "asha"
    min_step: int = Field(default=1, ge=1)
    reduction_factor: float = Field(default=3.0, gt=1.0, allow_inf_nan=False)
    max_step: int | None = Field(default=None, ge=1)


class Asha(Rule[AshaParams]):
    """Compares the run's value at the rung step (its latest) with the cohort's values at exactly that step;
    a rung no other run has reached passes. A guard under ``combine: all``."""

    name = "asha"
    guard = True

    def initial_state(self) -> State:
        return {"rung": 0, "best": None, "best_step": None, "stopped": False}

    def rung_step(self, k: int) -> int:
        return round(self.params.min_step * self.params.reduction_factor**k)

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        p = self.params
        best, best_step = update_best(state["best"], state["best_step"], obs.value, obs.step, mode=self.mode)
        state = {**state, "best": best, "best_step": best_step}
        cohort = ctx.cohort
        if state["stopped"] or cohort is None:
            return state, None
        k = state["rung"]
        rung = self.rung_step(k)
        if obs.step < rung or (p.max_step is not None and rung >= p.max_step):
            return state, None
        while self.rung_step(k + 1) <= obs.step:
            k += 1
        state = {**state, "rung": k + 1}
        rung = self.rung_step(k)
        values = cohort.values_at(rung, finished_only=False)
        if not values:
            return state, None
        keep = 1 / p.reduction_factor
        cut = quantile(values, 1 - keep if self.mode == "max" else keep)
        if math.isfinite(obs.value) and not better(cut, obs.value, self.mode):
            return state, None
        reason = (
            f"{self.monitor} {fmt(obs.value)} at rung {rung} is outside the top 1/{p.reduction_factor:g} "
            f"of {len(values)} runs (cut {fmt(cut)})"
        )
        verdict = self.stop(
            obs,
            reason=reason,
            evidence={"rung": rung, "value": obs.value, "cut": cut, "runs_at_rung": len(values)},
            best_step=best_step,
            best_value=best,
        )
        return {**state, "stopped": True}, verdict
