"""``degenerate``: stop a run whose metric keeps returning to exactly the same few values."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from tracker.policy._base import MAX_STEP, Rule, RuleParams, State
from tracker.policy._types import Context, Observation, Verdict, fmt
from tracker.policy.rules._window import warm_up_over


class DegenerateParams(RuleParams):
    """Stop when the last ``window`` finite values take at most ``max_distinct`` distinct values and the
    run is either *collapsed* or *stuck*.

    A model that predicts a constant (a collapsed classifier, a run stuck at initialisation) scores exactly
    the same accuracy, or one of a few class shares, at every evaluation. On a coarse metric (accuracy on a
    small validation set, in steps of 1/n) a learning run repeats values too, so few distinct values alone
    prove nothing. Both verdicts are therefore relative to the run's own range, never to the metric's units:

    - *collapsed*: the window's best value lies in the worse ``collapse_fraction`` of the range the run has
      covered (best minus worst so far), and below the best by more than twice the window's own spread:
      the run had learned, and has fallen back (to chance, typically).
    - *stuck*: the run's whole range is no wider than the window's own spread, and its best is older than
      the window: it has never moved beyond the values it repeats. A run that has not started learning
      looks exactly like that, so it is judged only past ``stuck_progress`` of its planned length (with
      no plan and ``stuck_progress`` above 0, after ``2 * window`` evaluations).

    A plateau at a level the run climbed to (the window holds the run's best, well above where it started)
    is neither: that is for ``outlook``, ``forecast`` or ``patience`` to judge.

    Nothing is judged before the warm-up is over: the learning rate (``lr_key``) has started to fall, the
    step is at least ``warmup``, and past ``min_progress`` of the planned length; many runs sit at chance
    until their learning rate has warmed up.
    """

    rule: Literal["degenerate"] = "degenerate"
    window: int = Field(default=6, ge=3, le=100)
    max_distinct: int = Field(default=3, ge=1, le=100)
    warmup: int = Field(default=0, ge=0, le=MAX_STEP, description="steps below this are not judged")
    min_progress: float = Field(default=0.0, ge=0.0, le=1.0)
    stuck_progress: float = Field(
        default=0.0, ge=0.0, le=1.0, description="share of the plan a run that never moved must reach"
    )
    collapse_fraction: float = Field(default=0.5, gt=0.0, le=1.0)
    lr_key: str | None = Field(default=None, min_length=1)


class Degenerate(Rule[DegenerateParams]):
    """NaN/inf are left to ``non_finite`` and not counted. Silent after it stops."""

    name = "degenerate"

    def required_keys(self) -> tuple[str, ...]:
        return (self.params.lr_key,) if self.params.lr_key else ()

    def initial_state(self) -> State:
        return {
            "ys": [],
            "best_seen": 0,
            "worst": None,
            "seen": 0,
        }

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        p = self.params
        if not math.isfinite(obs.value):
            return state, None
        state, warm = warm_up_over(
            state, obs, ctx, lr_key=p.lr_key, warmup=p.warmup, min_progress=p.min_progress
        )
        best, best_step = ctx.best.value, ctx.best.step
        worst = state.get("worst")
        if worst is None or (obs.value < worst if self.mode == "max" else obs.value > worst):
            worst = obs.value
        seen = state.get("seen", 0) + 1
        if ctx.best.improved:
            state["best_seen"] = seen
        # In place: evaluate handed us our own copy.
        state["worst"], state["seen"] = worst, seen
        ys = state["ys"]
        ys.append(obs.value)
        if len(ys) > p.window:
            del ys[: len(ys) - p.window]
        if not warm or len(ys) < p.window or len(set(ys)) > p.max_distinct:
            return state, None
        assert best is not None  # this value is finite, so it set or kept a finite best
        kind = self._kind(ys, best, worst, obs, ctx, seen, seen - state.get("best_seen", 0))
        if kind is None:
            return state, None
        distinct = sorted(set(ys))
        shown = ", ".join(fmt(v) for v in distinct)
        why = (
            f"well below its best {fmt(best)} (step {best_step}): the model has collapsed"
            if kind == "collapsed"
            else "and it has never moved beyond them: the model is not learning"
        )
        verdict = self.stop(
            obs,
            reason=(
                f"{self.monitor} has taken only {len(distinct)} distinct value(s) ({shown}) over its last "
                f"{p.window} evaluations, {why} (e.g. a constant prediction)"
            ),
            evidence={
                "kind": kind,
                "values": list(ys),
                "distinct": distinct,
                "window": p.window,
                "max_distinct": p.max_distinct,
                "best": best,
                "worst": worst,
                "collapse_fraction": p.collapse_fraction,
                "stuck_progress": p.stuck_progress,
                "planned_steps": ctx.planned_steps,
            },
            best_step=best_step,
            best_value=best,
        )
        return state, verdict

    def _kind(
        self,
        ys: list[float],
        best: float,
        worst: float,
        obs: Observation,
        ctx: Context,
        seen: int,
        since_best: int,
    ) -> str | None:
        """``collapsed``, ``stuck`` or None (a plateau the run climbed to, a run still setting new bests,
        or too early to tell)."""
        p = self.params
        covered = abs(best - worst)
        spread = max(ys) - min(ys)
        top = max(ys) if self.mode == "max" else min(ys)
        if covered > spread:
            # Fallen well below the best, by more than twice the window's own spread: on a coarse metric a
            # dip of a step or two is noise, not a collapse.
            below_best = abs(best - top)
            collapsed = below_best >= p.collapse_fraction * covered and below_best > 2 * spread
            return "collapsed" if collapsed else None
        if since_best < p.window:  # a new best inside the window: still moving, however coarsely
            return None
        if p.stuck_progress == 0.0:
            return "stuck"
        if ctx.planned_steps is None:
            return "stuck" if seen >= 2 * p.window else None
        return "stuck" if obs.step >= p.stuck_progress * ctx.planned_steps else None
