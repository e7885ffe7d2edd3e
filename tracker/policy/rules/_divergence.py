"""``divergence``: stop a run that has crossed a bound, or is exploding relative to its best."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from plateau_tracker.server.policy._base import MAX_RATIO, MAX_STEP, Rule, RuleParams, State
from plateau_tracker.server.policy._types import Context, Observation, Verdict, fmt


class DivergenceParams(RuleParams):
    """``bound``: stop when the metric is worse than it (above it in mode min, below in mode max).
    ``factor``: stop when the metric is worse than the best by more than ``factor * |best|``.
    ``run_factor``: stop when the metric is worse than the best by more than ``run_factor`` times the run's
    own scale, the larger of ``|best|`` and its progress ``|first - best|`` (scale-free, and a loss that
    fell from 2.3 to 0.05 is not "diverging" at 0.6; a run whose scale is still 0 is not judged by it).
    At least one is required.

    ``confirm`` (1 by default; the ``default`` policy sets 2): stop only once that many evaluations in a row
    are past the bound, each no better than the one before. A loss that spikes at a high learning rate and
    falls back at the next evaluation is recovering (a digits MLP under SGD at 0.31: 0.58, then 47.6, 14.9,
    4.7, and 0.34 ten evaluations later, stopped at the spike with a regret of 0.075); a run that diverges
    stays out or climbs further, and is stopped one evaluation later."""

    rule: Literal["divergence"] = "divergence"
    bound: float | None = Field(default=None, allow_inf_nan=False)
    factor: float | None = Field(default=None, gt=0.0, le=MAX_RATIO, allow_inf_nan=False)
    run_factor: float | None = Field(default=None, gt=0.0, le=MAX_RATIO, allow_inf_nan=False)
    warmup: int = Field(default=0, ge=0, le=MAX_STEP, description="steps below this are not judged")
    confirm: int = Field(
        default=1, ge=1, le=100, description="evaluations in a row past the bound, each no better, to stop"
    )

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
        return {"first": None, "past": None, "streak": 0}

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        # In place (evaluate handed this rule its own copy), and cheap on the common path: it runs on every
        # point of the default policy, and most points are no worse than the best by much.
        p = self.params
        seen = ctx.best
        value, previous = obs.value, seen.previous
        worse = 0.0  # how much worse than the best (negative: better)
        if previous is not None:
            worse = value - previous if self.mode == "min" else previous - value
        first = state.get("first")  # absent from states stored before run_factor
        if first is None and math.isfinite(value):
            first = state["first"] = value
        if obs.step < p.warmup:
            return state, None
        reason = None
        if p.bound is not None and (value > p.bound if self.mode == "min" else value < p.bound):
            reason = f"{self.monitor} is {fmt(value)} at step {obs.step}, past the bound {fmt(p.bound)}"
        elif previous is None or not worse > 0:  # a new best, a tie, or NaN/inf (non_finite's to judge)
            return state, None
        elif p.factor is not None and worse > p.factor * abs(previous):
            reason = (
                f"{self.monitor} is {fmt(value)} at step {obs.step}, worse than its best "
                f"{fmt(previous)} (step {seen.step}) by more than {p.factor:g} x |best|"
            )
        elif p.run_factor is not None and first is not None:
            # The difference over the factor, not best + factor * scale: that overflows near 1e308.
            scale = max(abs(previous), abs(first - previous))
            if scale > 0 and worse / p.run_factor > scale:
                reason = (
                    f"{self.monitor} is {fmt(value)} at step {obs.step}, worse than its best "
                    f"{fmt(previous)} (step {seen.step}) by more than {p.run_factor:g} x the run's "
                    f"scale {fmt(scale)} (the larger of |best| and its progress from {fmt(first)})"
                )
        # Most points are past no bound and open no streak: they skip the call.
        if p.confirm > 1 and (reason is not None or state.get("streak")):
            reason = self._confirmed(state, value, reason)
        if reason is None:
            return state, None
        verdict = self.stop(
            obs,
            reason=reason,
            evidence={
                "value": value,
                "bound": p.bound,
                "factor": p.factor,
                "run_factor": p.run_factor,
                "best": seen.value,
                "first": first,
                "confirm": p.confirm,
            },
            best_step=seen.step,
            best_value=seen.value,
        )
        return state, verdict

    def _confirmed(self, state: State, value: float, reason: str | None) -> str | None:
        """``reason`` once ``confirm`` evaluations in a row have been past the bound, each no better than
        the one before; else None. A loss that spikes at a high learning rate and falls back at the next
        evaluation is recovering, not diverging (a digits MLP at 0.31 under SGD: 0.58, then 47.6, 14.9, 4.7
        and 0.34 ten evaluations later); one that stays out, or climbs further, is stopped an evaluation
        later than at once."""
        if reason is None:
            state["past"], state["streak"] = None, 0
            return None
        past = state.get("past")
        no_better = past is not None and (value >= past if self.mode == "min" else value <= past)
        streak = state.get("streak", 0) + 1 if no_better else 1  # absent from states stored before confirm
        state["past"], state["streak"] = value, streak
        if streak < self.params.confirm:
            return None
        return f"{reason}, at {streak} evaluations in a row, each no better than the one before"
