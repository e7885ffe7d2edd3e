"""The patience-k frontier, computed for every k in one pass per curve, and margins over it.

``patience-K`` (the preset: ``patience`` with ``ties: "wait"`` and no margin, ``checkpoint``,
``non_finite``) stops at the first evaluation whose count of evaluations without a strict improvement
reaches K, or at the first NaN/inf. One pass over a curve gives that count at every evaluation, hence the
stop for every K at once (``tests/test_replay.py`` checks it against the engine's replay).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from tracker.policy import Mode
from tracker.replay._curves import Curve
from tracker.replay._report import summarise
from tracker.replay._simulate import RunResult, best_index

FRONTIER_K = tuple(range(1, 41))


def patience_stops(values: Sequence[float], ks: Sequence[int], mode: Mode) -> dict[int, int]:
    """The stop index of patience-k (with non_finite) on ``values``, for each k in ``ks``."""
    last = len(values) - 1
    stops = dict.fromkeys(ks, last)
    pending = sorted(ks)
    best: float | None = None
    wait = 0
    for i, v in enumerate(values):
        if not math.isfinite(v):
            for k in pending:
                stops[k] = i
            return stops
        if best is None or (v > best if mode == "max" else v < best):
            best, wait = v, 0
        else:
            wait += 1
            while pending and pending[0] <= wait:
                stops[pending.pop(0)] = i
        if not pending:
            break
    return stops


@dataclass(frozen=True)
class Point:
    """A policy's outcome on one source: compute saved (cost-weighted) and mean regret."""

    saved: float
    regret: float


def results_at(
    curves: Sequence[Curve], stops: Sequence[int], mode: Mode, by: Sequence[str | None] | None = None
) -> list[RunResult]:
    """Each curve stopped at its index in ``stops`` (by the rule in ``by``), keeping its best checkpoint up
    to there, as the engine's replay reports it."""
    return [
        RunResult(
            curve=c,
            stop_index=s,
            kept_index=best_index(c.watch, s, mode),
            full_best_index=best_index(c.watch, len(c.watch) - 1, mode),
            stopped_by=b,
            mode=mode,
        )
        for c, s, b in zip(curves, stops, by or [None] * len(stops), strict=True)
    ]


def outcome(curves: Sequence[Curve], stops: Sequence[int], mode: Mode) -> Point:
    """Compute saved and mean regret when each curve stops at its index in ``stops``."""
    report = summarise("", results_at(curves, stops, mode), sweep=False)
    return Point(report.compute_saved, report.mean_regret)


def patience_frontier(
    curves: Sequence[Curve], mode: Mode, ks: Sequence[int] = FRONTIER_K
) -> dict[int, Point]:
    per_curve = [patience_stops(c.watch, ks, mode) for c in curves]
    return {k: outcome(curves, [s[k] for s in per_curve], mode) for k in ks}


def saved_at(frontier: Sequence[Point], regret: float) -> float:
    """What the frontier saves at ``regret``: linear between its Pareto points (and the origin, k = inf),
    flat past the last one."""
    points = sorted([Point(0.0, 0.0), *frontier], key=lambda p: (p.regret, -p.saved))
    pareto: list[Point] = []
    for p in points:
        if not pareto or p.saved > pareto[-1].saved:
            pareto.append(p)
    for a, b in itertools.pairwise(pareto):
        if a.regret <= regret <= b.regret:
            return (
                a.saved
                if b.regret == a.regret
                else a.saved + (b.saved - a.saved) * (regret - a.regret) / (b.regret - a.regret)
            )
    return pareto[-1].saved if regret >= pareto[-1].regret else 0.0


def margin(point: Point, frontier: Sequence[Point]) -> float:
    """Compute saved beyond the patience-k frontier at the point's own mean regret."""
    return point.saved - saved_at(frontier, point.regret)
