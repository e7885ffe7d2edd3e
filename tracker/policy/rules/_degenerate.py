"""``degenerate``: stop a run whose metric keeps returning to exactly the same few values."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from tracker.policy._base import Rule, RuleParams, State
from tracker.policy._improvement import update_best
from tracker.policy._types import Context, Observation, Verdict, fmt
from tracker.policy.rules._window import warm_up_over


class DegenerateParams(RuleParams):
    """Stop when the last ``window`` finite values take at most ``max_distinct`` distinct values.

    A model that predicts a constant (a collapsed classifier, a run stuck at initialisation) scores exactly
    the same accuracy, or one of a few class shares, at every evaluation; a learning model's metric over
    thousands of samples practically never repeats exactly. Do not use it on metrics logged with coarse
    rounding (a run at 0.98, 0.97, 0.98 ... would look degenerate).

    Nothing is judged before the warm-up is over: the learning rate (``lr_key``) has started to fall, the
    step is at least ``warmup``, and past ``min_progress`` of the planned length; many runs sit at chance
    until their learning rate has warmed up.
    """

    rule: Literal["degenerate"] = "degenerate"
    window: int = Field(default=6, ge=3, le=100)
    max_distinct: int = Field(default=3, ge=1)
    warmup: int = Field(default=0, ge=0, description="steps below this are not judged")
    min_progress: float = Field(default=0.0, ge=0.0, le=1.0)
    lr_key: str | None = Field(default=None, min_length=1)


class Degenerate(Rule[DegenerateParams]):
    """NaN/inf are left to ``non_finite`` and not counted. Silent after it stops."""

    name = "degenerate"
    in_place = True

    def required_keys(self) -> tuple[str, ...]:
        return (self.params.lr_key,) if self.params.lr_key else ()

    def initial_state(self) -> State:
        return {"ys": [], "best": None, "best_step": None, "stopped": False}

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        p = self.params
        if state["stopped"] or not math.isfinite(obs.value):
            return state, None
        state, warm = warm_up_over(
            state, obs, ctx, lr_key=p.lr_key, warmup=p.warmup, min_progress=p.min_progress
        )
        best, best_step = update_best(state["best"], state["best_step"], obs.value, obs.step, mode=self.mode)
        state["best"], state["best_step"] = best, best_step  # in place: evaluate handed us our own copy
        ys = state["ys"]
        ys.append(obs.value)
        if len(ys) > p.window:
            del ys[: len(ys) - p.window]
        if not warm or len(ys) < p.window or len(set(ys)) > p.max_distinct:
            return state, None
        distinct = sorted(set(ys))
        shown = ", ".join(fmt(v) for v in distinct)
        verdict = self.stop(
            obs,
            reason=(
                f"{self.monitor} has taken only {len(distinct)} distinct value(s) ({shown}) over its last "
                f"{p.window} evaluations: the model's output looks degenerate (e.g. a constant prediction)"
            ),
            evidence={"values": list(ys), "distinct": distinct, "window": p.window},
            best_step=best_step,
            best_value=best,
        )
        state["stopped"] = True
        return state, verdict
