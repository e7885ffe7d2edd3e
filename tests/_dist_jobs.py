"""Jobs run by the distributed tests, one process per rank (``python -m tests._dist_jobs JOB ...``).

Real processes, gloo backend, the real SDK against a real tracker. Each prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import plateau_tracker as plateau
from plateau_tracker.distributed import StepTimer
from plateau_tracker.staleness import StalenessMonitor, VersionCounter


def init_group(args: argparse.Namespace) -> None:
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{args.port}",
        rank=args.rank,
        world_size=args.world,
        timeout=timedelta(seconds=30),
    )


def straggler(args: argparse.Namespace) -> dict:
    """DDP training where rank ``args.slow`` sleeps ``args.delay_ms`` extra per step."""
    init_group(args)
    torch.manual_seed(0)
    # Big enough for several gradient buckets (DDP's first bucket holds up to 1 MB).
    layers = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    model = nn.parallel.DistributedDataParallel(layers, bucket_cap_mb=0.5)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    run = plateau.init(
        project="dist",
        experiment="straggler",
        url=args.url,
        run_key=args.key,
        monitor="loss",
        rules=[{"rule": "straggler", "bound": 0.75, "reports": 5, "warmup": 10}],
    )
    timer = StepTimer(run, every=10)
    timer.wrap_ddp(model)
    x, y = torch.randn(64, 512), torch.randint(0, 10, (64,))
    figures = []
    for step in range(args.steps):
        with timer.step(step):
            loss = nn.functional.cross_entropy(model(x), y)
            if args.rank == args.slow:
                time.sleep(args.delay_ms / 1000)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if timer.last_figures and (step + 1) % timer.every == 0:
            figures += timer.last_figures
        run.log({"loss": loss.item()}, step=step)
    run.finish()
    dist.destroy_process_group()
    warm = figures[len(figures) // 4 :]  # drop the first window (start-up)
    return {
        "rank": args.rank,
        "run_id": run.id,
        "sync_wait_ms": [statistics.median(f["sync_wait_ms"][r] for f in warm) for r in range(args.world)],
        "comm_ms": [statistics.median(f["comm_ms"][r] for f in warm) for r in range(args.world)],
        "rel_perf": [statistics.median(f["rel_perf"][r] for f in warm) for r in range(args.world)],
        "step_time_ms": [statistics.median(f["step_time_ms"][r] for f in warm) for r in range(args.world)],
        "collectives": warm[-1]["collectives"],
    }


def agreed_stop(args: argparse.Namespace) -> dict:
    """Only rank ``args.trigger``'s local metric crosses the threshold; every rank must leave together."""
    init_group(args)
    run = plateau.init(
        project="dist",
        experiment="stop",
        url=args.url,
        run_key=args.key,
        monitor="local/flag",
        mode="max",
        reduce="max",
        rules=[{"rule": "threshold", "stop_at": 1.0}],
    )
    exit_step = None
    for step in range(args.steps):
        flag = 1.0 if (args.rank == args.trigger and step >= 5) else 0.0
        run.log({"local/flag": flag}, step=step)
        time.sleep(0.01)  # the training step
        if run.should_stop(deferred=args.deferred):
            exit_step = step
            break
    dist.barrier()  # would hang (and time out) if a rank had left alone
    run.finish()
    dist.destroy_process_group()
    return {
        "rank": args.rank,
        "exit_step": exit_step,
        "run_id": run.id,
        "reason": run.latest.reason if run.latest.stop else None,
    }


def stop_cost(args: argparse.Namespace) -> dict:
    """Median cost of one distributed should_stop() call (an all-reduce MAX of one int), with 1 ms of
    work between calls as in a training loop."""
    init_group(args)
    run = plateau.init(project="dist", experiment="cost", url=args.url, run_key=args.key, monitor="loss")
    for deferred in (False, True):
        for _ in range(100):
            run.should_stop(deferred=deferred)
    results = {}
    for deferred in (False, True):
        times = []
        for _ in range(args.steps):
            time.sleep(0.001)  # the training step between two calls
            started = time.perf_counter_ns()
            run.should_stop(deferred=deferred)
            times.append(time.perf_counter_ns() - started)
        results["deferred" if deferred else "blocking"] = statistics.median(times) / 1000
    run.finish()
    dist.destroy_process_group()
    return {"rank": args.rank, "median_us": results}


def _hogwild_worker(
    worker: int,
    model: nn.Module,
    counter_value,
    barrier,
    url: str,
    key: str,
    slow: int,
    seconds: float,
    delay_ms: float,
) -> None:
    torch.manual_seed(worker)
    run = plateau.init(
        project="dist",
        experiment="hogwild",
        url=url,
        run_key=key,
        rank=worker,
        world_size=3,
        monitor="loss",
        rules=[{"rule": "staleness", "bound": 8}],
    )
    monitor = StalenessMonitor(run, VersionCounter(counter_value), bound=8, report_every=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 16), torch.randn(32, 1)
    barrier.wait()  # start together: process start-up takes longer than the whole job
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        version = monitor.begin()
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        time.sleep((delay_ms if worker == slow else 1.0) / 1000)
        monitor.apply(version, optimizer.step)
    run.finish()


def hogwild(args: argparse.Namespace) -> dict:
    """Three Hogwild workers on one shared model, one of them slow; staleness per worker."""
    context = mp.get_context("spawn")
    model = nn.Linear(16, 1)
    model.share_memory()
    counter = context.Value("q", 0)
    barrier = context.Barrier(3)
    workers = [
        context.Process(
            target=_hogwild_worker,
            args=(w, model, counter, barrier, args.url, args.key, args.slow, args.seconds, args.delay_ms),
        )
        for w in range(3)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    return {"exit_codes": [w.exitcode for w in workers], "version": counter.value}


JOBS = {"straggler": straggler, "agreed_stop": agreed_stop, "stop_cost": stop_cost, "hogwild": hogwild}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("job", choices=sorted(JOBS))
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--url", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--slow", type=int, default=-1)
    parser.add_argument("--trigger", type=int, default=1)
    parser.add_argument("--delay-ms", type=float, default=30.0)
    parser.add_argument("--deferred", action="store_true")
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(json.dumps(JOBS[args.job](args)), flush=True)


if __name__ == "__main__":
    main()
