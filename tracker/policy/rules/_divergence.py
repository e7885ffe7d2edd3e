"""``divergence``: stop a run that has crossed a bound, or is exploding relative to its best."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tracker.policy._base import Rule, RuleParams, State
from tracker.policy._improvement import update_best
from tracker.policy._types import Context, Observation, Verdict, fmt


class DivergenceParams(RuleParams):
    """``bound``: stop when the metric is worse than it (above it in mode min, below in mode max).
    ``factor``: stop when the metric is worse than the best by more than ``factor * |best|``.
    At least one is required."""

    rule: Literal["divergence"] = "divergence"
    bound: float | None = Field(default=None, allow_inf_nan=False)
    factor: float | None = Field(default=None, gt=0.0, allow_inf_nan=False)
    warmup: int = Field(default=0, ge=0, description="steps below this are not judged")

    @model_validator(mode="after")
    def _one_of(self) -> DivergenceParams:
        if self.bound is None and self.factor is None:
            raise ValueError("divergence needs bound or factor (or both), got neither")
        return self


class Divergence(Rule[DivergenceParams]):
    """Stop when the run diverges. A guard: stops on its own under ``combine: all``.

    NaN/inf are left to ``non_finite``. Steps below ``warmup`` only update the best.
    """

    name = "divergence"
    guard = True

    def initial_state(self) -> State:
        return {"best": None, "best_step": None, "stopped": False}

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        if state["stopped"]:
            return state, None
        p = self.params
        previous = state["best"]
        best, best_step = update_best(previous, state["best_step"], obs.value, obs.step, mode=self.mode)
        state = {**state, "best": best, "best_step": best_step}
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
        if reason is None:
            return state, None
        verdict = self.stop(
            obs,
            reason=reason,
            evidence={"value": obs.value, "bound": p.bound, "factor": p.factor, "best": best},
            best_step=best_step,
            best_value=best,
        )
        return {**state, "stopped": True}, verdict
