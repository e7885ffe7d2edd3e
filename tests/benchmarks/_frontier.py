"""The patience-k frontier, computed for every k in one pass per curve, and margins over it.

``patience-K`` (the preset: ``patience`` with ``ties: "wait"`` and no margin, ``checkpoint``,
``non_finite``) stops at the first evaluation whose count of evaluations without a strict improvement
reaches K, or at the first NaN/inf. One pass over a curve gives that count at every evaluation, hence the
stop for every K at once (``tests/test_replay.py`` checks it against the engine's replay).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from plateau_tracker.server.policy import Mode
from plateau_tracker.server.replay._curves import Curve
from plateau_tracker.server.replay._report import summarise
from plateau_tracker.server.replay._simulate import RunResult, best_index

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


def run_regret(result: RunResult) -> float:
    """A run's regret as the benchmarks count it: below 0 it counts as 0. A kept checkpoint that scores
    better on the held-out split than the full run's best is luck of that split, not a saving, and it must
    not offset another run's loss: counted as it fell, one lucky run in a source (a diverged run scoring
    0.52 better at its first checkpoint than at its watched best) made the mean regret of patience-1 read 0
    and put the frontier at no regret at patience-1's saving."""
    return max(result.regret, 0.0)


def outcome(curves: Sequence[Curve], stops: Sequence[int], mode: Mode) -> Point:
    """Compute saved and mean regret (each run's counted by :func:`run_regret`) when each curve stops at
    its index in ``stops``."""
    results = results_at(curves, stops, mode)
    report = summarise("", results, sweep=False)
    return Point(report.compute_saved, sum(map(run_regret, results)) / len(results))


def patience_frontier(
    curves: Sequence[Curve], mode: Mode, ks: Sequence[int] = FRONTIER_K
) -> dict[int, Point]:
    per_curve = [patience_stops(c.watch, ks, mode) for c in curves]
    return {k: outcome(curves, [s[k] for s in per_curve], mode) for k in ks}


def saved_at(frontier: Sequence[Point], regret: float) -> float:
    """What the frontier saves at ``regret``: linear between its Pareto points (and the origin, k = inf),
    flat past the last one. Regrets below 0 count as 0, the frontier's and the one asked about alike: a
    kept checkpoint that scores better on the held-out split than the full run's best did is luck of that
    split, not a saving (without this, a policy whose mean regret fell below every patience-k point's was
    credited its whole saving, as nothing on the frontier reached its regret)."""
    regret = max(regret, 0.0)
    points = sorted(
        [Point(0.0, 0.0), *(Point(p.saved, max(p.regret, 0.0)) for p in frontier)],
        key=lambda p: (p.regret, -p.saved),
    )
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


@dataclass(frozen=True)
class RunCosts:
    """Per run, under one policy: compute of the full run, compute used up to its stop, and its regret.
    Kept apart from :class:`Point` so a resample of the runs is a sum over indices, not a new replay."""

    full: list[float]
    used: list[float]
    regret: list[float]

    def point(self, sample: Sequence[int]) -> Point:
        full = sum(self.full[i] for i in sample)
        used = sum(self.used[i] for i in sample)
        regret = sum(self.regret[i] for i in sample) / len(sample)
        return Point((full - used) / full if full > 0 else 0.0, regret)


def run_costs(curves: Sequence[Curve], stops: Sequence[int], mode: Mode) -> RunCosts:
    results = results_at(curves, stops, mode)
    return RunCosts(
        full=[r.cost_full for r in results],
        used=[r.cost_used for r in results],
        regret=[run_regret(r) for r in results],
    )


def clairvoyant_stops(curves: Sequence[Curve], mode: Mode) -> list[int]:
    """Each run stopped at the best value of its watched metric over the whole run: what a rule that knew
    the future would do. Its margin is the ceiling of what any stopping rule can show on a source (a rule
    can only do better by stopping before the watched best where the score happens to disagree with the
    watched metric, which it cannot see)."""
    return [best_index(c.watch, len(c.watch) - 1, mode) for c in curves]


