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


class Straggler(Rule[StragglerParams]):
    """Alerts once per straggling rank (again only after it has recovered). NaN reports are skipped."""

    name = "straggler"
    health = True
    stops = False

    def watch_key(self) -> str:
        return self.params.key

    def initial_state(self) -> State:
        return {"below": {}, "flagged": []}

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        p = self.params
        if not math.isfinite(obs.value):
            return state, None
        rank = str(obs.rank)
        below = dict(state["below"])
        flagged = list(state["flagged"])
        if obs.value >= p.bound:
            below.pop(rank, None)
            if rank in flagged:
                flagged.remove(rank)
            return {"below": below, "flagged": flagged}, None
        below[rank] = below.get(rank, 0) + 1
        state = {"below": below, "flagged": flagged}
        if below[rank] < p.reports or rank in flagged:
            return state, None
        verdict = Verdict(
            action="alert",
            rule=self.name,
            step=obs.step,
            reason=(
                f"rank {obs.rank} is a straggler: relative performance {obs.value:.2f} < {p.bound:g} for "
                f"{below[rank]} reports in a row (the others wait for it at every collective)"
            ),
            evidence={
                "rank": obs.rank,
                "relative_performance": obs.value,
                "bound": p.bound,
                "reports": below[rank],
            },
        )
        return {"below": below, "flagged": [*flagged, rank]}, verdict


class StalenessParams(RuleParams):
    """A worker whose reported staleness p95 (``dist/staleness_p95``, in parameter versions) is above
    ``bound`` for ``reports`` consecutive reports is applying gradients from a model too far behind."""

    rule: Literal["staleness"] = "staleness"
    key: str = Field(default="dist/staleness_p95", min_length=1)
    bound: float = Field(default=8.0, gt=0.0)
    reports: int = Field(default=1, ge=1)


class Staleness(Rule[StalenessParams]):
    """Alerts once per stale worker (again only after it has recovered). NaN reports are skipped."""

    name = "staleness"
    health = True
    stops = False

    def watch_key(self) -> str:
        return self.params.key

    def initial_state(self) -> State:
        return {"above": {}, "flagged": []}

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        p = self.params
        if not math.isfinite(obs.value):
            return state, None
        rank = str(obs.rank)
        above = dict(state["above"])
        flagged = list(state["flagged"])
        if obs.value <= p.bound:
            above.pop(rank, None)
            if rank in flagged:
                flagged.remove(rank)
            return {"above": above, "flagged": flagged}, None
        above[rank] = above.get(rank, 0) + 1
        state = {"above": above, "flagged": flagged}
        if above[rank] < p.reports or rank in flagged:
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
        return {"above": above, "flagged": [*flagged, rank]}, verdict
