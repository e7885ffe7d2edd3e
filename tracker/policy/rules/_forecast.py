"""``forecast``: budget-aware stopping by extrapolating the recent trend to the run's planned end."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from plateau_tracker.server.policy._base import MAX_STEP, Rule, RuleParams, State
from plateau_tracker.server.policy._keys import MetricNames, Names
from plateau_tracker.server.policy._stats import trend
from plateau_tracker.server.policy._types import Context, Observation, Verdict, fmt
from plateau_tracker.server.policy.rules._window import lr_warmup_over, push


class ForecastParams(RuleParams):
    """Stop when even an optimistic extrapolation cannot beat the best by more than ``delta`` by the end.

    Over the last ``window`` points the slope's upper confidence bound (level ``1 - alpha``, batch-means
    error) is extrapolated to the planned end (``planned_steps``, else what the run declared, else twice the
    current step: with no plan, the run is assumed to go on as long again as it has so far). With a
    learning-rate key, the rule waits until the rate has decayed to ``lr_fraction`` of its peak: under a
    decaying schedule the late, low-rate phase is where curves lift, so a plateau before it is not final.

    The gain that matters is ``delta`` in the metric's units, or, scale-free, ``relative_delta`` times the
    progress the run has made so far (its best minus its first value): 0.01 asks whether the rest of the
    run can still add 1% of what it has gained, the same bar for an accuracy, a cross-entropy or a
    perplexity. With both, the larger margin counts.
    """

    rule: Literal["forecast"] = "forecast"
    delta: float = Field(default=0.001, ge=0.0, allow_inf_nan=False)
    relative_delta: float = Field(default=0.0, ge=0.0, le=1.0, allow_inf_nan=False)
    window: int = Field(default=10, ge=4, le=1000)
    alpha: float = Field(default=0.05, gt=0.0, lt=0.5)
    batches: int = Field(default=3, ge=2, le=50)
    min_progress: float = Field(default=0.1, ge=0.0, le=1.0)
    planned_steps: int | None = Field(default=None, ge=1, le=MAX_STEP)
    lr_key: MetricNames | None = None
    lr_fraction: float = Field(default=1.0, gt=0.0, le=1.0)


class Forecast(Rule[ForecastParams]):
    """NaN/inf are left out of the window; silent after it stops."""

    name = "forecast"

    def required_keys(self) -> tuple[str, ...]:
        return Names.of(self.params.lr_key).order

    def initial_state(self) -> State:
        return {"xs": [], "ys": [], "first": None}

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        p = self.params
        lr = Names.of(p.lr_key).read(obs.extras)
        state, _ = lr_warmup_over(state, lr)
        best, best_step = ctx.best.value, ctx.best.step
        if math.isfinite(obs.value):  # NaN/inf move neither the best nor the window
            if state.get("first") is None:
                state["first"] = obs.value
            push(state, obs, p.window)
        planned = p.planned_steps or ctx.planned_steps or 2 * obs.step
        if best is None or len(state["ys"]) < p.window:
            return state, None
        if obs.step < p.min_progress * planned:
            return state, None
        if lr is not None and state.get("lr_peak") and lr > p.lr_fraction * state["lr_peak"]:
            return state, None
        xs, ys = state["xs"], state["ys"]
        tr = trend(xs, ys, alpha=p.alpha, batches=p.batches)
        sign = 1.0 if self.mode == "max" else -1.0
        # Optimistic: the bound of the slope in the improving direction, never below zero.
        rate = max(0.0, tr.high if sign > 0 else -tr.low)
        remaining = max(0, planned - obs.step)
        level_now = sum(ys) / len(ys) + sign * rate * (obs.step - sum(xs) / len(xs))
        predicted = level_now + sign * rate * remaining
        gain = sign * (predicted - best)
        first = state.get("first")  # absent from states stored before it was kept
        progress = abs(best - first) if first is not None else 0.0
        margin = max(p.delta, p.relative_delta * progress)
        if gain > margin:
            return state, None
        bar = f"{margin:.3g}" + (
            f" ({p.relative_delta:.3g} of its progress so far, {progress:.3g})"
            if p.relative_delta * progress > p.delta
            else ""
        )
        reason = (
            f"{self.monitor} is not expected to beat its best {fmt(best)} (step {best_step}) by more than "
            f"{bar} by the planned end (step {planned}): at best {rate:.3g}/step over {remaining} "
            f"steps reaches {fmt(predicted)}"
        )
        verdict = self.stop(
            obs,
            reason=reason,
            evidence={
                "slope": tr.slope,
                "slope_bound": rate * sign,
                "remaining_steps": remaining,
                "predicted_end": predicted,
                "predicted_gain": gain,
                "delta": p.delta,
                "relative_delta": p.relative_delta,
                "progress": progress,
                "margin": margin,
                "lr": lr,
                "planned_steps": planned,
            },
            best_step=best_step,
            best_value=best,
            headline=f"{self.monitor} is not expected to improve enough to matter by step {planned}",
        )
        return state, verdict
