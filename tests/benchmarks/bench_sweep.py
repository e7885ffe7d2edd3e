"""Sweeps: Plateau's ``default-sweep`` beside real Optuna pruners and the i-Epoch baseline.

    python -m tests.benchmarks.bench_sweep [--curves OPDA.jsonl] [--corpus CORPUS.jsonl ...] [--quick]
        [--source NAME ...] [--rules JSON]

Each source is replayed as one sweep, its runs in the file's order (arrival order): Plateau through
``replay_sweep`` (cross-run rules see only the runs replayed before), Optuna through a real in-memory
``Study`` (``ask``, ``report`` at each checkpoint's step, ``should_prune``, ``tell``), every run stopped
where its policy or pruner stopped it and keeping its best checkpoint up to there. Scores: compute saved
(cost-weighted) and the sweep's regret (score of the best checkpoint of the whole sweep minus that of the
best checkpoint kept).

Optuna grid: ``MedianPruner`` and ``PercentilePruner(25)`` with 5 or 10 startup trials and warm-up 0 to 8
evaluations (``n_warmup_steps`` in the source's own step unit), ``SuccessiveHalvingPruner``,
``HyperbandPruner``, ``WilcoxonPruner`` and ``PatientPruner(MedianPruner(), patience=3)``, each with its
own defaults otherwise. ``--quick`` keeps warm-ups 0, 2 and 4.

The i-Epoch baseline (Egele et al., 2024) trains every run for its first i evaluations and keeps the best;
its front is every i.

The ceiling is a clairvoyant sweep: every run stopped at its first checkpoint except the one that holds the
sweep's best score, stopped at its watched best. It finds the best run at no regret, and no policy that
judges runs at their checkpoints can save much more at any regret (stopping that run at its first
checkpoint too is all there is left). "Room" is the ceiling minus the best Optuna configuration at no
larger regret: where it is under the +3 pp the issue asks for, no policy can reach the target there.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from plateau_tracker.server.policy import PolicySpec
from plateau_tracker.server.policy.presets import preset
from plateau_tracker.server.replay._curves import Curve
from plateau_tracker.server.replay._report import summarise
from plateau_tracker.server.replay._simulate import best_index, replay_sweep
from tests.benchmarks._frontier import results_at
from tests.benchmarks._sources import DEFAULT_CORPUS, DEFAULT_CURVES, Source, load_sources


def score(
    source: Source, stops: Sequence[int], by: Sequence[str | None] | None = None
) -> tuple[float, float]:
    """(compute saved, sweep regret) when each run stops at its index in ``stops``."""
    report = summarise(source.name, results_at(source.curves, stops, source.mode, by), sweep=True)
    return report.compute_saved, float(report.sweep_regret or 0.0)


def optuna_stops(source: Source, make_pruner: Callable[[], Any]) -> list[int]:
    """Where a real Optuna study with this pruner stops each run, the runs told in arrival order."""
    import optuna

    direction = "maximize" if source.mode == "max" else "minimize"
    # A fixed name: HyperbandPruner assigns each trial its bracket by a hash of the study's name, which
    # Optuna otherwise draws at random, so the same sweep pruned differently from one run to the next.
    study = optuna.create_study(direction=direction, pruner=make_pruner(), study_name=f"sweep {source.name}")
    stops = []
    for curve in source.curves:
        trial = study.ask()
        stop = len(curve.steps) - 1
        for i, (step, value) in enumerate(zip(curve.steps, curve.watch, strict=True)):
            trial.report(value, step)
            if trial.should_prune():
                stop = i
                break
        if stop < len(curve.steps) - 1:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            finite = [v for v in curve.watch if math.isfinite(v)]
            best = (max if source.mode == "max" else min)(finite) if finite else math.nan
            if math.isfinite(best):
                study.tell(trial, best)
            else:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
        stops.append(stop)
    return stops


def optuna_grid(unit: int, warmups: Sequence[int]) -> dict[str, Callable[[], Any]]:
    import optuna.pruners as op

    grid: dict[str, Callable[[], Any]] = {}
    for startup in (5, 10):
        for w in warmups:
            grid[f"Median({startup}, warm-up {w})"] = lambda s=startup, w=w: op.MedianPruner(s, w * unit)
            grid[f"Percentile(25, {startup}, warm-up {w})"] = lambda s=startup, w=w: op.PercentilePruner(
                25.0, s, w * unit
            )
    grid["SuccessiveHalving()"] = op.SuccessiveHalvingPruner
    grid["Hyperband()"] = op.HyperbandPruner
    grid["Wilcoxon()"] = op.WilcoxonPruner
    grid["Patient(Median(), 3)"] = lambda: op.PatientPruner(op.MedianPruner(), patience=3)
    return grid


def clairvoyant_sweep_stops(source: Source) -> list[int]:
    """Every run stopped at its first checkpoint, except the run whose watched best scores best of the
    sweep, stopped there: the least compute that still finds the sweep's best run."""
    sign = source.curves[0].score_sign(source.mode)

    def kept_score(curve: Curve) -> float:
        value = sign * curve.score[best_index(curve.watch, len(curve.watch) - 1, source.mode)]
        return value if not math.isnan(value) else -math.inf

    winner = max(range(len(source.curves)), key=lambda i: kept_score(source.curves[i]))
    stops = [0] * len(source.curves)
    best_run = source.curves[winner]
    stops[winner] = best_index(best_run.watch, len(best_run.watch) - 1, source.mode)
    return stops


