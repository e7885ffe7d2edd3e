"""``perfect``: stop a run whose watched metric sits at the best score it can take."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from plateau_tracker.server.policy._base import Rule, RuleParams, State
from plateau_tracker.server.policy._percent import (
    CLIMB_TO_ONE,
    could_be_percent_at_one,
    in_percent,
    names_a_share,
)
from plateau_tracker.server.policy._types import Context, Mode, Observation, Verdict, fmt


class PerfectParams(RuleParams):
    """Stop once the watched metric has taken its perfect score at each of the last ``hold`` evaluations.

    The perfect score is read from the values, never from a name alone: in mode ``max``, 1 for a metric
    whose every value so far lies in [0, 1] and at least one strictly between (a share: accuracy, F1, AUC;
    a count that steps 0, 1, 2 takes no value between, and is never judged); in mode ``min``, 0 for a
    metric whose every value so far is at least 0 (an error rate, a loss). A share in percent (timm's and
    torchvision's ``top1``, ``100 * correct / total``) is read as one too, 100 in mode max, where the
    monitor's name says it is a share (``acc``, ``f1``, ``top1``, ``mAP``, and no loss or error word; not a
    reward, a return or PSNR) and its values all lie in [0, 100] with at least one strictly between
    1 and 100 that is not a whole number; a name alone does not say percent, and a return, a reward or a
    count can pass through 100 on the way to more. No later value can beat it, so
    the step that first reached it is the one to keep. Small validation sets reach it often: wine's 36
    samples all right at the fifth epoch of an 80-epoch plan, its loss still falling towards 0.
    """

    rule: Literal["perfect"] = "perfect"
    hold: int = Field(default=1, ge=1, le=1000)


class Perfect(Rule[PerfectParams]):
    """NaN/inf are left to ``non_finite``: they neither count towards ``hold`` nor reset it. A guard: it
    stops on its own under ``combine: all``. Silent after it stops."""

    name = "perfect"
    guard = True

    def __init__(self, params: PerfectParams, *, monitor: str, mode: Mode) -> None:
        super().__init__(params, monitor=monitor, mode=mode)
        self._share = names_a_share(monitor, mode)

    def initial_state(self) -> State:
        # The range of the finite values so far, whether one lay strictly between 0 and 1 (a share), and how
        # many evaluations in a row have been perfect. ``percent`` (a fraction strictly between 1 and 100
        # seen, for a monitor named as a share) is added when first seen: other monitors' states are as
        # before, and so is ``rises`` (the new bests below 1 after the first value, for a monitor named as a
        # share).
        return {"low": None, "high": None, "between": False, "run": 0}

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        value = obs.value
        if not math.isfinite(value):
            return state, None
        # In place (evaluate handed this rule its own copy); cheapest first: this runs on every point.
        low, high = state["low"], state["high"]
        if low is None or value < low:
            state["low"] = value
        if high is None or value > high:
            state["high"] = value
        if not state["between"] and 0.0 < value < 1.0:
            state["between"] = True
        if self._share and not state.get("percent") and in_percent(value):
            state["percent"] = True
        if self._share and value < 1.0 and ctx.best.improved and low is not None:
            state["rises"] = state.get("rises", 0) + 1  # a new best below 1, after the first value
        if value != (1.0 if self.mode == "max" else 0.0) and (value != 100.0 or not self._share):
            if state["run"]:
                state["run"] = 0
            return state, None
        perfect = self._perfect_score(state)
        if perfect is None and value == 1.0 and state.get("rises", 0) >= CLIMB_TO_ONE and state["between"]:
            perfect = 1.0  # values that could be a percent at 1%, but they climbed to 1: a share's perfect
        state["run"] = state["run"] + 1 if perfect == value else 0
        if state["run"] < self.params.hold:
            return state, None
        assert perfect is not None  # run > 0: this value is the perfect score
        bounds = (
            ("[0, 1]" if perfect == 1.0 else "[0, 100], a share in percent,")
            if self.mode == "max"
            else ("at least 0")
        )
        verdict = self.stop(
            obs,
            reason=(
                f"{self.monitor} has been {fmt(perfect)} at its last {state['run']} evaluation(s), the best "
                f"score a metric whose values all lie in {bounds} can take: nothing is left to gain on it; "
                f"keep step {ctx.best.step}"
            ),
            evidence={
                "perfect": perfect,
                "evaluations_at_it": state["run"],
                "hold": self.params.hold,
                "lowest": state["low"],
                "highest": state["high"],
            },
            best_step=ctx.best.step,
            best_value=ctx.best.value,
            headline=f"{self.monitor} has reached its perfect score",
        )
        return state, verdict

    def _perfect_score(self, state: State) -> float | None:
        return perfect_score(
            self.mode,
            state["low"],
            state["high"],
            between=state["between"],
            percent=state.get("percent", False),
            named_share=self._share,
        )


def perfect_score(
    mode: Mode, low: float, high: float, *, between: bool, percent: bool = False, named_share: bool = False
) -> float | None:
    """The best score a metric can take, read from its values so far (their lowest and highest, whether one
    lay strictly between 0 and 1, and, for a monitor named as a share, whether one was :func:`in_percent`):
    1 in mode max for a share, 100 for a share in percent, 0 in mode min for a non-negative metric; None
    when the values say no such bound holds, or, for a monitor named as a share (``named_share``), while they
    could still be a share in percent at about 1% (:func:`could_be_percent_at_one`)."""
    if mode == "max":
        if low < 0.0:
            return None
        if between and high <= 1.0:
            if named_share and could_be_percent_at_one(low, high, percent=percent):
                return None
            return 1.0
        return 100.0 if percent and high <= 100.0 else None
    return 0.0 if low >= 0.0 else None
