"""The shipped default beside variants of it, per source, with every series and with the watched metric alone.

    python -m tests.benchmarks.bench_compare --corpus test-artifacts/corpus-seed18.jsonl \\
        --variant outlook.relative_delta=0.02 [--variant degenerate.window=10,degenerate.max_distinct=5]

A variant is one or more ``RULE.PARAM=VALUE`` changes (VALUE read as JSON, so ``null`` turns a parameter
off), applied to the default's rules. Each is replayed as ``bench_replay`` replays the default: each run
keeps the first evaluation at its best up to the stop, and a margin is the compute saved minus what the
patience-k frontier (k = 1..40) saves at the same mean regret. Printed per source: margin in pp and mean
regret, every series the curves carry and the watched metric alone (no rate, no losses logged); then per
policy the summed margin, the sources below the frontier and the worst mean regret.

This is how a change to the default is judged before it is taken (``tracker/policy/HISTORY.md``): on a
corpus draw generated after the change was proposed, not on the draw that suggested it.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plateau_tracker.server.policy.presets import DEFAULT_RULES
from tests.benchmarks._frontier import margin, patience_frontier
from tests.benchmarks.bench_replay import DEFAULT_CURVES, Source, load_sources, replay_point, with_params

CONDITIONS = ("every series", "watched alone")


def variant_rules(changes: str) -> list[dict[str, Any]]:
    """The default's rules with ``changes`` (``RULE.PARAM=VALUE,...``) applied; ``ValueError`` names a
    change that is not of that form or a rule the default does not have."""
    rules = DEFAULT_RULES
    names = {r["rule"] for r in rules}
    for change in changes.split(","):
        target, sep, raw = change.partition("=")
        rule, dot, param = target.partition(".")
        if not sep or not dot or not param:
            raise ValueError(f"{change!r}: expected RULE.PARAM=VALUE")
        if rule not in names:
            raise ValueError(f"{change!r}: the default has no rule {rule!r} ({', '.join(sorted(names))})")
        rules = with_params(rules, rule, **{param: json.loads(raw)})
    return rules


@dataclass
class Tally:
    """A policy's figures summed over the sources of one condition."""

    margin_sum: float = 0.0
    below: list[str] = field(default_factory=list)
    worst_regret: float = 0.0
    worst_source: str = ""


def compare(
    sources: dict[str, Source], policies: dict[str, list[dict[str, Any]]], alone: bool
) -> tuple[dict[str, dict[str, tuple[float, float]]], dict[str, Tally]]:
    """Per source and policy (margin, mean regret), and each policy's :class:`Tally`."""
    rows: dict[str, dict[str, tuple[float, float]]] = {}
    tallies = {name: Tally() for name in policies}
    for source_name, src in sources.items():
        if alone:
            src = src.watched_alone()
        frontier = list(patience_frontier(src.curves, src.mode).values())
        rows[source_name] = {}
        for name, rules in policies.items():
            point, _ = replay_point(rules, src)
            m = margin(point, frontier)
            rows[source_name][name] = (m, point.regret)
            tally = tallies[name]
            tally.margin_sum += m
            if m < 0:
                tally.below.append(source_name)
            if point.regret > tally.worst_regret:
                tally.worst_regret, tally.worst_source = point.regret, source_name
    return rows, tallies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--curves", type=Path, default=DEFAULT_CURVES, help="OPDA curves (skipped if absent)")
    parser.add_argument("--corpus", type=Path, nargs="*", default=[])
    parser.add_argument("--variant", action="append", default=[], metavar="RULE.PARAM=VALUE[,...]")
    args = parser.parse_args()
    policies = {"default": DEFAULT_RULES}
    for changes in args.variant:
        policies[changes] = variant_rules(changes)
    corpora = [p for p in args.corpus if p.exists()]
    sources = load_sources(args.curves if args.curves.exists() else None, corpora)
    if not sources:
        raise SystemExit("no curves: pass --curves or --corpus")
    labels = {name: f"[{i}]" for i, name in enumerate(policies)}
    for name, label in labels.items():
        print(f"{label} {name}")
    for condition in CONDITIONS:
        rows, tallies = compare(sources, policies, alone=condition == "watched alone")
        print(f"\n{condition}: margin over the patience-k frontier (pp) @ mean regret\n")
        print("| source | " + " | ".join(labels.values()) + " |")
        print("|---|" + "---|" * len(labels))
        for source_name, by_policy in rows.items():
            cells = [f"{100 * m:+.1f} @ {r:.4f}" for m, r in by_policy.values()]
            print(f"| {source_name} | " + " | ".join(cells) + " |")
        for name, tally in tallies.items():
            print(
                f"{labels[name]} sum {100 * tally.margin_sum:+.1f} pp; below the frontier on "
                f"{len(tally.below)} ({', '.join(tally.below) or '-'}); worst mean regret "
                f"{tally.worst_regret:.4f} ({tally.worst_source})"
            )


if __name__ == "__main__":
    main()
