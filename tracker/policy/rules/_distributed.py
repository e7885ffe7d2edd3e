"""Distributed-health rules: ``straggler`` and ``staleness``. They raise alerts; they never stop a run."""

from __future__ import annotations

import math
from typing import Any, Literal, TypeVar

from pydantic import Field

from plateau_tracker.server.policy._base import MAX_RATIO, MAX_STEP, Rule, RuleParams, State
from plateau_tracker.server.policy._types import Context, Observation, Verdict


class PerRankParams(RuleParams):
    """What every distributed-health rule takes: the key it watches (on every rank), how many reports in a
    row flag or clear a rank, and the start-up steps it ignores."""

    key: str = Field(min_length=1)
    reports: int = Field(default=3, ge=1, le=MAX_STEP)
    warmup: int = Field(
        default=0, ge=0, le=MAX_STEP, description="steps below this are not judged (start-up)"
    )


class StragglerParams(PerRankParams):
    """A rank whose relative performance (min over ranks of compute time / its compute time, the SDK's
    ``dist/rel_perf``) stays below ``bound`` for ``reports`` consecutive reports is a straggler."""

    rule: Literal["straggler"] = "straggler"
    key: str = Field(default="dist/rel_perf", min_length=1)
    bound: float = Field(default=0.75, gt=0.0, lt=1.0)


def _flag(state: State, obs: Observation, *, bad: bool, reports: int) -> tuple[State, bool]:
    """Hysteresis per rank: flagged after ``reports`` bad reports in a row, cleared only after ``reports``
    good ones in a row, so a noisy report neither raises nor clears an alert. Returns (state, newly)."""
    rank = str(obs.rank)
    runs, flagged = state["runs"], state["flagged"]  # in place: the engine handed us our own copy
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
    return state, newly


HP = TypeVar("HP", bound=PerRankParams)


class _PerRankAlert(Rule[HP]):
    """A per-rank alert with hysteresis (see :func:`_flag`): subclasses say what a bad report is and how
    to say so. NaN reports and steps below ``warmup`` are skipped."""

    per_rank = True
    stops = False

    def watch_key(self) -> str:
        return self.params.key

    def initial_state(self) -> State:
        return {"runs": {}, "flagged": []}

    def bad(self, value: float) -> bool:
        raise NotImplementedError

    def reason(self, obs: Observation) -> str:
        raise NotImplementedError

    def evidence(self, obs: Observation) -> dict[str, Any]:
        raise NotImplementedError

    def alert(self, obs: Observation) -> Verdict:
        """The alert for ``obs``, a report that flagged its rank."""
        reason, evidence = self.reason(obs), self.evidence(obs)
        return Verdict(action="alert", rule=self.name, step=obs.step, reason=reason, evidence=evidence)

    def observe(self, state: State, obs: Observation, ctx: Context) -> tuple[State, Verdict | None]:
        p = self.params
        if not math.isfinite(obs.value) or obs.step < p.warmup:
            return state, None
        state, newly = _flag(state, obs, bad=self.bad(obs.value), reports=p.reports)
        return state, self.alert(obs) if newly else None


class Straggler(_PerRankAlert[StragglerParams]):
    """Alerts when a rank becomes a straggler."""

    name = "straggler"

    def bad(self, value: float) -> bool:
        return value < self.params.bound

    def reason(self, obs: Observation) -> str:
        return (
            f"rank {obs.rank} is a straggler: relative performance {obs.value:.2f} < {self.params.bound:g} "
            f"for {self.params.reports} reports in a row (the others wait for it at every collective)"
        )

    def evidence(self, obs: Observation) -> dict[str, Any]:
        p = self.params
        return {"rank": obs.rank, "relative_performance": obs.value, "bound": p.bound, "reports": p.reports}


class StalenessParams(PerRankParams):
    """A worker whose reported staleness p95 (``dist/staleness_p95``, in parameter versions) is above
    ``bound`` for ``reports`` consecutive reports is applying gradients from a model too far behind."""

    rule: Literal["staleness"] = "staleness"
    key: str = Field(default="dist/staleness_p95", min_length=1)
    bound: float = Field(default=8.0, gt=0.0, le=MAX_RATIO)
    reports: int = Field(default=1, ge=1, le=MAX_STEP)


class Staleness(_PerRankAlert[StalenessParams]):
    """Alerts when a worker becomes stale."""

    name = "staleness"

    def bad(self, value: float) -> bool:
        return value > self.params.bound

    def reason(self, obs: Observation) -> str:
        return (
            f"worker {obs.rank} applies stale gradients: staleness p95 {obs.value:g} > "
            f"{self.params.bound:g} versions"
        )

    def evidence(self, obs: Observation) -> dict[str, Any]:
        return {"rank": obs.rank, "staleness_p95": obs.value, "bound": self.params.bound}
