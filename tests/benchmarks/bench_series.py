"""Time for the tracker to serve a 1,000,000-point run downsampled to 2,000 points (SQLite, loopback).

python -m tests.benchmarks.bench_series [--points N] [--repeats R]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from tests._server import TrackerProcess


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        server = TrackerProcess(Path(home))
        try:
            with httpx.Client(base_url=server.url, timeout=120) as http:
                run = http.post("/api/v1/runs", json={"project": "bench", "experiment": "series"}).json()
                started = time.perf_counter()
                for start in range(0, args.points, 10_000):
                    points = [
                        {"key": "train/loss", "step": s, "value": 1.0 / (s + 1), "wall_time": float(s)}
                        for s in range(start, min(args.points, start + 10_000))
                    ]
                    http.post(
                        f"/api/v1/runs/{run['id']}/metrics", json={"batch_id": str(start), "points": points}
                    )
                seeded = time.perf_counter() - started
                times = []
                for _ in range(args.repeats + 1):
                    t0 = time.perf_counter()
                    page = http.get(
                        f"/api/v1/runs/{run['id']}/series", params={"key": "train/loss", "points": 2000}
                    )
                    times.append(time.perf_counter() - t0)
                    assert page.status_code == 200
                    assert len(page.json()["points"]) <= 2000
        finally:
            server.stop()
    warm = times[1:]
    print(f"seeded {args.points:,} points in {seeded:.1f}s")
    print(
        f"downsampled to 2,000 points: median {1000 * statistics.median(warm):.0f} ms "
        f"(min {1000 * min(warm):.0f}, max {1000 * max(warm):.0f}, {args.repeats} requests after one warm-up)"
    )


if __name__ == "__main__":
    main()
