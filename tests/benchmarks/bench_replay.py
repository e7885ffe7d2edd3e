"""Default policies against patience-k and the median pruner on the OPDA curves.

    python -m tests.benchmarks.bench_replay [--curves PATH] [--json]

Per run (complete runs, watch ``val``, score ``val2``, cost by ``time_s`` else ``x``): compute saved and
mean regret of patience-k (k = 3, 5, 10, 20) and of Plateau's ``default``; the margin is the default's
compute saved minus patience's interpolated (piecewise linearly over k = 1..80 and the origin) at the
default's own mean regret. Per sweep (each source in arrival order): ``default-sweep`` against the
reference median pruner (10 startup runs, 5 warm-up evaluations).
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from tracker.policy.presets import preset
from tracker.replay._curves import Curve, load_jsonl
from tracker.replay._report import SourceReport, summarise
from tracker.replay._simulate import replay_curve, replay_sweep

DEFAULT_CURVES = Path(__file__).resolve().parents[3] / "shared" / "data" / "curves" / "opda_curves.jsonl"
FRONTIER_K = (1, 2, 3, 5, 10, 20, 30, 50, 80)
TABLE_K = (3, 5, 10, 20)


def reports(name: str, groups: dict[str, list[Curve]], *, sweep: bool) -> dict[str, SourceReport]:
    policy = preset(name, monitor="val", mode="max")
    out = {}
    for source, curves in groups.items():
        results = replay_sweep(policy, curves) if sweep else [replay_curve(policy, c) for c in curves]
        out[source] = summarise(source, results, sweep=sweep)
    return out


def interpolate(points: list[tuple[float, float]], regret: float) -> float:
    """Compute saved on the (regret, saved) frontier at ``regret``, linearly between measured points."""
    points = sorted([(0.0, 0.0), *points])
    for (r0, s0), (r1, s1) in itertools.pairwise(points):
        if r0 <= regret <= r1:
            return s0 if r1 == r0 else s0 + (s1 - s0) * (regret - r0) / (r1 - r0)
    return points[-1][1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--curves", type=Path, default=DEFAULT_CURVES)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not args.curves.exists():
        raise SystemExit(f"no curves at {args.curves}; pass --curves")
    started = time.perf_counter()
    groups: dict[str, list[Curve]] = defaultdict(list)
    for curve in load_jsonl(args.curves, metric="val", score="val2"):
        if curve.complete:
            groups[curve.source].append(curve)
    patience = {k: reports(f"patience-{k}", groups, sweep=False) for k in FRONTIER_K}
    default = reports("default", groups, sweep=False)
    median = reports("median", groups, sweep=True)
    sweep = reports("default-sweep", groups, sweep=True)
    result: dict[str, Any] = {}
    for source in groups:
        frontier = [(patience[k][source].mean_regret, patience[k][source].compute_saved) for k in FRONTIER_K]
        d = default[source]
        result[source] = {
            "runs": d.runs,
            "patience": {
                k: (patience[k][source].compute_saved, patience[k][source].mean_regret) for k in TABLE_K
            },
            "default": (d.compute_saved, d.mean_regret),
            "margin_over_patience": d.compute_saved - interpolate(frontier, d.mean_regret),
            "median_sweep": (median[source].compute_saved, median[source].sweep_regret),
            "default_sweep": (sweep[source].compute_saved, sweep[source].sweep_regret),
        }
    seconds = time.perf_counter() - started
    if args.json:
        print(json.dumps({"seconds": seconds, "sources": result}, indent=2))
        return
    heads = [f"patience-{k}" for k in TABLE_K] + ["default", "margin"]
    print("Per run: compute saved / mean regret (val2)\n")
    print("| source | " + " | ".join(heads) + " |")
    print("|---|" + "---|" * len(heads))
    for source, r in result.items():
        cells = [f"{s:.3f} / {g:.4f}" for s, g in (r["patience"][k] for k in TABLE_K)]
        saved, regret = r["default"]
        cells += [f"{saved:.3f} / {regret:.4f}", f"{100 * r['margin_over_patience']:+.1f} pp"]
        print(f"| {source} | " + " | ".join(cells) + " |")
    print("\nPer sweep (arrival order): compute saved / regret of the best run found (val2)\n")
    print("| source | median pruner | default-sweep |")
    print("|---|---|---|")
    for source, r in result.items():
        m, d = r["median_sweep"], r["default_sweep"]
        print(f"| {source} | {m[0]:.3f} / {m[1]:.4f} | {d[0]:.3f} / {d[1]:.4f} |")
    print(f"\n({sum(r['runs'] for r in result.values())} complete runs, {seconds:.1f}s)")


if __name__ == "__main__":
    main()
