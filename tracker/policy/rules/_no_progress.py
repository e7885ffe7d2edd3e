"""``no_progress``: stop a run that has not started learning once its warm-up is over."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from plateau_tracker.server.policy._base import MAX_RATIO, MAX_STEP, Rule, RuleParams, State
from plateau_tracker.server.policy._keys import MetricNames, Names
from plateau_tracker.server.policy._stats import noise_sigma
from plateau_tracker.server.policy._types import Context, Observation, Verdict, fmt
from plateau_tracker.server.policy.rules._window import push, warm_up_over


class NoProgressParams(RuleParams):
    """Stop when, ``patience`` evaluations after the warm-up, the best value has still not moved from the
    first value by more than ``delta`` (default: ``noise_factor`` x the run's noise).

    The warm-up is over when the learning rate (key ``lr_key``, if given) has started to fall, at step
    ``warmup``, and past ``min_progress`` of the run's planned length (when it declared one) — whichever
    comes last.
    """

    rule: Literal["no_progress"] = "no_progress"
    patience: int = Field(default=3, ge=1, le=MAX_STEP)
    delta: float | None = Field(default=None, gt=0.0, allow_inf_nan=False)
    noise_factor: float = Field(default=3.0, gt=0.0, le=MAX_RATIO, allow_inf_nan=False)
    min_progress: float = Field(default=0.0, ge=0.0, le=1.0)
    lr_key: MetricNames | None = None
    warmup: int = Field(default=0, ge=0, le=MAX_STEP)


class NoProgress(Rule[NoProgressParams]):
    """A run stuck where it started (chance accuracy, a loss that never falls) is stopped early; a run that
    has learned anything is never stopped by this rule. NaN/inf are skipped."""

    name = "no_progress"

    def required_keys(self) -> tuple[str, ...]:
        return Names.of(self.params.lr_key).order

    def initial_state(self) -> State:
        return {"first": None, "xs": [], "ys": [], "wait": 0, "learned": False}

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        p = self.params
        if state.get("learned") or state.get("done"):  # ("done": its name in states stored before)
            return state, None
        lr = Names.of(p.lr_key).read(obs.extras)
        state, warm = warm_up_over(state, obs, ctx, lr=lr, warmup=p.warmup, min_progress=p.min_progress)
        best, best_step = ctx.best.value, ctx.best.step
        first = state["first"] if state["first"] is not None else best
        state["first"] = first
        state = push(state, obs, 20)
        if first is None or best is None:
            return state, None
        sigma = noise_sigma(state["ys"])
        delta = p.delta if p.delta is not None else p.noise_factor * sigma
        gain = best - first if self.mode == "max" else first - best
        if len(state["ys"]) >= 3 and gain > delta:
            state["learned"] = True  # it learns: this rule has nothing more to say
            return state, None
        if not warm:
            return state, None
        wait = state["wait"] + 1
        state["wait"] = wait
        if wait < p.patience:
            return state, None
        reason = (
            f"{self.monitor} has not moved from its first value {fmt(first)} by more than {delta:.3g} "
            f"(best {fmt(best)} at step {best_step}) for {wait} evaluations after warm-up: it is not learning"
        )
        verdict = self.stop(
            obs,
            reason=reason,
            evidence={
                "first": first,
                "best": best,
                "gain": gain,
                "delta": delta,
                "noise_sigma": sigma,
                "wait": wait,
                "lr": lr,
            },
            best_step=best_step,
            best_value=best,
            headline=f"{self.monitor} has not moved from its first value: the model is not learning",
        )
        return state, verdict
