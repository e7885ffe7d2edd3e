"""Cost of ``run.should_stop()`` per call: single process (a memory read; right after ``log()`` of the
monitored metric, online, where it waits for that step's verdict, and offline, where it must not wait),
and under torch.distributed (gloo, 2 ranks, 1 ms of work between calls; the deferred form only starts an
all-reduce and reads the previous one).

python -m tests.benchmarks.bench_dist [--calls N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import plateau_tracker as plateau
from tests._server import TrackerProcess, free_port
from tests.test_distributed import launch


def single_process(url: str, calls: int) -> float:
    """A call with no new monitored value since the last: a memory read."""
    run = plateau.init(project="bench", experiment="stop-cost", url=url, monitor="loss")
    times = []
    for _ in range(calls):
        started = time.perf_counter_ns()
        run.should_stop()
        times.append(time.perf_counter_ns() - started)
    run.finish()
    return statistics.median(times) / 1000


def after_monitored_log(url: str, calls: int, *, wait: float = 5.0) -> tuple[float, float]:
    """A call right after ``log()`` of the monitored metric (the Quickstart loop with no work per epoch):
    median microseconds of ``should_stop()`` alone, and of the whole log + should_stop + should_checkpoint
    step. Online, the call waits for the verdict on that step; offline (``url`` with nothing listening),
    it must not wait at all. The policy never stops (patience beyond ``calls``)."""
    rules = [{"rule": "patience", "patience": calls + 10}, {"rule": "checkpoint"}]
    run = plateau.init(
        project="bench", experiment="stop-exact", url=url, monitor="loss", rules=rules, wait=wait
    )
    stop_times, step_times = [], []
    for step in range(calls):
        started = time.perf_counter_ns()
        run.log({"loss": 1.0 / (step + 1)}, step=step)
        logged = time.perf_counter_ns()
        run.should_stop()
        stop_times.append(time.perf_counter_ns() - logged)
        run.should_checkpoint()
        step_times.append(time.perf_counter_ns() - started)
    run.finish(timeout=0.5)
    return statistics.median(stop_times) / 1000, statistics.median(step_times) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--single-only", action="store_true", help="skip the gloo figures")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ["PLATEAU_HOME"] = home  # the offline run's spool
        server = TrackerProcess(Path(home))
        try:
            single = single_process(server.url, args.calls)
            online = after_monitored_log(server.url, args.calls)
            offline = after_monitored_log(f"http://127.0.0.1:{free_port()}", args.calls, wait=0.1)
            ranks = [] if args.single_only else launch("stop_cost", 2, server, "--steps", str(args.calls))
        finally:
            server.stop()
    print(f"{'should_stop() per call':52} {'median us':>10}")
    print(f"{'single process, no new monitored value (memory read)':52} {single:>10.3f}")
    print(f"{'single process, after log() of the monitor, online':52} {online[0]:>10.1f}")
    print(f"{'  the whole step: log + should_stop + should_checkpoint':52} {online[1]:>10.1f}")
    print(f"{'single process, after log() of the monitor, offline':52} {offline[0]:>10.3f}")
    print(f"{'  the whole step: log + should_stop + should_checkpoint':52} {offline[1]:>10.3f}")
    for r in ranks:
        for mode, value in r["median_us"].items():
            label = f"gloo, 2 ranks, rank {r['rank']}, {mode}"
            print(f"{label:52} {value:>10.1f}")


if __name__ == "__main__":
    main()
