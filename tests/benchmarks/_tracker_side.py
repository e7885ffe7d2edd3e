"""Figures of the tracker: ingest throughput, keep-alive round trip, the policy engine, history reads,
storage, and replay of the OPDA curves."""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from plateau_tracker._transport import Transport
from plateau_tracker.server.policy import Observation, PolicySpec, evaluate, initial_states
from plateau_tracker.server.policy.presets import preset
from tests.benchmarks._report import median_of, percentile

BATCH_KEYS = 10
BATCH_STEPS = 100  # 10 keys x 100 steps: 1,000-point batches


def _series_body(batch: int) -> bytes:
    steps = list(range(batch * BATCH_STEPS, (batch + 1) * BATCH_STEPS))
    series = [
        {
            "key": f"train/k{k}",
            "rank": 0,
            "steps": steps,
            "values": [1.0 / (s + 1) + 0.001 * k for s in steps],
            "wall_times": [time.time()] * len(steps),
        }
        for k in range(BATCH_KEYS)
    ]
    return json.dumps({"batch_id": uuid.uuid4().hex, "series": series}, separators=(",", ":")).encode()


def _in_threads(work: Callable[[Any], None], chunks: list[Any]) -> float:
    """Run ``work(chunk)`` for every chunk at once, one thread each; seconds until all are done."""
    threads = [threading.Thread(target=work, args=(chunk,)) for chunk in chunks]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def _post_all(url: str, run_id: int, bodies: list[bytes], clients: int) -> float:
    """Post ``bodies`` over ``clients`` keep-alive connections at once; seconds until all are stored."""
    chunks = [bodies[i::clients] for i in range(clients)]
    failures: list[str] = []

    def post(chunk: list[bytes]) -> None:
        with httpx.Client(base_url=url, timeout=60) as client:
            for body in chunk:
                response = client.post(
                    f"/api/v1/runs/{run_id}/metrics",
                    content=body,
                    headers={"content-type": "application/json"},
                )
                if response.status_code != 200 or response.json()["accepted"] != BATCH_KEYS * BATCH_STEPS:
                    failures.append(response.text[:200])

    elapsed = _in_threads(post, chunks)
    if failures:
        raise RuntimeError(f"ingest failed: {failures[0]}")
    return elapsed


def plateau_ingest(url: str, *, clients: int, batches: int = 300, repeats: int = 3) -> float:
    """Median points/s stored, 1,000-point batches in the SDK's series form, each repeat a new run."""
    transport = Transport(url, timeout=60)

    def one_repeat() -> float:
        run = transport.create_run(
            {"project": "bench", "experiment": "ingest", "policy": {"monitor": "val/loss"}}
        )
        bodies = [_series_body(b) for b in range(batches)]
        return batches * BATCH_KEYS * BATCH_STEPS / _post_all(url, run["id"], bodies, clients)

    median, _ = median_of(one_repeat, repeats)
    transport.close()
    return median


