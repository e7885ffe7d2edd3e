"""``threshold``: stop once the monitored metric reaches a target."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from plateau_tracker.server.policy._base import MAX_STEP, Rule, RuleParams, State
from plateau_tracker.server.policy._types import Context, Observation, Verdict, fmt


class ThresholdParams(RuleParams):
    """``stop_at``: the target (reached when >= it in mode max, <= it in mode min)."""

    rule: Literal["threshold"] = "threshold"
    stop_at: float = Field(allow_inf_nan=False)
    warmup: int = Field(default=0, ge=0, le=MAX_STEP, description="steps below this are not judged")


class Threshold(Rule[ThresholdParams]):
    """Stop when the target is reached: the run is good enough. NaN/inf never reach it. A guard: it stops
    on its own under ``combine: all``. Steps below ``warmup`` are not judged."""

    name = "threshold"
    guard = True
    judges_late = True

    def initial_state(self) -> State:
        return {}

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        target = self.params.stop_at
        reached = obs.value >= target if self.mode == "max" else obs.value <= target
        if obs.step < self.params.warmup or not reached:
            return state, None
        verdict = self.stop(
            obs,
            reason=f"{self.monitor} reached {fmt(obs.value)} at step {obs.step} (target {fmt(target)})",
            evidence={"value": obs.value, "target": target, "mode": self.mode},
            best_step=ctx.best.step,
            best_value=ctx.best.value,
        )
        return state, verdict