def i_epoch_front(source: Source) -> list[tuple[float, float]]:
    longest = max(len(c.steps) for c in source.curves)
    return [score(source, [min(i, len(c.steps) - 1) for c in source.curves]) for i in range(longest)]


def no_larger_regret(r: float, regret: float) -> bool:
    """Whether sweep regret ``r`` is no larger than ``regret``, both below 0 read as 0: a kept best that
    scores above the sweep's best by the watched metric is luck of the held-out split, so a policy with a
    negative regret is compared with the configurations at regret 0, not with none of them (seed 2's
    digits-loss sweep read "none" at -0.0033, where SuccessiveHalving saved more at 0)."""
    return max(r, 0.0) <= max(regret, 0.0) + 1e-12


def front_saved_at(front: Sequence[tuple[float, float]], regret: float) -> float:
    """The most a front saves at a sweep regret no larger than ``regret`` (see :func:`no_larger_regret`)."""
    return max((saved for saved, r in front if no_larger_regret(r, regret)), default=0.0)


MARGIN_GOAL = 0.03
"""Issue 18's sweep target: default-sweep saves at least 3 points more than the best Optuna configuration at
no larger sweep regret."""


def targets_said(rows: Sequence[tuple[str, float | None, float]]) -> list[str]:
    """The sweep targets against ``rows`` (source, margin over Optuna's best at no larger regret or None
    where no configuration reaches that regret, margin over the i-Epoch front at no larger regret)."""
    compared = [(name, m) for name, m, _ in rows if m is not None]
    short = [name for name, m in compared if m < MARGIN_GOAL]
    behind = [name for name, _, front in rows if front < 0.0]
    return [
        f"+{100 * MARGIN_GOAL:.0f} pp over the best Optuna configuration at no larger regret: met on "
        f"{len(compared) - len(short)} of {len(compared)}"
        + (f"; short on {', '.join(short)}" if short else ""),
        "above the i-Epoch front at no larger regret: "
        + (
            f"met on {len(rows) - len(behind)} of {len(rows)}; behind on {', '.join(behind)}"
            if behind
            else "met"
        ),
    ]


def _unit(curves: Sequence[Curve]) -> int:
    return min(c.steps[0] for c in curves if c.steps) or 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--curves", type=Path, default=DEFAULT_CURVES)
    parser.add_argument("--corpus", type=Path, nargs="*", default=[DEFAULT_CORPUS])
    parser.add_argument("--quick", action="store_true", help="Optuna warm-ups 0, 2, 4 only")
    parser.add_argument("--source", action="append", help="only these sources")
    parser.add_argument(
        "--rules",
        type=json.loads,
        help='rules to replay instead of default-sweep\'s, as JSON (a candidate: \'[{"rule": "asha"}]\')',
    )
    args = parser.parse_args()
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("optuna").setLevel(logging.WARNING)
    sources = load_sources(
        args.curves if args.curves.exists() else None, [p for p in args.corpus if p.exists()]
    )
    if args.source:
        sources = {n: s for n, s in sources.items() if n in args.source}
    warmups = (0, 2, 4) if args.quick else tuple(range(9))
    print("Per sweep (arrival order): compute saved / regret of the best run found\n")
    print(
        "| family | source | runs | default-sweep | best Optuna at no larger regret | margin "
        "| best Optuna overall | i-Epoch at no larger regret | ceiling | room |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    started = time.perf_counter()
    rows: list[tuple[str, float | None, float]] = []
    for name, source in sources.items():
        policy = preset("default-sweep", monitor="val", mode=source.mode)
        if args.rules is not None:
            policy = PolicySpec.model_validate({"monitor": "val", "mode": source.mode, "rules": args.rules})
        results = replay_sweep(policy, source.curves)
        ours = score(source, [r.stop_index for r in results], [r.stopped_by for r in results])
        optuna_points = {
            label: score(source, optuna_stops(source, make))
            for label, make in optuna_grid(_unit(source.curves), warmups).items()
        }
        eligible = {k: v for k, v in optuna_points.items() if no_larger_regret(v[1], ours[1])}
        best_eligible = max(eligible.items(), key=lambda kv: kv[1][0]) if eligible else None
        best_overall = max(optuna_points.items(), key=lambda kv: kv[1][0])
        i_epoch = front_saved_at(i_epoch_front(source), ours[1])
        ceiling, _ = score(source, clairvoyant_sweep_stops(source))
        cells = [f"{ours[0]:.3f} / {ours[1]:.4f}"]
        room = "-"
        if best_eligible:
            label, (saved, regret) = best_eligible
            cells += [f"{label}: {saved:.3f} / {regret:.4f}", f"{100 * (ours[0] - saved):+.1f} pp"]
            room = f"{100 * (ceiling - saved):+.1f} pp"
        else:
            cells += ["none", "-"]
        label, (saved, regret) = best_overall
        cells += [f"{label}: {saved:.3f} / {regret:.4f}", f"{i_epoch:.3f}", f"{ceiling:.3f}", room]
        print(f"| {source.family} | {name} | {len(source.curves)} | " + " | ".join(cells) + " |", flush=True)
        rows.append((name, ours[0] - best_eligible[1][0] if best_eligible else None, ours[0] - i_epoch))
    print(f"\n({time.perf_counter() - started:.0f}s)")
    for line in targets_said(rows):
        print(f"- {line}")


if __name__ == "__main__":
    main()
