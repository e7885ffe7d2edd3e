"""``patience``: stop after ``patience`` consecutive evaluations without improvement."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from plateau_tracker.server.policy._base import MAX_STEP, ImprovementParams, Rule, State
from plateau_tracker.server.policy._improvement import ImprovementTest, needed
from plateau_tracker.server.policy._types import BestSoFar, Context, Observation, Verdict, fmt


class PatienceParams(ImprovementParams):
    """Parameters of ``patience``.

    ``min_delta`` is absolute, or relative to ``|best|`` when ``relative`` is true. ``warmup``: points at
    steps below it are stored but not judged. ``ties``: whether a value exactly at the improvement
    threshold counts as an improvement (``"improve"``) or not (``"wait"``, as in Lightning and Keras).
    """

    rule: Literal["patience"] = "patience"
    patience: int = Field(
        default=5, ge=1, le=MAX_STEP, description="evaluations without improvement before stopping"
    )


class Patience(Rule[PatienceParams]):
    """Stop when the monitored metric has not improved for ``patience`` evaluations.

    A value improves if it beats the best by more than ``min_delta`` (strictly; with ``ties="improve"`` by
    at least it). The best starts empty, so the first judged value is a new best. With ``min_delta=0`` and
    ``ties="improve"`` the rule stops at step n+k exactly when M(n) > max(M(n+1..n+k)) first holds (mode
    max), with ``best_step = n``.

    NaN and +-inf never improve: they count as evaluations without improvement (``non_finite`` stops on them
    when it is in the policy). Steps below ``warmup`` are skipped. After it stops, the rule stays silent.
    """

    name = "patience"

    def improvement_test(self) -> ImprovementTest:
        return self.params.improvement_test(self.mode)

    def initial_state(self) -> State:
        return {"wait": 0}

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        p = self.params
        if obs.step < p.warmup:
            return state, None
        if ctx.best.improved:
            state["wait"] = 0
            return state, None
        wait = state["wait"] = state["wait"] + 1
        if wait < p.patience:
            return state, None
        return state, self._stop_verdict(wait, ctx.best, obs)

    def _stop_verdict(self, wait: int, seen: BestSoFar, obs: Observation) -> Verdict:
        p = self.params
        best, best_step = seen.value, seen.step
        delta = ""
        if p.min_delta:
            delta = f" by more than {p.min_delta:g}{' x |best|' if p.relative else ''}"
        if best is None:
            reason = f"{self.monitor} has had no finite value for {wait} evaluations (patience {p.patience})"
        else:
            reason = (
                f"{self.monitor} has not improved on {fmt(best)} (step {best_step}){delta} "
                f"for {wait} evaluations (patience {p.patience})"
            )
        threshold = (
            None if best is None else needed(best, mode=self.mode, min_delta=p.min_delta, relative=p.relative)
        )
        return self.stop(
            obs,
            reason=reason,
            evidence={
                "monitor": self.monitor,
                "mode": self.mode,
                "value": obs.value,
                "best": best,
                "best_step": best_step,
                "wait": wait,
                "patience": p.patience,
                "min_delta": p.min_delta,
                "relative": p.relative,
                "ties": p.ties,
                "threshold": threshold,
            },
            best_step=best_step,
            best_value=best,
        )
