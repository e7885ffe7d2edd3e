"""Cross-run pruning within an experiment: ``percentile`` (median) and ``asha`` (successive halving)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import AliasChoices, Field

from plateau_tracker.server.policy._base import MAX_RATIO, MAX_STEP, Rule, RuleParams, State
from plateau_tracker.server.policy._types import Context, Observation, Verdict, better, fmt

PRUNING_RULES = frozenset({"percentile", "asha"})
"""Rules whose stop prunes a run: such runs do not count as finished for cross-run comparisons."""


class PercentileParams(RuleParams):
    """Prune when the run's best so far is worse than the ``percentile``-th best of the finished runs'
    values at the same step (50: the median pruner). No pruning before ``n_startup_runs`` runs have
    finished, at steps below ``warmup`` (Optuna's ``n_warmup_steps``), in the run's first
    ``warmup_evaluations`` evaluations, or with fewer than ``min_runs_at_step`` values at the step.

    ``warmup`` means what it means in every rule: steps below it are not judged. It was spelled
    ``warmup_steps`` here; that name is still accepted (stored policies keep working) and read as
    ``warmup``."""

    rule: Literal["percentile"] = "percentile"
    percentile: float = Field(default=50.0, gt=0.0, lt=100.0)
    n_startup_runs: int = Field(default=5, ge=0, le=MAX_STEP)
    warmup: int = Field(
        default=0,
        ge=0,
        le=MAX_STEP,
        validation_alias=AliasChoices("warmup", "warmup_steps"),
        description="steps below this are not judged",
    )
    warmup_evaluations: int = Field(
        default=0, ge=0, le=MAX_STEP, description="evaluations of this run before pruning"
    )
    min_runs_at_step: int = Field(default=1, ge=1, le=MAX_STEP)


class Percentile(Rule[PercentileParams]):
    """As Optuna's PercentilePruner: "best" runs are the top ``percentile`` percent, so a run survives while
    it is at least as good as that cut. NaN never survives a comparison. A guard under ``combine: all``."""

    name = "percentile"
    guard = True

    def initial_state(self) -> State:
        return {"seen": 0}

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        p = self.params
        best, best_step = ctx.best.value, ctx.best.step
        seen = state["seen"] = state.get("seen", 0) + 1
        cohort = ctx.cohort
        if cohort is None or obs.step < p.warmup or seen <= p.warmup_evaluations:
            return state, None
        if not cohort.finished_at_least(p.n_startup_runs):
            return state, None
        # The cut that keeps the best `percentile` percent.
        found = cohort.cut_at(obs.step, 1 - p.percentile / 100 if self.mode == "max" else p.percentile / 100)
        if found is None or found[1] < p.min_runs_at_step:
            return state, None
        cut, runs_at_step = found
        if best is not None and not better(cut, best, self.mode):
            return state, None
        reason = (
            f"{self.monitor} best so far {fmt(best)} is worse than the {p.percentile:g}th-percentile cut "
            f"{fmt(cut)} of {runs_at_step} finished runs at step {obs.step}"
        )
        verdict = self.stop(
            obs,
            reason=reason,
            evidence={"best": best, "cut": cut, "runs_at_step": runs_at_step, "percentile": p.percentile},
            best_step=best_step,
            best_value=best,
        )
        return state, verdict


class AshaParams(RuleParams):
    """Rungs at ``min_step * reduction_factor**k`` (rounded to whole steps). A run is judged at a rung at its
    first point at or after the rung step, and continues only if it is in the top 1/``reduction_factor`` of
    the values the other runs had there (each at its own first point at or after the rung): the
    asynchronous, stopping form of successive halving, as Ray Tune's ASHA. Rungs at or past ``max_step``
    are not judged."""

    rule: Literal["asha"] = "asha"
    min_step: int = Field(default=1, ge=1, le=MAX_STEP)
    reduction_factor: float = Field(
        default=3.0,
        ge=1.01,
        le=MAX_RATIO,
        allow_inf_nan=False,
        description="at least 1.01: a factor nearer 1 makes rungs at almost every step",
    )
    max_step: int | None = Field(default=None, ge=1, le=MAX_STEP)


_LOG_BEYOND = math.log(MAX_STEP) + 1.0

# Rungs passed because no other run had reached them yet, kept for the evidence of a later stop (bounded:
# rule state stays small).
_MAX_UNCOMPARED = 16


class Asha(Rule[AshaParams]):
    """Successive halving over the experiment. Checkpoints need not land on rung steps: a rung is judged at
    the first checkpoint at or after it, for this run and for the runs it is compared with, so runs
    evaluated every 1,000 steps are compared at rungs 1, 3, 9, ... as well as at 1,000-step rungs. When one
    checkpoint passes several rungs at once, the highest of them is judged (the lower ones would compare
    the same points). A rung no other run has reached yet passes, and is listed in the evidence of a later
    stop (``uncompared_rungs``), never dropped silently. NaN and +-inf are outside the top. A guard under
    ``combine: all``."""

    name = "asha"
    guard = True

    def initial_state(self) -> State:
        return {"rung": 0, "uncompared": []}

    def rung_step(self, k: int) -> int:
        """The step of rung ``k``; past the largest step a point can carry, a step no point reaches."""
        p = self.params
        if math.log(p.min_step) + k * math.log(p.reduction_factor) > _LOG_BEYOND:
            return MAX_STEP + 1  # and never computed: the power would overflow (an error, not inf)
        return round(p.min_step * p.reduction_factor**k)

    def highest_rung(self, step: int) -> int:
        """The largest ``k`` whose rung step is at or before ``step`` (``-1`` when even rung 0 is later),
        by bisection over the rungs below the largest step (at most ~4,300 with the smallest factor, so
        at most 13 rung steps computed), never by counting rungs."""
        if step < self.rung_step(0):
            return -1
        low, high = 0, self._rung_count()  # rung_step(low) <= step < rung_step(high)
        while high - low > 1:
            middle = (low + high) // 2
            if self.rung_step(middle) <= step:
                low = middle
            else:
                high = middle
        return low

    def _rung_count(self) -> int:
        """A rung index past every reachable step."""
        p = self.params
        return math.ceil((_LOG_BEYOND - math.log(p.min_step)) / math.log(p.reduction_factor)) + 2

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        p = self.params
        best, best_step = ctx.best.value, ctx.best.step
        cohort = ctx.cohort
        if cohort is None:
            return state, None
        first = state["rung"]
        k = self.highest_rung(obs.step)
        if k < first:
            return state, None
        rung = self.rung_step(k)
        state["rung"] = k + 1
        if p.max_step is not None and rung >= p.max_step:
            return state, None
        keep = 1 / p.reduction_factor
        found = cohort.cut_from(rung, 1 - keep if self.mode == "max" else keep)
        if found is None:
            uncompared = state.setdefault("uncompared", [])
            uncompared.append(rung)
            del uncompared[:-_MAX_UNCOMPARED]
            return state, None
        cut, compared = found
        if math.isfinite(obs.value) and not better(cut, obs.value, self.mode):
            return state, None
        reason = (
            f"{self.monitor} {fmt(obs.value)} at step {obs.step} (rung {rung}) is outside the top "
            f"1/{p.reduction_factor:g} of {compared} runs there (cut {fmt(cut)})"
        )
        verdict = self.stop(
            obs,
            reason=reason,
            evidence={
                "rung": rung,
                "rung_index": k,
                "rungs_passed_here": [self.rung_step(i) for i in range(max(first, k - _MAX_UNCOMPARED), k)],
                "value": obs.value,
                "cut": cut,
                "runs_at_rung": compared,
                "uncompared_rungs": list(state.get("uncompared", [])),
            },
            best_step=best_step,
            best_value=best,
        )
        return state, verdict
