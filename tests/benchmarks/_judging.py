"""The measures a default policy is judged by, per source: margin over the patience-k frontier, regret over
the source's spread of scores, share of the hindsight room, and the comparison with patience-10.

Regret is never pooled across sources: each measure is read on one source, and only the per-source figures
are summarised (a mean of margins, a median of shares, counts of sources).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from plateau_tracker.server.policy import Mode, PolicySpec
from plateau_tracker.server.replay._curves import Curve
from plateau_tracker.server.replay._simulate import RunResult, best_index, replay_curve
from tests.benchmarks._frontier import Point, hindsight_bound, outcome, patience_frontier, saved_at

Comparison = Literal["dominates", "dominated", "trades", "same"]


@dataclass(frozen=True)
class Judgement:
    """One policy on one source."""

    point: Point
    margin: float  # compute saved beyond the patience-k frontier at the policy's own mean regret
    spread: float  # the source's spread of scores: max minus min of each run's best-checkpoint score
    room: float  # the most any rule in hindsight could lie above the frontier at the policy's own regret
    patience10: Point
    stops: dict[str, int]

    @property
    def regret_share(self) -> float:
        """Mean regret as a share of the source's spread of scores (0 where every run scores alike)."""
        return max(self.point.regret, 0.0) / self.spread if self.spread > 0 else 0.0

    @property
    def room_share(self) -> float:
        """The margin as a share of the room at the policy's own regret (1 where there is no room)."""
        return self.margin / self.room if self.room > 1e-9 else 1.0

    @property
    def against_patience10(self) -> Comparison:
        """More saved at no more regret (``dominates``), the reverse (``dominated``), or a trade. Regrets
        below 0 count as 0, as on the frontier."""
        mine, theirs = self.point, self.patience10
        r_mine, r_theirs = max(mine.regret, 0.0), max(theirs.regret, 0.0)
        if math.isclose(mine.saved, theirs.saved, abs_tol=1e-12) and math.isclose(
            r_mine, r_theirs, abs_tol=1e-12
        ):
            return "same"
        if mine.saved >= theirs.saved and r_mine <= r_theirs:
            return "dominates"
        if mine.saved <= theirs.saved and r_mine >= r_theirs:
            return "dominated"
        return "trades"

    def as_json(self) -> dict[str, Any]:
        return {
            "saved": self.point.saved,
            "regret": self.point.regret,
            "margin": self.margin,
            "regret_share": self.regret_share,
            "room": self.room,
            "room_share": self.room_share,
            "patience10": vars(self.patience10),
            "against_patience10": self.against_patience10,
            "stops": self.stops,
        }


def score_spread(curves: Sequence[Curve], mode: Mode) -> float:
    """Max minus min, over the runs, of the score of each run's best checkpoint over its whole length."""
    finals = [c.score[best_index(c.watch, len(c.watch) - 1, mode)] for c in curves]
    finals = [f for f in finals if math.isfinite(f)]
    return max(finals) - min(finals) if finals else 0.0


class SourceFrame:
    """What every policy on a source is measured against, computed once: the frontier and its room."""

    def __init__(self, curves: Sequence[Curve], mode: Mode) -> None:
        self.curves, self.mode = list(curves), mode
        self.frontier = patience_frontier(self.curves, mode)
        self.spread = score_spread(self.curves, mode)
        self._bound = hindsight_bound(self.curves, mode)

    def room_at(self, regret: float) -> float:
        """How far above the frontier any rule can lie at mean ``regret``, every score known in hindsight."""
        return self._bound(regret) - saved_at(list(self.frontier.values()), regret)

    def judge(self, rules: list[dict[str, Any]], monitor: str = "val") -> tuple[Judgement, list[RunResult]]:
        policy = PolicySpec.model_validate({"monitor": monitor, "mode": self.mode, "rules": rules})
        results = [replay_curve(policy, c) for c in self.curves]
        stops: dict[str, int] = {}
        for r in results:
            stops[r.stopped_by or "-"] = stops.get(r.stopped_by or "-", 0) + 1
        point = outcome(self.curves, [r.stop_index for r in results], self.mode)
        frontier = list(self.frontier.values())
        judgement = Judgement(
            point=point,
            margin=point.saved - saved_at(frontier, point.regret),
            spread=self.spread,
            room=self.room_at(point.regret),
            patience10=self.frontier[10],
            stops=stops,
        )
        return judgement, results
