"""Foundation figures: SDK ``log()`` cost, SQLite ingest throughput, stop-signal latency.

    python -m tests.benchmarks.bench_foundation [--json]

Starts its own tracker (``plateau serve``, SQLite in a temporary folder, loopback, one worker). Medians
of several repetitions after a warm-up; the machine is shared and noisy, so read the spread too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import sdk
from sdk._transport import Transport
from tests._server import TrackerProcess


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def bench_log(url: str, keys: int, calls: int = 20_000, repeats: int = 5) -> dict[str, float]:
    """Median ns per ``run.log()`` call, as the median over repeats of (total time / calls)."""
    metrics = {f"train/metric_{i}": 0.5 for i in range(keys)}
    per_call = []
    run = sdk.init(project="bench", experiment="log", url=url, max_pending=10**7)
    step = 0
    for repeat in range(repeats + 1):
        started = time.perf_counter_ns()
        for _ in range(calls):
            run.log(metrics, step=step)
            step += 1
        elapsed = time.perf_counter_ns() - started
        if repeat:  # the first pass is the warm-up
            per_call.append(elapsed / calls)
        run.flush(120)
    run.finish(timeout=120)
    return {"median_ns": statistics.median(per_call), "min_ns": min(per_call), "max_ns": max(per_call)}


def bench_ingest(url: str, batch: int = 1000, batches: int = 200, repeats: int = 3) -> dict[str, float]:
    """Points per second stored, 1,000-point batches posted back to back over one keep-alive client."""
    transport = Transport(url, timeout=60)
    rates = []
    for repeat in range(repeats + 1):
        run = transport.create_run(
            {"project": "bench", "experiment": "ingest", "policy": {"monitor": "val/loss"}}
        )
        payloads = []
        for b in range(batches):
            points = [
                {
                    "key": f"train/k{i % 10}",
                    "step": b * 100 + i // 10,
                    "value": 0.1 * i,
                    "rank": 0,
                    "wall_time": 1.0,
                }
                for i in range(batch)
            ]
            payloads.append(points)
        started = time.perf_counter()
        for points in payloads:
            transport.send_points(run["id"], uuid.uuid4().hex, points)
        elapsed = time.perf_counter() - started
        if repeat:
            rates.append(batch * batches / elapsed)
    transport.close()
    return {"median_points_per_s": statistics.median(rates), "min": min(rates), "max": max(rates)}


def bench_stop_latency(url: str, runs: int = 100) -> dict[str, float]:
    """Seconds from ``log()`` of the value that triggers a stop to ``should_stop()`` returning True."""
    latencies = []
    for _ in range(runs):
        run = sdk.init(
            project="bench",
            experiment="stop",
            url=url,
            monitor="val/loss",
            mode="min",
            rules=[{"rule": "patience", "patience": 1}],
        )
        run.log({"val/loss": 1.0}, step=0)
        run.flush(10)
        started = time.perf_counter()
        run.log({"val/loss": 2.0}, step=1)
        while not run.should_stop():
            if time.perf_counter() - started > 10:
                raise RuntimeError("no stop within 10 s")
            time.sleep(0)
        latencies.append(time.perf_counter() - started)
        run.finish()
    return {
        "p50_ms": 1000 * percentile(latencies, 0.5),
        "p99_ms": 1000 * percentile(latencies, 0.99),
        "max_ms": 1000 * max(latencies),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        server = TrackerProcess(Path(home))
        try:
            results: dict[str, Any] = {
                "log_one_key": bench_log(server.url, 1),
                "log_ten_keys": bench_log(server.url, 10),
                "ingest_sqlite_1_worker": bench_ingest(server.url),
                "stop_signal_latency": bench_stop_latency(server.url),
            }
        finally:
            server.stop()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'figure':32} {'median':>14}  spread")
    for name, figure in results.items():
        (unit, value), *rest = figure.items()
        spread = ", ".join(f"{k}={v:,.1f}" for k, v in rest)
        print(f"{name:32} {value:>14,.1f}  {unit}; {spread}")


if __name__ == "__main__":
    main()
