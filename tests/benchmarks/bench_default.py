"""The default policy judged per source against the targets of its issue, on OPDA and on corpus draws.

    python -m tests.benchmarks.bench_default [--curves OPDA.jsonl] [--corpus DRAW.jsonl ...]
        [--preset default | --rules RULES.json] [--variant RULE.PARAM=VALUE ...] [--alone] [--json]
        [--pooled] [--intervals N]

Each file given is its own draw: its sources are judged on their own and never pooled with another draw's.
Per source (complete runs; the watched metric ``val``, scored on ``val2``):

- **margin**: compute saved beyond the patience-k frontier (k = 1..40, each k's point at its best saving)
  at the policy's own mean regret;
- **regret / spread**: the policy's mean regret over the source's spread of scores (max minus min of each
  run's best-checkpoint score), so sources of different scales read alike;
- **room share**: the margin over the most any rule could lie above the frontier at the same regret, every
  score known in hindsight;
- **vs patience-10**: more saved at no more regret (dominates), the reverse (dominated), or a trade.

``--alone`` drops every companion series (rate, validation and training loss) and the plan, as for a
trainer that logs nothing but the watched metric: the default's fallback then judges.

``--intervals N`` adds each source's 90% bootstrap interval of the margin (``_frontier.margin_interval``:
the source's runs resampled N times, the frontier recomputed on each), and the expected count of sources
below the floor (the share of resamples below -3 pp, summed): how much of a source-draw's margin is the
draw of its runs rather than the rule.

``--pooled`` adds one more table: each source's runs from every corpus draw given, judged together. The
draws of one source come from one generator at one scale, so this pools one source's runs, never regret
across sources; with four draws of 24 runs a source's frontier rests on 96 runs, and its margin moves less
with the draw than a single draw's does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from plateau_tracker.server.policy.presets import preset
from tests.benchmarks._frontier import resampled_margins
from tests.benchmarks._judging import Judgement, SourceFrame
from tests.benchmarks._sources import DEFAULT_CURVES, Source, load_sources

TARGETS = {
    "worst_margin": -0.03,
    "mean_margin": 0.08,
    "median_room_share": 0.25,
    "regret_share": 0.005,
    "patience10_share": 0.8,
}


def load_draw(path: Path, *, alone: bool) -> dict[str, Source]:
    """Complete runs of one file by source; ``alone``: without their companion series and their plan."""
    sources = load_sources(None, [path])
    if alone:
        for source in sources.values():
            source.curves = [replace(c, extras={}, planned_steps=None) for c in source.curves]
    return sources


def rules_of(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.rules:
        text = Path(args.rules).read_text() if Path(args.rules).exists() else args.rules
        rules: list[dict[str, Any]] = json.loads(text)
    else:
        spec = preset(args.preset, monitor="val", mode="max")
        rules = [r.model_dump(exclude_none=True) for r in spec.rules]
    for variant in args.variant:
        target, value = variant.split("=", 1)
        name, param = target.split(".", 1)
        rules = [{**r, param: json.loads(value)} if r["rule"] == name else r for r in rules]
    return rules


def summary(rows: dict[str, Judgement]) -> dict[str, Any]:
    margins = [j.margin for j in rows.values()]
    return {
        "count": len(rows),
        "worst_margin": min(margins),
        "mean_margin": statistics.fmean(margins),
        "median_room_share": statistics.median(j.room_share for j in rows.values()),
        "regret_within": sum(j.regret_share <= TARGETS["regret_share"] for j in rows.values()),
        "patience10_won": sum(j.against_patience10 in ("dominates", "same") for j in rows.values()),
        "patience10_lost": sum(j.against_patience10 == "dominated" for j in rows.values()),
    }


def print_draw(name: str, rows: dict[str, Judgement], seconds: float) -> None:
    print(f"\n### {name} ({seconds:.1f} s)\n")
    heads = ["saved / regret", "regret / spread", "margin", "room share", "patience-10", "vs p-10", "stops"]
    print("| source | " + " | ".join(heads) + " |")
    print("|---|---|---|---|---|---|---|---|")
    for source, j in rows.items():
        stops = ", ".join(f"{k} {v}" for k, v in sorted(j.stops.items()) if k != "-") or "-"
        print(
            f"| {source} | {j.point.saved:.3f} / {j.point.regret:.4f} | {100 * j.regret_share:.2f}% | "
            f"{100 * j.margin:+.1f} pp | {100 * j.room_share:.0f}% | {j.patience10.saved:.3f} / "
            f"{j.patience10.regret:.4f} | {j.against_patience10} | {stops} |"
        )
    s = summary(rows)
    n = s["count"]
    print(
        f"\nworst margin {100 * s['worst_margin']:+.1f} pp (target >= -3), "
        f"mean {100 * s['mean_margin']:+.1f} pp (>= +8), "
        f"median room share {100 * s['median_room_share']:.0f}% (>= 25%), "
        f"regret <= 0.5% of spread on {s['regret_within']}/{n} (all), "
        f"patience-10 beaten or matched on {s['patience10_won']}/{n} (>= 80%), "
        f"dominated on {s['patience10_lost']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--curves", type=Path, default=DEFAULT_CURVES, help="OPDA curves ('' for none)")
    parser.add_argument("--corpus", type=Path, nargs="*", default=[], help="corpus draws, one file each")
    parser.add_argument("--preset", default="default")
    parser.add_argument("--rules", help="a JSON list of rules, or a file holding one")
    parser.add_argument("--variant", action="append", default=[], metavar="RULE.PARAM=JSON")
    parser.add_argument("--alone", action="store_true", help="drop every companion series and the plan")
    parser.add_argument("--source", action="append", help="only these sources")
    parser.add_argument("--pooled", action="store_true", help="also judge each source over all draws")
    parser.add_argument("--intervals", type=int, default=0, metavar="N", help="bootstrap resamples")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rules = rules_of(args)
    # A path given as '' reads as '.', which exists: only a file counts.
    files = ([args.curves] if args.curves.is_file() else []) + list(args.corpus)
    out: dict[str, Any] = {"rules": rules, "draws": {}}
    draws = [(path.name, load_draw(path, alone=args.alone)) for path in files]
    if args.pooled and args.corpus:
        draws.append(("corpus draws pooled per source", pooled(draws[-len(args.corpus) :])))
    for name, sources in draws:
        started = time.perf_counter()
        rows: dict[str, Judgement] = {}
        intervals: dict[str, tuple[float, float, float]] = {}
        for source_name, source in sources.items():
            if args.source and source_name not in args.source:
                continue
            rows[source_name], results = SourceFrame(source.curves, source.mode).judge(rules)
            if args.intervals:
                intervals[source_name] = interval_of(source, [r.stop_index for r in results], args.intervals)
        seconds = time.perf_counter() - started
        judged = {s: {**j.as_json(), **_interval_json(intervals.get(s))} for s, j in rows.items()}
        out["draws"][name] = {"sources": judged, **summary(rows)}
        if intervals:
            out["draws"][name]["expected_below_floor"] = sum(share for *_, share in intervals.values())
        if not args.json:
            print_draw(name, rows, seconds)
            if intervals:
                print_intervals(intervals)
    if args.json:
        print(json.dumps(out, indent=2))


def interval_of(source: Source, stops: list[int], resamples: int) -> tuple[float, float, float]:
    """The margin's 90% bootstrap interval on ``source``, and the share of resamples below the floor."""
    margins = resampled_margins(source.curves, stops, source.mode, resamples=resamples)
    low, high = margins[int(0.05 * (resamples - 1))], margins[int(0.95 * (resamples - 1))]
    return low, high, sum(m < TARGETS["worst_margin"] for m in margins) / resamples


def _interval_json(interval: tuple[float, float, float] | None) -> dict[str, Any]:
    if interval is None:
        return {}
    low, high, below = interval
    return {"margin_interval_90": [low, high], "share_below_floor": below}


def print_intervals(intervals: dict[str, tuple[float, float, float]]) -> None:
    print("\n| source | margin, 90% of resampled draws | resamples below -3 pp |\n|---|---|---|")
    for source, (low, high, below) in intervals.items():
        print(f"| {source} | {100 * low:+.1f} to {100 * high:+.1f} pp | {100 * below:.0f}% |")
    expected = sum(below for *_, below in intervals.values())
    print(f"\nexpected sources below -3 pp in a draw like this one: {expected:.1f} of {len(intervals)}")


def pooled(draws: list[tuple[str, dict[str, Source]]]) -> dict[str, Source]:
    """Each source's runs from every draw, as one source."""
    sources: dict[str, Source] = {}
    for _, draw in draws:
        for name, source in draw.items():
            into = sources.setdefault(name, Source(name, source.family, source.mode, []))
            into.curves.extend(source.curves)
    return sources


if __name__ == "__main__":
    main()
