"""``divergence``: stop a run that has crossed a bound, or is exploding relative to its best."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from tracker.policy._base import MAX_RATIO, MAX_STEP, Rule, RuleParams, State
from tracker.policy._improvement import update_best
from tracker.policy._types import Context, Observation, Verdict, fmt


class DivergenceParams(RuleParams):
    """``bound``: stop when the metric is worse than it (above it in mode min, below in mode max).
    ``factor``: stop when the metric is worse than the best by more than ``factor * |best|``.
    ``run_factor``: stop when the metric is worse than the best by more than ``run_factor`` times the run's
    own scale, the larger of ``|best|`` and its progress ``|first - best|`` (scale-free, and a loss that
    fell from 2.3 to 0.05 is not "diverging" at 0.6; a run whose scale is still 0 is not judged by it).
    At least one is required."""

    rule: Literal["divergence"] = "divergence"
    bound: float | None = Field(default=None, allow_inf_nan=False)
    factor: float | None = Field(default=None, gt=0.0, le=MAX_RATIO, allow_inf_nan=False)
    run_factor: float | None = Field(default=None, gt=0.0, le=MAX_RATIO, allow_inf_nan=False)
    warmup: int = Field(default=0, ge=0, le=MAX_STEP, description="steps below this are not judged")

    @model_validator(mode="after")
    def _one_of(self) -> DivergenceParams:
        if self.bound is None and self.factor is None and self.run_factor is None:
            raise ValueError("divergence needs bound, factor or run_factor, got none of them")
        return self


class Divergence(Rule[DivergenceParams]):
    """Stop when the run diverges. A guard: stops on its own under ``combine: all``.

    NaN/inf are left to ``non_finite``. Steps below ``warmup`` only update the best.
    """

    name = "divergence"
    guard = True
    judges_late = True

    def initial_state(self) -> State:
        return {"best": None, "best_step": None, "first": None, "stopped": False}

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        if state["stopped"]:
            return state, None
        p = self.params
        previous = state["best"]
        best, best_step = update_best(previous, state["best_step"], obs.value, obs.step, mode=self.mode)
        first = state.get("first")  # absent from states stored before run_factor
        if first is None and math.isfinite(obs.value):
            first = obs.value
        state = {**state, "best": best, "best_step": best_step, "first": first}
        if obs.step < p.warmup:
            return state, None
        sign = 1.0 if self.mode == "min" else -1.0  # positive: worse
        reason = None
        if p.bound is not None and sign * (obs.value - p.bound) > 0:
            reason = f"{self.monitor} is {fmt(obs.value)} at step {obs.step}, past the bound {fmt(p.bound)}"
        elif p.factor is not None and previous is not None:
            limit = previous + sign * p.factor * abs(previous)
            if sign * (obs.value - limit) > 0:
                reason = (
                    f"{self.monitor} is {fmt(obs.value)} at step {obs.step}, worse than its best "
                    f"{fmt(previous)} (step {state['best_step']}) by more than {p.factor:g} x |best|"
                )
        if reason is None and p.run_factor is not None and previous is not None and first is not None:
            # Differences, not the limit itself: best + factor * scale overflows for values near 1e308.
            scale = max(abs(previous), abs(first - previous))
            if scale > 0 and sign * (obs.value - previous) / p.run_factor > scale:
                reason = (
                    f"{self.monitor} is {fmt(obs.value)} at step {obs.step}, worse than its best "
                    f"{fmt(previous)} (step {state['best_step']}) by more than {p.run_factor:g} x the run's "
                    f"scale {fmt(scale)} (the larger of |best| and its progress from {fmt(first)})"
                )
        if reason is None:
            return state, None
        verdict = self.stop(
            obs,
            reason=reason,
            evidence={
                "value": obs.value,
                "bound": p.bound,
                "factor": p.factor,
                "run_factor": p.run_factor,
                "best": best,
                "first": first,
            },
            best_step=best_step,
            best_value=best,
        )
        return {**state, "stopped": True}, verdict
