"""``overfitting``: validation getting worse while training keeps getting better."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from plateau_tracker.server.policy._base import MAX_STEP, Rule, RuleParams, State
from plateau_tracker.server.policy._improvement import ImprovementTest
from plateau_tracker.server.policy._keys import MetricNames, Names
from plateau_tracker.server.policy._stats import one_sided_p, trend
from plateau_tracker.server.policy._types import Context, Mode, Observation, Verdict, fmt


class OverfittingParams(RuleParams):
    """Over the last ``window`` evaluations, the monitored (validation) metric trends worse and the
    training metric ``train_key`` trends better, each significant at ``alpha`` (one-sided, batch-means
    error). ``train_mode`` is the training metric's direction (a loss: min)."""

    rule: Literal["overfitting"] = "overfitting"
    train_key: MetricNames
    train_mode: Mode = "min"
    window: int = Field(default=10, ge=4, le=1000)
    alpha: float = Field(default=0.05, gt=0.0, lt=0.5)
    batches: int = Field(default=3, ge=2, le=50)
    warmup: int = Field(default=0, ge=0, le=MAX_STEP)


class Overfitting(Rule[OverfittingParams]):
    """Steps where either metric is missing or non-finite are skipped. Silent after it stops."""

    name = "overfitting"

    def required_keys(self) -> tuple[str, ...]:
        return Names.of(self.params.train_key).order

    def improvement_test(self) -> ImprovementTest:
        # Steps below the warm-up are not judged, and do not set the best either.
        return ImprovementTest(self.mode, from_step=self.params.warmup)

    def initial_state(self) -> State:
        return {"xs": [], "val": [], "train": []}

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        p = self.params
        train = Names.of(p.train_key).read(obs.extras)
        if obs.step < p.warmup or train is None:
            return state, None
        if not (math.isfinite(obs.value) and math.isfinite(train)):
            return state, None
        best, best_step = ctx.best.value, ctx.best.step
        xs, val, trn = state["xs"], state["val"], state["train"]
        for window, value in ((xs, obs.step), (val, obs.value), (trn, train)):
            window.append(value)
            del window[: -p.window]
        if len(xs) < p.window:
            return state, None
        val_trend = trend(xs, val, alpha=p.alpha, batches=p.batches)
        train_trend = trend(xs, trn, alpha=p.alpha, batches=p.batches)
        p_val_worse = one_sided_p(val_trend, positive=self.mode == "min")
        p_train_better = one_sided_p(train_trend, positive=p.train_mode == "max")
        if p_val_worse >= p.alpha or p_train_better >= p.alpha:
            return state, None
        train_name = Names.of(p.train_key).read_name(obs.extras)
        reason = (
            f"{self.monitor} is getting worse ({val_trend.slope:.3g}/step, p={p_val_worse:.3g}) while "
            f"{train_name} keeps improving ({train_trend.slope:.3g}/step, p={p_train_better:.3g}) over "
            f"steps {xs[0]}-{xs[-1]}: overfitting; best {fmt(best)} at step {best_step}"
        )
        verdict = self.stop(
            obs,
            reason=reason,
            evidence={
                "train_key": train_name,
                "val_slope": val_trend.slope,
                "p_val_worse": p_val_worse,
                "train_slope": train_trend.slope,
                "p_train_better": p_train_better,
                "window": [xs[0], xs[-1]],
            },
            best_step=best_step,
            best_value=best,
        )
        return state, verdict
