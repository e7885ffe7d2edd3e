"""``prechelt``: Prechelt's (1998) stopping criteria GL, PQ and UP on validation and training losses."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from plateau_tracker.server.policy._base import MAX_RATIO, MAX_STEP, Rule, RuleParams, State
from plateau_tracker.server.policy._improvement import ImprovementTest
from plateau_tracker.server.policy._keys import MetricNames, Names
from plateau_tracker.server.policy._types import Context, Observation, Verdict, fmt


class PrecheltParams(RuleParams):
    """``criterion``: ``GL`` (generalization loss GL(t) = 100 (E_va(t)/E_opt(t) - 1) > alpha), ``PQ``
    (GL(t) / P_k(t) > alpha at the end of each strip of ``strip`` evaluations, with training progress
    P_k(t) = 1000 (sum of the strip's training losses / (k * their minimum) - 1)), or ``UP`` (validation
    loss higher at the end of ``successive`` consecutive strips). The monitored metric is the validation
    loss (mode min, positive); ``train_key`` names the training loss (needed by PQ)."""

    rule: Literal["prechelt"] = "prechelt"
    criterion: Literal["GL", "PQ", "UP"] = "GL"
    alpha: float = Field(default=5.0, gt=0.0, le=MAX_RATIO, allow_inf_nan=False)
    strip: int = Field(default=5, ge=1, le=1000)
    successive: int = Field(default=3, ge=1, le=1000)
    train_key: MetricNames | None = None
    warmup: int = Field(default=0, ge=0, le=MAX_STEP)


class Prechelt(Rule[PrecheltParams]):
    """Needs a positive validation loss in mode min (the policy refuses mode max). NaN/inf are skipped;
    a strip whose training loss is missing is not judged by PQ. Silent after it stops."""

    name = "prechelt"

    def required_keys(self) -> tuple[str, ...]:
        return Names.of(self.params.train_key).order

    def improvement_test(self) -> ImprovementTest:
        # Steps below the warm-up are not judged, and do not set the best either.
        return ImprovementTest(self.mode, from_step=self.params.warmup)

    def initial_state(self) -> State:
        return {
            "strip": [],
            "count": 0,
            "last_strip_end": None,
            "ups": 0,
        }

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        p = self.params
        if obs.step < p.warmup or not math.isfinite(obs.value):
            return state, None
        best, best_step = ctx.best.value, ctx.best.step  # mode min: the policy's mode, checked
        train = Names.of(p.train_key).read(obs.extras)
        strip = state["strip"]
        strip.append(train)
        del strip[: -p.strip]
        count = state["count"] = state["count"] + 1
        if best is None or best <= 0:
            return state, None
        gl = 100.0 * (obs.value / best - 1.0)
        strip_end = count % p.strip == 0
        evidence: dict[str, float | int | str | None] = {"criterion": p.criterion, "GL": gl, "alpha": p.alpha}
        fired = False
        if p.criterion == "GL":
            fired = gl > p.alpha
            detail = f"generalization loss GL = {gl:.3g} > {p.alpha:g}"
        elif p.criterion == "PQ":
            if not strip_end or any(v is None or not math.isfinite(v) for v in strip) or min(strip) <= 0:
                return state, None
            progress = 1000.0 * (sum(strip) / (len(strip) * min(strip)) - 1.0)
            quotient = math.inf if progress == 0 else gl / progress
            evidence.update({"P_k": progress, "PQ": quotient})
            fired = quotient > p.alpha
            detail = f"GL / P_{p.strip} = {gl:.3g} / {progress:.3g} = {quotient:.3g} > {p.alpha:g}"
        else:
            if not strip_end:
                return state, None
            previous = state["last_strip_end"]
            ups = state["ups"] + 1 if previous is not None and obs.value > previous else 0
            state["last_strip_end"], state["ups"] = obs.value, ups
            evidence["ups"] = ups
            fired = ups >= p.successive
            detail = f"validation loss rose at the end of {ups} successive strips of {p.strip}"
        if not fired:
            return state, None
        verdict = self.stop(
            obs,
            reason=f"{self.monitor}: {detail} (Prechelt {p.criterion}); best {fmt(best)} at step {best_step}",
            evidence=evidence,
            best_step=best_step,
            best_value=best,
        )
        return state, verdict
