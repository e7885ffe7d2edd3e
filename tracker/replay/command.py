"""The ``plateau replay`` command: load a policy and curves, replay, print a table or JSON."""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from plateau_tracker._mode import infer_mode
from plateau_tracker._progress import Progress
from plateau_tracker.server.policy import PolicySpec
from plateau_tracker.server.policy._types import Mode
from plateau_tracker.server.policy.presets import PRESETS, preset
from plateau_tracker.server.replay._curves import Curve, load_jsonl, load_tracker
from plateau_tracker.server.replay._report import summarise, table
from plateau_tracker.server.replay._simulate import replay_curve, replay_sweep


def load_policy(spec: str, *, monitor: str, mode: Mode) -> PolicySpec:
    """A policy from a JSON/YAML file (a whole policy, or just a list of rules) or a preset name."""
    path = Path(spec)
    if not path.exists():
        if path.suffix.lower() in {".json", ".yaml", ".yml"} or len(path.parts) > 1:
            # Clearly meant as a file: "unknown preset 'my-policy.yaml'" would send the user the wrong way.
            raise ValueError(f"no such policy file {spec!r}; or name a preset: {', '.join(PRESETS)}")
        return preset(spec, monitor=monitor, mode=mode)
    data = yaml.safe_load(path.read_text())  # YAML is a superset of JSON
    if isinstance(data, list):
        data = {"rules": data}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a policy object or a list of rules")
    data.setdefault("monitor", monitor)
    data.setdefault("mode", mode)
    return PolicySpec.model_validate(data)


def replay_sources(
    policy_for: Callable[[Mode], PolicySpec],
    curves: list[Curve],
    *,
    sweep: bool,
    include_incomplete: bool,
    mode: Mode | None = None,
    fallback: Mode = "max",
    progress: Progress | None = None,
) -> tuple[list[Any], dict[str, int]]:
    """Replay each source with the policy for its mode: ``mode`` when given, else the mode its curves
    declare (``"mode"`` in the curve file), else ``fallback``. ``progress`` counts the runs replayed."""
    by_source: dict[str, list[Curve]] = defaultdict(list)
    for curve in curves:
        if curve.complete or include_incomplete:
            by_source[curve.source].append(curve)
    reports = []
    stops: dict[str, int] = {}
    for source, group in by_source.items():
        policy = policy_for(mode or group[0].mode or fallback)
        if sweep:
            results = replay_sweep(policy, group)
            if progress is not None:
                progress.add(len(group))
        else:
            results = []
            for curve in group:
                results.append(replay_curve(policy, curve))
                if progress is not None:
                    progress.add()
        reports.append(summarise(source, results, sweep=sweep))
        for r in results:
            stops[_unique(stops, f"{source}/{r.curve.run_id}")] = r.stop_index
    return reports, stops


def _unique(taken: dict[str, int], key: str) -> str:
    """``key``, or for a run_id repeated within a source (files pooled from two sweeps) ``key#2``, ``key#3``,
    ... in the order the runs come: each run keeps its own stop, none is overwritten by the next."""
    if key not in taken:
        return key
    count = 2
    while f"{key}#{count}" in taken:
        count += 1
    return f"{key}#{count}"


def _curves_of(args: Any, unwatched: list[str], unscored: list[str]) -> list[Curve]:
    """The curves the command names: its files, then the tracker's experiment. Runs that never recorded the
    watched metric are named in ``unwatched``, those without the scored one in ``unscored``."""
    curves: list[Curve] = []
    score = args.score or args.metric
    for path in args.curves or []:
        curves += load_jsonl(
            Path(path), metric=args.metric, score=score, unwatched=unwatched, unscored=unscored
        )
    if args.experiment:
        curves += load_tracker(
            args.url,
            token=args.token,
            project=args.project,
            experiment=args.experiment,
            metric=args.metric,
            score=score,
            unwatched=unwatched,
            unscored=unscored,
        )
    return curves


def _fell_back(curves: list[Curve], args: Any) -> str:
    """The footer's word on the replayed runs scored on the watched metric for want of ``--score``'s
    series (the loaders hand such a run its watched series as its score: found by identity)."""
    if not args.score or args.score == args.metric:
        return ""
    count = sum(c.score is c.watch for c in curves if c.complete or args.include_incomplete)
    return f" ({count} run(s) without it on {args.metric})" if count else ""


def _some(names: list[str]) -> str:
    """The first few of ``names``, for a one-line message."""
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def run_replay(args: Any) -> int:
    """``plateau replay``: print each source's figures (or JSON); returns the exit code."""
    policies: dict[Mode, PolicySpec] = {}

    def policy_for(mode: Mode) -> PolicySpec:
        if mode not in policies:
            policies[mode] = load_policy(args.policy, monitor=args.metric, mode=mode)
        return policies[mode]

    # With neither --mode nor a mode in the curve file: the direction the metric's name says (val_loss is
    # minimised, val_acc maximised), else max (OPDA's "val" is an accuracy).
    fallback: Mode = infer_mode(args.metric) or "max"
    try:
        policy = policy_for(args.mode or fallback)
    except (ValueError, ValidationError, OSError, yaml.YAMLError) as exc:
        print(f"plateau replay: bad policy {args.policy!r}: {exc}", file=sys.stderr)
        return 1
    started = time.perf_counter()
    unwatched: list[str] = []
    unscored: list[str] = []
    try:
        curves = _curves_of(args, unwatched, unscored)
    except (OSError, ValueError) as exc:
        print(f"plateau replay: {exc}", file=sys.stderr)
        return 1
    if unwatched:  # said, never replayed as a run of NaN (which every rule would stop at once)
        print(
            f"plateau replay: {len(unwatched)} run(s) have no {args.metric!r} series (--metric: a list as "
            f"long as x of numbers, nulls or 'NaN'/'Infinity'/'-Infinity'), skipped: {_some(unwatched)}",
            file=sys.stderr,
        )
    if unscored:  # their regret is then the watched metric's: said, as it is not what --score asked
        print(
            f"plateau replay: {len(unscored)} run(s) have no {args.score!r} series (--score), scored on "
            f"{args.metric!r} instead: {_some(unscored)}",
            file=sys.stderr,
        )
    if args.source:
        curves = [c for c in curves if c.source in set(args.source)]
    if not curves:
        print(
            "plateau replay: no curves to replay (give --curves FILE or --experiment NAME)", file=sys.stderr
        )
        return 1
    replayed = sum(c.complete or args.include_incomplete for c in curves)
    progress = Progress("plateau replay", total=replayed, unit="runs", clock_every=1)
    try:
        reports, stops = replay_sources(
            policy_for,
            curves,
            sweep=args.sweep,
            include_incomplete=args.include_incomplete,
            mode=args.mode,
            fallback=fallback,
            progress=progress,
        )
    finally:
        progress.close()
    elapsed = time.perf_counter() - started
    if args.json:
        print(
            json.dumps(
                {
                    "policy": policy.model_dump(mode="json"),
                    "seconds": elapsed,
                    "sources": {r.source: r.as_json() for r in reports},
                    "stop_index": stops,
                },
                indent=2,
            )
        )
    else:
        print(table(reports))
        print(
            f"\n{sum(r.runs for r in reports)} runs replayed in {elapsed:.1f}s"
            f"{' (sweeps in arrival order)' if args.sweep else ''}; regret scored on "
            f"{args.score or args.metric}{_fell_back(curves, args)}; "
            f"{'all' if args.include_incomplete else 'complete'} runs"
        )
    return 0
