"""``budget``: stop at a step limit or a wall-clock limit."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from plateau_tracker.server.policy._base import MAX_RATIO, MAX_STEP, Rule, RuleParams, State
from plateau_tracker.server.policy._types import Context, Observation, Verdict


class BudgetParams(RuleParams):
    """``max_steps``: stop once the monitored metric is logged at a step >= it. ``max_wall_seconds``: stop
    once that many seconds have passed since the first judged point (its ``wall_time``)."""

    rule: Literal["budget"] = "budget"
    max_steps: int | None = Field(default=None, ge=0, le=MAX_STEP)
    max_wall_seconds: float | None = Field(default=None, gt=0.0, le=MAX_RATIO, allow_inf_nan=False)

    @model_validator(mode="after")
    def _one_of(self) -> BudgetParams:
        if self.max_steps is None and self.max_wall_seconds is None:
            raise ValueError("budget needs max_steps or max_wall_seconds, got neither")
        return self


class Budget(Rule[BudgetParams]):
    """A guard: stops on its own under ``combine: all``. Judges every point, NaN included."""

    name = "budget"
    guard = True

    def initial_state(self) -> State:
        return {"start": None}

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        p = self.params
        if state["start"] is None:
            state["start"] = obs.wall_time
        start = state["start"]
        elapsed = obs.wall_time - start
        if p.max_steps is not None and obs.step >= p.max_steps:
            reason = f"step {obs.step} reached the step budget {p.max_steps}"
        elif p.max_wall_seconds is not None and elapsed >= p.max_wall_seconds:
            reason = f"{elapsed:.0f} s since the first point reached the time budget {p.max_wall_seconds:g} s"
        else:
            return state, None
        verdict = self.stop(
            obs,
            reason=reason,
            evidence={"step": obs.step, "elapsed_s": elapsed, **p.model_dump(exclude={"rule", "ema"})},
            best_step=ctx.best.step,
            best_value=ctx.best.value,
        )
        return state, verdict
