"""Cost of ``run.should_stop()`` per call: single process, and under torch.distributed (gloo, 2 ranks,
1 ms of work between calls; the deferred form only starts an all-reduce and reads the previous one).

python -m tests.benchmarks.bench_dist [--calls N]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import sdk
from tests._server import TrackerProcess
from tests.test_distributed import launch


def single_process(url: str, calls: int) -> float:
    run = sdk.init(project="bench", experiment="stop-cost", url=url, monitor="loss")
    times = []
    for _ in range(calls):
        started = time.perf_counter_ns()
        run.should_stop()
        times.append(time.perf_counter_ns() - started)
    run.finish()
    return statistics.median(times) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        server = TrackerProcess(Path(home))
        try:
            single = single_process(server.url, args.calls)
            ranks = launch("stop_cost", 2, server, "--steps", str(args.calls), timeout=600)
        finally:
            server.stop()
    print(f"{'should_stop() per call':40} {'median us':>10}")
    print(f"{'single process (memory read)':40} {single:>10.3f}")
    for r in ranks:
        for mode, value in r["median_us"].items():
            label = f"gloo, 2 ranks, rank {r['rank']}, {mode}"
            print(f"{label:40} {value:>10.1f}")


if __name__ == "__main__":
    main()