def mlflow_log_batch(url: str, *, clients: int, batches: int = 30, repeats: int = 2) -> float:
    """Median points/s of ``MlflowClient.log_batch`` with 1,000 metrics per call (its maximum)."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    client = MlflowClient(tracking_uri=url)
    experiment = client.create_experiment(f"bench-ingest-{uuid.uuid4().hex[:8]}")

    def one_repeat() -> float:
        run_id = client.create_run(experiment).info.run_id
        payloads = [
            [
                Metric(f"train/k{k}", 1.0 / (s + 1), 1_700_000_000_000 + s, s)
                for k in range(BATCH_KEYS)
                for s in range(b * BATCH_STEPS, (b + 1) * BATCH_STEPS)
            ]
            for b in range(batches)
        ]
        chunks = [payloads[i::clients] for i in range(clients)]

        def post(chunk: list[list[Metric]]) -> None:
            for metrics in chunk:
                client.log_batch(run_id, metrics=metrics, synchronous=True)

        return batches * BATCH_KEYS * BATCH_STEPS / _in_threads(post, chunks)

    median, _ = median_of(one_repeat, repeats, warmup=0)
    return median


def plateau_round_trip(url: str, requests: int = 2_000) -> tuple[float, float]:
    """p50 and p99 ms of a one-point ingest over one keep-alive connection (the SDK's transport)."""
    transport = Transport(url, timeout=30)
    run = transport.create_run({"project": "bench", "experiment": "rtt", "policy": {"monitor": "val/loss"}})
    times = []
    for step in range(requests + 200):
        series = [
            {"key": "train/loss", "rank": 0, "steps": [step], "values": [0.5], "wall_times": [time.time()]}
        ]
        started = time.perf_counter()
        transport.send_series(run["id"], uuid.uuid4().hex, series)
        if step >= 200:  # the first 200 warm up
            times.append(time.perf_counter() - started)
    transport.close()
    return 1000 * percentile(times, 0.5), 1000 * percentile(times, 0.99)


def mlflow_round_trip(url: str, requests: int = 300) -> tuple[float, float]:
    """p50 and p99 ms of a synchronous ``MlflowClient.log_metric``."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=url)
    experiment = client.create_experiment(f"bench-rtt-{uuid.uuid4().hex[:8]}")
    run_id = client.create_run(experiment).info.run_id
    times = []
    for step in range(requests + 30):
        started = time.perf_counter()
        client.log_metric(run_id, "train/loss", 0.5, step=step)
        if step >= 30:
            times.append(time.perf_counter() - started)
    return 1000 * percentile(times, 0.5), 1000 * percentile(times, 0.99)


def _curve(length: int, seed: int) -> list[float]:
    """A noisy, decaying loss curve that flattens: long enough for the rules to stop it somewhere."""
    values = []
    state = seed or 1
    for step in range(length):
        state = (1103515245 * state + 12345) % 2**31
        noise = (state / 2**31 - 0.5) * 0.01
        values.append(0.2 + math.exp(-step / 100) + noise)
    return values


def engine_points_per_s(policy: PolicySpec, runs: int = 400, length: int = 500, chunk: int = 100) -> float:
    """Observations judged per second by ``evaluate`` in-process: ``runs`` noisy decaying curves, each fed
    in ``chunk``-sized batches (as ingest hands them over) from fresh rule states until the policy stops
    it or it ends; only observations up to the stop count."""
    curves = [
        [
            Observation(step, value, 1.7e9 + step, {"lr": 0.1})
            for step, value in enumerate(_curve(length, seed))
        ]
        for seed in range(runs)
    ]

    def one_repeat() -> float:
        judged = 0
        started = time.perf_counter()
        for curve in curves:
            states = initial_states(policy)
            for index in range(0, length, chunk):
                evaluation = evaluate(policy, states, curve[index : index + chunk])
                states = evaluation.states
                if evaluation.stop_step is not None:
                    judged += evaluation.stop_step - index + 1
                    break
                judged += len(curve[index : index + chunk])
        return judged / (time.perf_counter() - started)

    median, _ = median_of(one_repeat, 7)  # CPU-bound and short: the host's noise needs more samples
    return median


_ENGINE_SCRIPT = """
import gc, json
from plateau_tracker.server.app import create_app
from tests.benchmarks import _tracker_side as bench

create_app()  # the tracker's modules and app in memory, then frozen as its start-up does
gc.collect()
gc.freeze()
print(json.dumps([bench.engine_points_per_s(bench.patience_policy()),
                  bench.engine_points_per_s(bench.default_policy())]))
"""


def engine_in_tracker_process() -> tuple[float, float]:
    """Patience and default-policy figures of :func:`engine_points_per_s`, measured in a fresh process
    holding what the tracker holds (its modules and app, frozen as its start-up freezes them), not in
    this one, whose heap carries the peers' libraries for the collector to walk."""
    root = Path(__file__).resolve().parents[2]
    output = subprocess.run(
        [sys.executable, "-c", _ENGINE_SCRIPT], cwd=root, capture_output=True, text=True, check=True
    ).stdout
    patience, default = json.loads(output.strip().splitlines()[-1])
    return float(patience), float(default)


def patience_policy() -> PolicySpec:
    return PolicySpec.model_validate(
        {"monitor": "val/loss", "mode": "min", "rules": [{"rule": "patience", "patience": 10}]}
    )


def default_policy() -> PolicySpec:
    return preset("default", monitor="val/loss", mode="min")


def seed_history(url: str, points: int) -> int:
    """A run with ``points`` points of one key, sent as 10,000-point series batches; its id."""
    transport = Transport(url, timeout=120)
    run = transport.create_run({"project": "bench", "experiment": "history"})
    for start in range(0, points, 10_000):
        steps = list(range(start, min(points, start + 10_000)))
        series = [
            {
                "key": "train/loss",
                "rank": 0,
                "steps": steps,
                "values": [1.0 / (s + 1) for s in steps],
                "wall_times": [time.time()] * len(steps),
            }
        ]
        transport.send_series(run["id"], uuid.uuid4().hex, series)
    transport.close()
    return int(run["id"])


def history_reads(url: str, run_id: int, points: int, repeats: int = 5) -> tuple[float, float, float]:
    """Median seconds to read the key's whole history (paged, 100,000 a page, parsed) in the columns form
    and in the points form, and ms for the curve downsampled to 2,000 points."""
    with httpx.Client(base_url=url, timeout=300) as http:

        def read_all(form: str) -> float:
            started = time.perf_counter()
            got = 0
            start: int | None = 0
            while start is not None:
                page = http.get(
                    f"/api/v1/runs/{run_id}/history",
                    params={"key": "train/loss", "start_step": start, "limit": 100_000, "form": form},
                ).json()
                got += len(page["steps"] if form == "columns" else page["points"])
                start = page["next_step"]
            assert got == points, got
            return time.perf_counter() - started

        def downsampled() -> float:
            started = time.perf_counter()
            page = http.get(f"/api/v1/runs/{run_id}/series", params={"key": "train/loss", "points": 2000})
            assert page.status_code == 200
            assert len(page.json()["points"]) <= 2000
            return time.perf_counter() - started

        columns_s, _ = median_of(lambda: read_all("columns"), max(1, repeats // 2))
        points_s, _ = median_of(lambda: read_all("points"), max(1, repeats // 2))
        down_s, _ = median_of(downsampled, repeats)
    return columns_s, points_s, 1000 * down_s


def packed_read_s(url: str, run_id: int, points: int, repeats: int = 3) -> float:
    """Median seconds to read the key's whole history with ``TrackerClient.history_columns``: packed
    columns (``form=binary``), 1,000,000 points a page, into three arrays."""
    client = Transport(url, timeout=300)

    def read_all() -> float:
        started = time.perf_counter()
        steps, values, wall_times = client.history_columns(run_id, "train/loss")
        elapsed = time.perf_counter() - started
        assert len(steps) == len(values) == len(wall_times) == points, len(steps)
        return elapsed

    try:
        return median_of(read_all, repeats)[0]
    finally:
        client.close()


def mlflow_history(url: str, database: Path, points: int) -> tuple[float, float]:
    """Seconds for ``MlflowClient.get_metric_history`` of a ``points``-point key, and the bytes per point
    its SQLite store grew by while the key was seeded (``log_batch``, 1,000 a call)."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    client = MlflowClient(tracking_uri=url)
    experiment = client.create_experiment(f"bench-history-{uuid.uuid4().hex[:8]}")
    run_id = client.create_run(experiment).info.run_id
    before = sqlite_bytes(database)
    for start in range(0, points, 1000):
        metrics = [
            Metric("train/loss", 1.0 / (s + 1), 1_700_000_000_000 + s, s) for s in range(start, start + 1000)
        ]
        client.log_batch(run_id, metrics=metrics)
    grown = sqlite_bytes(database) - before

    def read() -> float:
        started = time.perf_counter()
        history = client.get_metric_history(run_id, "train/loss")
        assert len(history) == points
        return time.perf_counter() - started

    median, _ = median_of(read, 1)
    return median, grown / points


def sqlite_bytes(path: Path) -> int:
    """Size of a SQLite database with its WAL folded in (checkpointed first)."""
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def replay_seconds(curves: Path) -> tuple[float, int]:
    """Wall seconds of ``plateau replay default`` over every run in ``curves`` (a subprocess, start-up
    included), and the runs it reported."""
    started = time.perf_counter()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracker",
            "replay",
            "default",
            "--curves",
            str(curves),
            "--metric",
            "val",
            "--score",
            "val2",
            "--include-incomplete",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    seconds = time.perf_counter() - started
    report = json.loads(out.stdout)
    return seconds, sum(source["runs"] for source in report["sources"].values())
