"""One trainer process of ``bench_load``: threads that each drive a live run with the real SDK, as a
training loop would, and start a new run when the tracker stops theirs (a sweep that keeps its slots full).

    python -m tests.benchmarks._load_trainer OUT URL[,URL...] RUNS SECONDS EXPERIMENT SEED SPOOL_DIR \
        [EVAL_EVERY [FLUSH_INTERVAL]]

Each run logs 10 training keys at 10 steps/s and ``val/acc`` every EVAL_EVERY (10) steps, under ``patience`` +
``checkpoint`` + ``percentile``. After logging ``val/acc`` the loop calls ``should_stop()`` and
``should_checkpoint()`` as the README's loop does; the stop-signal latency is the time from the ``log()``
of the monitored value the stop was decided on to ``should_stop()`` answering True. Runs are spread over
the URLs in turn (replicas). The SDK runs as users run it, with its disk spool (in SPOOL_DIR): what the
tracker does not take in time is spooled, not lost. What it saw is written to OUT as JSON.
"""

from __future__ import annotations

import json
import logging
import math
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import plateau_tracker as plateau

MONITOR = "val/acc"
TRAIN_KEYS = [f"train/k{i}" for i in range(10)]
STEPS_PER_S = 10
RULES: list[dict[str, Any]] = [
    {"rule": "patience", "patience": 5},
    {"rule": "checkpoint"},
    # Keeps the best 90% at each step (prunes the worst tenth): a sweep that prunes a little.
    {"rule": "percentile", "percentile": 90.0, "n_startup_runs": 5, "warmup_evaluations": 5},
]


class _Errors(logging.Handler):
    """Counts the SDK's warnings and errors (a refused batch, a tracker away, a late verdict)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self.first: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        if len(self.first) < 5:
            self.first.append(record.getMessage()[:300])


@dataclass(frozen=True)
class _Cadence:
    eval_every: int = 10
    flush_interval: float | None = None

    def init_options(self) -> dict[str, Any]:
        return {} if self.flush_interval is None else {"flush_interval": self.flush_interval}


@dataclass
class _Seen:
    latencies: list[float] = field(default_factory=list)
    stopped_at: list[float] = field(default_factory=list)  # seconds into the benchmark, per latency
    started: float = field(default_factory=time.perf_counter)
    stops: dict[str, int] = field(default_factory=dict)
    runs: dict[int, int] = field(default_factory=dict)  # run id -> points logged
    steps: int = 0
    lost: int = 0
    uncreated_runs: int = 0
    uncreated_points: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _accuracy(evaluation: int, peak: int, top: float, rng: random.Random) -> float:
    """Rises to ``top`` at evaluation ``peak``, then falls: patience stops it a few evaluations later."""
    if evaluation <= peak:
        return top * (1 - math.exp(-3 * (evaluation + 1) / (peak + 1))) + rng.gauss(0, 0.002)
    return top * (1 - math.exp(-3)) - 0.01 * (evaluation - peak) + rng.gauss(0, 0.002)


def _drive(
    url: str, experiment: str, seed: int, end: float, seen: _Seen, spool_dir: str, cadence: _Cadence
) -> None:
    rng = random.Random(seed)
    while time.monotonic() < end:
        run = plateau.init(
            project="load",
            experiment=experiment,
            url=url,
            monitor=MONITOR,
            mode="max",
            rules=RULES,
            spool_dir=spool_dir,
            **cadence.init_options(),
        )
        # The curve peaks 80-400 steps in, whatever the cadence: 8-40 evaluations every 10 steps, 1-4
        # every 100, so runs of the fleet cadence stop within a benchmark's minutes too.
        peak = max(1, rng.randint(80, 400) // cadence.eval_every)
        top = rng.uniform(0.5, 0.95)
        logged_at: dict[int, float] = {}
        points = 0
        step = 0
        tick = time.monotonic()
        while time.monotonic() < end:
            run.log({key: 1.0 / (step + 1) for key in TRAIN_KEYS}, step=step)
            points += len(TRAIN_KEYS)
            if step % cadence.eval_every == 0:
                logged_at[step] = time.perf_counter()
                run.log({MONITOR: _accuracy(step // cadence.eval_every, peak, top, rng)}, step=step)
                points += 1
                stop = run.should_stop()
                run.should_checkpoint()
                if stop:
                    decided = run.latest
                    answered = time.perf_counter()
                    with seen.lock:
                        seen.latencies.append(answered - logged_at.get(decided.step, answered))
                        seen.stopped_at.append(answered - seen.started)
                        seen.stops[decided.rule or "?"] = seen.stops.get(decided.rule or "?", 0) + 1
                    break
            step += 1
            tick += 1 / STEPS_PER_S
            time.sleep(max(0.0, tick - time.monotonic()))
        lost = run.finish(timeout=60)
        with seen.lock:
            seen.steps += step
            seen.lost += lost
            if run.id is not None:
                seen.runs[run.id] = points
            else:  # the tracker never answered its creation: its points are spooled with it, or lost
                seen.uncreated_runs += 1
                seen.uncreated_points += points


def main(argv: list[str]) -> None:
    out, urls, runs, seconds, experiment, seed, spool_dir = argv[:7]
    rest = [*argv[7:], "", ""]
    cadence = _Cadence(int(rest[0] or 10), float(rest[1]) if rest[1] else None)
    errors = _Errors()
    logging.getLogger("plateau").addHandler(errors)
    seen = _Seen()
    started = time.monotonic()
    end = started + float(seconds)
    addresses = urls.split(",")
    threads = []
    for slot in range(int(runs)):
        # Slots start spread over the first second, as trainers do not all start on one tick.
        thread = threading.Thread(
            target=_drive,
            args=(
                addresses[slot % len(addresses)],
                experiment,
                int(seed) * 100_000 + slot,
                end,
                seen,
                spool_dir,
                cadence,
            ),
            daemon=True,
        )
        threads.append(thread)
        thread.start()
        time.sleep(1.0 / int(runs))
    for thread in threads:
        thread.join()
    Path(out).write_text(
        json.dumps(
            {
                "latencies": seen.latencies,
                "stopped_at": seen.stopped_at,
                "stops": seen.stops,
                "runs": seen.runs,
                "steps": seen.steps,
                "lost": seen.lost,
                "uncreated_runs": seen.uncreated_runs,
                "uncreated_points": seen.uncreated_points,
                "errors": errors.count,
                "first_errors": errors.first,
                "seconds": time.monotonic() - started,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
