"""Figures seen from the training loop: ``log()`` cost, stop-signal latency, SDK memory."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import plateau_tracker as plateau
from tests.benchmarks._report import median_of, percentile


def plateau_log_ns(url: str, keys: int, calls: int = 20_000, repeats: int = 5) -> float:
    """Median over repeats of ns per ``run.log()`` call, the background sender running as in training."""
    metrics = {f"train/metric_{i}": 0.5 for i in range(keys)}
    run = plateau.init(project="bench", experiment="log", url=url, max_pending=10**7)
    step = 0

    def one_repeat() -> float:
        nonlocal step
        started = time.perf_counter_ns()
        for _ in range(calls):
            run.log(metrics, step=step)
            step += 1
        elapsed = time.perf_counter_ns() - started
        run.flush(120)
        return elapsed / calls

    median, _ = median_of(one_repeat, repeats)
    run.finish(timeout=120)
    return median


def tensorboard_add_scalar_ns(logdir: Path, keys: int, calls: int = 20_000, repeats: int = 5) -> float:
    """Median ns per training step of ``SummaryWriter.add_scalar`` (``keys`` calls per step)."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(logdir))
    step = 0

    def one_repeat() -> float:
        nonlocal step
        started = time.perf_counter_ns()
        for _ in range(calls):
            for i in range(keys):
                writer.add_scalar(f"train/metric_{i}", 0.5, step)
            step += 1
        elapsed = time.perf_counter_ns() - started
        writer.flush()
        return elapsed / calls

    median, _ = median_of(one_repeat, repeats)
    writer.close()
    return median


def mlflow_log_metric_ns(url: str, keys: int, calls: int = 1_000, repeats: int = 3) -> float:
    """Median ns per step of ``mlflow.log_metric(..., synchronous=False)`` (``log_metrics`` for many
    keys), against a real MLflow server; its queue is drained between repeats, outside the timing."""
    import mlflow

    mlflow.set_tracking_uri(url)
    mlflow.set_experiment("bench-log")
    metrics = {f"train/metric_{i}": 0.5 for i in range(keys)}
    step = 0
    with mlflow.start_run():

        def one_repeat() -> float:
            nonlocal step
            started = time.perf_counter_ns()
            for _ in range(calls):
                if keys == 1:
                    mlflow.log_metric("train/metric_0", 0.5, step=step, synchronous=False)
                else:
                    mlflow.log_metrics(metrics, step=step, synchronous=False)
                step += 1
            elapsed = time.perf_counter_ns() - started
            mlflow.flush_async_logging()
            return elapsed / calls

        median, _ = median_of(one_repeat, repeats)
    return median


def stop_latency_ms(url: str, runs: int = 100) -> tuple[float, float]:
    """p50 and p99 ms from ``log()`` of the value that triggers a stop to ``should_stop()`` being True."""
    latencies = []
    for _ in range(runs):
        run = plateau.init(
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
    return 1000 * percentile(latencies, 0.5), 1000 * percentile(latencies, 0.99)


# The spellings of the default's companion series (rate, validation and training loss) that other trainers
# on a shared tracker log: the judged batches of the runs measured must not pay for them.
OTHER_TRAINERS_KEYS = [
    *("loss", "learning_rate", "train_loss", "eval_loss", "val_loss", "valid_loss", "training_loss"),
    *("train_loss_epoch", "val/nll", "train/nll", "train_lr", "validation/loss", "eval/loss", "valid/loss"),
]


def default_verdict_ms(url: str, runs: int = 20, evaluations: int = 30) -> tuple[float, float]:
    """p50 and p99 ms from ``log()`` of an evaluation to ``should_stop()`` answering, under the default
    policy, in a tracker where another run has logged the common spellings of the default's companion
    series: each evaluation logs ``val/acc`` and ``val/loss``, after the rate and training loss in a batch
    of their own, as a loop that logs the rate at its training steps sends them."""
    other = plateau.init(
        project="bench", experiment="others", url=url, monitor="m", mode="min", planned_steps=1
    )
    other.log(dict.fromkeys(OTHER_TRAINERS_KEYS, 1.0), step=0)
    other.finish()
    latencies = []
    for _ in range(runs):
        run = plateau.init(
            project="bench", experiment="default", url=url, monitor="val/acc", planned_steps=1000
        )
        for epoch in range(evaluations):
            run.log({"lr": 0.1, "train/loss": 1.0 / (epoch + 1)}, step=epoch)
            run.flush(10)
            started = time.perf_counter()
            run.log({"val/acc": 0.5 + 0.01 * epoch, "val/loss": 1.0 / (epoch + 1)}, step=epoch)
            run.should_stop()
            latencies.append(time.perf_counter() - started)
        run.finish()
    return 1000 * percentile(latencies, 0.5), 1000 * percentile(latencies, 0.99)


_MEMORY_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    import torch  # the baseline is an interpreter that has torch imported already

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    before = rss()
    import plateau_tracker as plateau
    runs = [
        plateau.init(project="bench", experiment="memory", url=sys.argv[1], monitor="val/loss", mode="min")
        for _ in range(int(sys.argv[2]))
    ]
    for step in range(100):
        for run in runs:
            run.log({f"train/k{i}": 1.0 / (step + 1) for i in range(10)}, step=step)
    for run in runs:
        run.flush(60)
    live = rss()
    print(json.dumps({"before": before, "live": live}))
    sys.stdout.flush()
    time.sleep(float(sys.argv[3]))
    for run in runs:
        run.finish(timeout=30)
    """
)


def memory_with_live_runs(url: str, tracker_pid: int, runs: int = 100) -> tuple[float, float]:
    """SDK resident MB over a bare interpreter with torch imported, and the tracker's resident MB, while
    ``runs`` runs are live (each has logged 100 steps of 10 keys and is still open)."""
    child = subprocess.Popen(
        [sys.executable, "-c", _MEMORY_SCRIPT, url, str(runs), "5"], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    figures = json.loads(child.stdout.readline())
    tracker_rss = rss_of(tracker_pid)
    child.wait(timeout=300)
    return (figures["live"] - figures["before"]) / 2**20, tracker_rss / 2**20


def rss_of(pid: int) -> int:
    """A process's resident memory in bytes (Linux's /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def sdk_delivery_rate(url: str, steps: int = 100_000, keys: int = 10, repeats: int = 3) -> float:
    """Points per second from ``log()`` to stored on the tracker, one process: a loop that does no work
    logs ``steps`` steps of ``keys`` keys, and the clock stops when ``flush()`` says the tracker has
    acknowledged every point (the median of ``repeats`` runs after a warm-up)."""
    names = [f"k{i}" for i in range(keys)]

    def once() -> float:
        run = plateau.init(project="bench", experiment="delivery", url=url, spool=False)
        values = dict.fromkeys(names, 0.5)
        started = time.perf_counter()
        for step in range(steps):
            run.log(values, step=step)
        delivered = run.flush(600)
        took = time.perf_counter() - started
        run.finish()
        assert delivered, "the tracker did not take every point within 600 s"
        return steps * keys / took

    return median_of(once, repeats)[0]
