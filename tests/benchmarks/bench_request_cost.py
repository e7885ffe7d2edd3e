"""Tracker CPU per batch over HTTP: each batch on its run's own route, against many runs' batches in one
request (``POST /api/v1/batches``, as the SDK's carrier sends them), on one ``plateau serve`` worker on
SQLite.

    python -m tests.benchmarks.bench_request_cost [--runs 200] [--rounds 20] [--baseline-python PATH]

Each of ``--runs`` live runs (the load benchmark's policy: ``patience`` + ``checkpoint`` + ``percentile``
on ``val/acc``) gets, per round, a training batch (10 keys x 20 steps) and a judged batch (``val/acc`` at
the round's last step). On its own route, the batches go from 8 client threads at once, as independent
trainers send them; carried, one request holds up to 256 runs' batches. The figure is the tracker's CPU
(every process of it, from /proc) per batch. ``--baseline-python`` also runs the own-route figures
against a tracker started with another interpreter (an install of an earlier revision), side by side.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests._server import TrackerProcess
from tests.benchmarks._load_trainer import RULES
from tests.benchmarks.bench_load import tree_cpu_seconds

TRAIN_KEYS = [f"train/k{i}" for i in range(10)]
STEPS_PER_BATCH = 20
CARRIED_PER_REQUEST = 256  # the SDK carrier's bound
TARGET_RATIO = 1 / 3  # issue 67: at most a third of the baseline's CPU per batch


def _training(run_id: int, first: int) -> dict[str, Any]:
    steps = list(range(first, first + STEPS_PER_BATCH))
    series = [{"key": key, "steps": steps, "values": [1.0 / (s + 1) for s in steps]} for key in TRAIN_KEYS]
    return {"run_id": run_id, "batch_id": uuid.uuid4().hex, "series": series}


def _judged(run_id: int, step: int, round_index: int) -> dict[str, Any]:
    value = 0.9 * (1 - math.exp(-(round_index + 1) / 5)) + 0.001 * (run_id % 7)
    return {
        "run_id": run_id,
        "batch_id": uuid.uuid4().hex,
        "series": [{"key": "val/acc", "steps": [step], "values": [value]}],
    }


def _own_route(http: httpx.Client, pool: ThreadPoolExecutor) -> Callable[[list[dict[str, Any]]], None]:
    def send(batches: list[dict[str, Any]]) -> None:
        def one(batch: dict[str, Any]) -> None:
            body = {k: v for k, v in batch.items() if k != "run_id"}
            answer = http.post(f"/api/v1/runs/{batch['run_id']}/metrics", json=body)
            assert answer.status_code == 200, answer.text

        list(pool.map(one, batches))

    return send


def _carried(http: httpx.Client) -> Callable[[list[dict[str, Any]]], None]:
    def send(batches: list[dict[str, Any]]) -> None:
        for start in range(0, len(batches), CARRIED_PER_REQUEST):
            chunk = batches[start : start + CARRIED_PER_REQUEST]
            body = "".join(json.dumps(batch, separators=(",", ":")) + "\n" for batch in chunk)
            answer = http.post(
                "/api/v1/batches", content=body, headers={"content-type": "application/x-ndjson"}
            )
            assert answer.status_code == 200, answer.text
            assert all(line["status"] == 200 for line in answer.json()["results"]), answer.text

    return send


def measure(url: str, pid: int, runs: int, rounds: int, carried: bool) -> dict[str, float]:
    """Tracker CPU milliseconds per training batch and per judged batch."""
    with httpx.Client(base_url=url, timeout=120) as http, ThreadPoolExecutor(8) as pool:
        policy = {"monitor": "val/acc", "mode": "max", "rules": RULES}
        ids = []
        for _ in range(runs):
            created = http.post("/api/v1/runs", json={"project": "cost", "experiment": "e", "policy": policy})
            ids.append(created.json()["id"])
        send = _carried(http) if carried else _own_route(http, pool)
        spent = {"training": 0.0, "judged": 0.0}
        for round_index in range(rounds):
            first = round_index * STEPS_PER_BATCH
            for kind, batches in (
                ("training", [_training(run_id, first) for run_id in ids]),
                ("judged", [_judged(run_id, first + STEPS_PER_BATCH - 1, round_index) for run_id in ids]),
            ):
                before = tree_cpu_seconds(pid)
                send(batches)
                spent[kind] += tree_cpu_seconds(pid) - before
    return {kind: 1000 * seconds / (runs * rounds) for kind, seconds in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--baseline-python", help="an interpreter whose plateau_tracker is the baseline")
    args = parser.parse_args()
    rows: list[tuple[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as scratch:
        trackers = [("this tree", None)]
        if args.baseline_python:
            trackers.insert(0, ("baseline", args.baseline_python))
        for label, python in trackers:
            tracker = TrackerProcess(Path(scratch) / f"home-{label.replace(' ', '-')}", python=python)
            try:
                for carried in (False, True) if python is None else (False,):
                    how = f"carried ({CARRIED_PER_REQUEST} runs a request)" if carried else "own route each"
                    figures = measure(tracker.url, tracker.process.pid, args.runs, args.rounds, carried)
                    rows.append((f"{label}, {how}", figures))
            finally:
                tracker.stop()
    print(f"tracker CPU per batch over HTTP (ms; SQLite, 1 worker; {args.runs} runs x {args.rounds} rounds)")
    print(f"  {'':52} {'training (200 points)':>22} {'judged (val/acc)':>17}")
    for label, figures in rows:
        print(f"  {label:52} {figures['training']:22.3f} {figures['judged']:17.3f}")
    if args.baseline_python:
        base, carried = rows[0][1], rows[-1][1]
        for kind in ("training", "judged"):
            ratio = carried[kind] / base[kind]
            met = "yes" if ratio <= TARGET_RATIO else "no"
            print(f"  carried / baseline, {kind}: {ratio:.2f}x (target <= {TARGET_RATIO:.2f}x: {met})")


if __name__ == "__main__":
    main()
