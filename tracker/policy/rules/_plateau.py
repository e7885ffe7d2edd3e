"""``plateau``: stop when a statistical test says the recent trend is flat (inside +-delta)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from plateau_tracker.server.policy._base import MAX_RATIO, MAX_STEP, Rule, RuleParams, State
from plateau_tracker.server.policy._improvement import ImprovementTest
from plateau_tracker.server.policy._stats import mann_kendall, noise_sigma, tost_p, trend
from plateau_tracker.server.policy._types import Context, Observation, Verdict, fmt
from plateau_tracker.server.policy.rules._window import push

MANN_KENDALL_MAX_WINDOW = 200


class PlateauParams(RuleParams):
    """Over the last ``window`` finite points, test that the slope is inside +-delta per window.

    ``delta``: the total change over the window that counts as flat, in the metric's units; when omitted it
    is ``noise_factor`` times the run's own noise (robust sigma of the window's first differences).
    ``test``: ``tost`` (two one-sided t-tests on the least-squares slope, batch-means standard error) or
    ``mann_kendall`` (Sen's slope with its Mann-Kendall interval). Flat at level ``alpha`` when the
    (1 - 2 alpha) interval of the slope lies inside +-delta.
    """

    rule: Literal["plateau"] = "plateau"
    window: int = Field(default=20, ge=5, le=1000)
    delta: float | None = Field(default=None, gt=0.0, allow_inf_nan=False)
    noise_factor: float = Field(default=1.0, gt=0.0, le=MAX_RATIO, allow_inf_nan=False)
    alpha: float = Field(default=0.05, gt=0.0, lt=0.5)
    test: Literal["tost", "mann_kendall"] = "tost"
    batches: int = Field(default=4, ge=2, le=50, description="batch-means batches (tost)")
    warmup: int = Field(default=0, ge=0, le=MAX_STEP, description="steps below this are not judged")

    @model_validator(mode="after")
    def _mann_kendall_window(self) -> PlateauParams:
        # Mann-Kendall compares every pair of the window on every point: 1,000 points took 0.3 s a point.
        if self.test == "mann_kendall" and self.window > MANN_KENDALL_MAX_WINDOW:
            raise ValueError(
                f"window {self.window} is too large for test mann_kendall (at most "
                f"{MANN_KENDALL_MAX_WINDOW}: it compares every pair of points); use test tost for more"
            )
        return self


class Plateau(Rule[PlateauParams]):
    """Stops on a statistically flat curve, whichever its level.

    NaN/inf are left out of the window (``non_finite`` judges them). Steps below ``warmup`` are skipped. It
    judges nothing until the window is full, and is silent after it stops.
    """

    name = "plateau"

    def improvement_test(self) -> ImprovementTest:
        # Steps below the warm-up are not judged, and do not set the best either.
        return ImprovementTest(self.mode, from_step=self.params.warmup)

    def initial_state(self) -> State:
        return {"xs": [], "ys": []}

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        p = self.params
        if obs.step < p.warmup:
            return state, None
        best, best_step = ctx.best.value, ctx.best.step
        state = push(state, obs, p.window)
        xs, ys = state["xs"], state["ys"]
        if len(ys) < p.window:
            return state, None
        span = xs[-1] - xs[0]
        sigma = noise_sigma(ys)
        delta_total = p.delta if p.delta is not None else p.noise_factor * sigma
        if span <= 0 or delta_total <= 0:
            return state, None
        delta = delta_total / span
        if p.test == "tost":
            tr = trend(xs, ys, alpha=p.alpha, batches=p.batches)
            slope, low, high = tr.slope, tr.low, tr.high
            pvalue = tost_p(tr, delta)
        else:
            mk = mann_kendall(xs, ys, alpha=p.alpha)
            slope, low, high, pvalue = mk.slope, mk.low, mk.high, mk.p
        if not (-delta < low and high < delta):
            return state, None
        level = round(100 * (1 - 2 * p.alpha))
        reason = (
            f"{self.monitor} is flat over its last {p.window} points (steps {xs[0]}-{xs[-1]}): slope "
            f"{slope:.3g}/step, {level}% interval [{low:.3g}, {high:.3g}] inside +-{delta:.3g} "
            f"({p.test}); best {fmt(best)} at step {best_step}"
        )
        verdict = self.stop(
            obs,
            reason=reason,
            evidence={
                "test": p.test,
                "slope": slope,
                "interval": [low, high],
                "p_value": pvalue,
                "delta_per_step": delta,
                "delta_total": delta_total,
                "noise_sigma": sigma,
                "window": [xs[0], xs[-1]],
                "alpha": p.alpha,
            },
            best_step=best_step,
            best_value=best,
            headline=f"{self.monitor} has flattened out",
        )
        return state, verdict
