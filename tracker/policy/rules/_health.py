"""Distributed-health rules: ``straggler`` and ``staleness``. They raise alerts; they never stop a run."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from tracker.policy._base import Rule, RuleParams, State
from tracker.policy._types import Context, Observation, Verdict


class StragglerParams(RuleParams):
    """A rank whose relative performance (min over ranks of compute time / its compute time, the SDK's
    ``dist/rel_perf``) stays below ``bound`` for ``reports`` consecutive reports is a straggler."""

    rule: Literal["straggler"] = "straggler"
    key: str = Field(default="dist/rel_perf", min_length=1)
    bound: float = Field(default=0.75, gt=0.0, lt=1.0)
    reports: int = Field(default=3, ge=1)
    warmup: int = Field(default=0, ge=0, description="steps below this are not judged (start-up)")


def _flag(state: State, obs: Observation, *, bad: bool, reports: int) -> tuple[State, bool]:
    """Hysteresis per rank: flagged after ``reports`` bad reports in a row, cleared only after ``reports``
    good ones in a row, so a noisy report neither raises nor clears an alert. Returns (state, newly)."""
    rank = str(obs.rank)
    runs = dict(state["runs"])
    flagged = list(state["flagged"])
    count = runs.get(rank, 0)
    # Positive counts bad reports in a row, negative counts good ones.
    count = (count + 1 if count > 0 else 1) if bad else (count - 1 if count < 0 else -1)
    runs[rank] = count
    newly = False
    if count >= reports and rank not in flagged:
        flagged.append(rank)
        newly = True
    elif -count >= reports and rank in flagged:
        flagged.remove(rank)
    return {"runs": runs, "flagged": flagged}, newly


class Straggler(Rule[StragglerParams]):
    """Alerts when a rank becomes a straggler (see :func:`_flag` for the hysteresis). NaN is skipped."""

    name = "straggler"
    health = True
    stops = False

    def watch_key(self) -> str:
        return self.params.key

    def initial_state(self) -> State:
        return {"runs": {}, "flagged": []}

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        p = self.params
        if not math.isfinite(obs.value) or obs.step < p.warmup:
            return state, None
        state, newly = _flag(state, obs, bad=obs.value < p.bound, reports=p.reports)
        if not newly:
            return state, None
        verdict = Verdict(
            action="alert",
            rule=self.name,
            step=obs.step,
            reason=(
                f"rank {obs.rank} is a straggler: relative performance {obs.value:.2f} < {p.bound:g} for "
                f"{p.reports} reports in a row (the others wait for it at every collective)"
            ),
            evidence={
                "rank": obs.rank,
                "relative_performance": obs.value,
                "bound": p.bound,
                "reports": p.reports,
            },
        )
        return state, verdict


class StalenessParams(RuleParams):
    """A worker whose reported staleness p95 (``dist/staleness_p95``, in parameter versions) is above
    ``bound`` for ``reports`` consecutive reports is applying gradients from a model too far behind."""

    rule: Literal["staleness"] = "staleness"
    key: str = Field(default="dist/staleness_p95", min_length=1)
    bound: float = Field(default=8.0, gt=0.0)
    reports: int = Field(default=1, ge=1)
    warmup: int = Field(default=0, ge=0, description="steps below this are not judged (start-up)")


class Staleness(Rule[StalenessParams]):
    """Alerts when a worker becomes stale (the same hysteresis as ``straggler``). NaN is skipped."""

    name = "staleness"
    health = True
    stops = False

    def watch_key(self) -> str:
        return self.params.key

    def initial_state(self) -> State:
        return {"runs": {}, "flagged": []}

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        p = self.params
        if not math.isfinite(obs.value) or obs.step < p.warmup:
            return state, None
        state, newly = _flag(state, obs, bad=obs.value > p.bound, reports=p.reports)
        if not newly:
            return state, None
        verdict = Verdict(
            action="alert",
            rule=self.name,
            step=obs.step,
            reason=(
                f"worker {obs.rank} applies stale gradients: staleness p95 {obs.value:g} versions > "
                f"{p.bound:g}"
            ),
            evidence={"rank": obs.rank, "staleness_p95": obs.value, "bound": p.bound},
        )
        return state, verdict