def stop_choices(curve: Curve, mode: Mode) -> list[tuple[float, float]]:
    """(compute saved, regret) of each stop worth making on a run in hindsight: at every evaluation that sets
    a new best of the watched metric (a later stop keeps the same checkpoint at more compute) and at its
    end. A stop whose kept checkpoint has no score (an infinite regret) is left out: no rule within a finite
    mean regret makes it."""
    last = len(curve.watch) - 1
    full = best_index(curve.watch, last, mode)
    choices: list[tuple[float, float]] = []
    kept, best = 0, None  # with no finite value yet, the first checkpoint is the one kept
    for i, v in enumerate(curve.watch):
        if math.isfinite(v) and (best is None or (v > best if mode == "max" else v < best)):
            kept, best = i, v
        elif i != last:
            continue
        result = RunResult(
            curve=curve, stop_index=i, kept_index=kept, full_best_index=full, stopped_by=None, mode=mode
        )
        if math.isfinite(result.regret):
            choices.append((result.cost_full - result.cost_used, run_regret(result)))
    return choices


def hindsight_bound(curves: Sequence[Curve], mode: Mode) -> Callable[[float], float]:
    """An upper bound on the compute any stopping rule saves at mean regret ``r``, every score known in
    hindsight: the rule picks each run's stop among :func:`stop_choices`.

    It is bounded by Lagrangian duality: for any ``lam >= 0`` the saving is at most ``max over stops (saved -
    lam x regret) + lam x r``, the inner maximum taken run by run; the smallest of these over a logarithmic
    grid of ``lam`` is an upper bound whatever the grid (a finer grid only tightens it)."""
    import numpy as np  # a server dependency; only this bound needs it

    total = sum(c.cost[-1] for c in curves)
    n = len(curves)
    lams = np.concatenate(([0.0], np.logspace(-3, 8, 1200)))
    best_trade = np.zeros_like(lams)  # sum over runs of max over stops of (saved - lam x regret)
    for curve in curves:
        saved, regret = np.array(stop_choices(curve, mode)).T
        best_trade += (saved[:, None] / total - lams[None, :] * regret[:, None] / n).max(axis=0)

    def bound(r: float) -> float:
        return float(np.min(best_trade + lams * max(r, 0.0)))

    return bound


def hindsight_room(
    curves: Sequence[Curve], mode: Mode, frontier: Sequence[Point], bound: float, grid: int = 1001
) -> tuple[float, float]:
    """At most how far any stopping rule can lie above the patience-k frontier (compute saved, at its own
    mean regret, as :func:`margin` measures it) with a mean regret within ``bound``, and the regret where
    that room is widest (:func:`hindsight_bound`), so a margin target larger than this room is out of reach
    on these runs. Regrets are read on ``grid`` points of ``[0, bound]`` and at the frontier's own points
    there."""
    import numpy as np

    most = hindsight_bound(curves, mode)
    regrets = sorted(
        {*np.linspace(0.0, bound, grid).tolist(), *(p.regret for p in frontier if 0.0 <= p.regret <= bound)}
    )
    room = [(most(r) - saved_at(frontier, r), r) for r in regrets]
    return max(room)


def margin_interval(
    curves: Sequence[Curve],
    stops: Sequence[int],
    mode: Mode,
    *,
    resamples: int = 1000,
    level: float = 0.9,
    seed: int = 0,
) -> tuple[float, float]:
    """A bootstrap interval of the margin of the policy that stopped each curve at ``stops``: the runs are
    resampled with replacement and the patience-k frontier is recomputed on every resample, so the interval
    says how much of a margin is the draw of runs (a source of 40 runs moves a margin by several points)."""
    margins = resampled_margins(curves, stops, mode, resamples=resamples, seed=seed)
    tail = (1.0 - level) / 2
    return margins[int(tail * (resamples - 1))], margins[int((1.0 - tail) * (resamples - 1))]


def resampled_margins(
    curves: Sequence[Curve], stops: Sequence[int], mode: Mode, *, resamples: int, seed: int = 0
) -> list[float]:
    """The margin on each of ``resamples`` resamples of the runs (with replacement), sorted."""
    rng = random.Random(seed)
    policy = run_costs(curves, stops, mode)
    per_curve = [patience_stops(c.watch, FRONTIER_K, mode) for c in curves]
    frontier = [run_costs(curves, [s[k] for s in per_curve], mode) for k in FRONTIER_K]
    n = len(curves)
    margins = []
    for _ in range(resamples):
        sample = [rng.randrange(n) for _ in range(n)]
        margins.append(margin(policy.point(sample), [f.point(sample) for f in frontier]))
    return sorted(margins)
