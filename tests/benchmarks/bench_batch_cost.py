"""Tracker CPU per batch, in the ingest service itself (no HTTP): a judged evaluation batch under the
default policy (``val/loss``, ``val/acc``, ``lr``, ``train/loss``), and an unjudged training batch of 10
keys, each on the embedded SQLite store with the app's caches as the server holds them.

python -m tests.benchmarks.bench_batch_cost [--batches N]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.db.prepare import prepare_schema
from plateau_tracker.server.schemas.metrics import MetricBatch
from plateau_tracker.server.schemas.runs import RunCreate
from plateau_tracker.server.services import ingest, runs
from plateau_tracker.server.services.keys import KeyCache
from plateau_tracker.server.services.latest_decisions import LatestDecisions
from plateau_tracker.server.services.policies import PolicyCache


def _run(database: Database, policy: dict[str, object] | None) -> int:
    body: dict[str, object] = {"project": "bench", "experiment": "batch-cost", "planned_steps": 1_000_000}
    if policy is not None:
        body["policy"] = policy
    return runs.create_or_join(database, RunCreate.model_validate(body)).id


def cpu_per_batch(database: Database, run_id: int, keys: tuple[str, ...], batches: int) -> float:
    """Median process CPU milliseconds of one batch of ``keys`` at one new step, after a warm-up."""
    key_cache, policies, latest = KeyCache(), PolicyCache(), LatestDecisions()
    times = []
    now = time.time()
    for step in range(batches + 50):
        points = [
            {"key": key, "step": step, "value": 1.0 / (step + 1) + i, "wall_time": now}
            for i, key in enumerate(keys)
        ]
        batch = MetricBatch.model_validate({"batch_id": uuid.uuid4().hex, "points": points})
        started = time.process_time()
        ingest.ingest(database, key_cache, run_id, batch, policies, latest)
        if step >= 50:
            times.append(time.process_time() - started)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=2_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        url = f"sqlite:///{Path(home) / 'plateau.db'}"
        prepare_schema(url)
        database = Database(url)
        try:
            judged = _run(database, {"monitor": "val/loss"})  # the default rules
            unjudged = _run(database, {"monitor": "val/loss"})
            evaluation = ("val/loss", "val/acc", "lr", "train/loss")
            training = tuple(f"train/k{k}" for k in range(10))
            print(f"tracker CPU per batch (median ms, {args.batches} batches, SQLite, in process)")
            for label, run_id, keys in (
                ("judged evaluation batch, default policy", judged, evaluation),
                ("unjudged training batch of 10 keys", unjudged, training),
            ):
                print(f"  {label:42} {cpu_per_batch(database, run_id, keys, args.batches):7.3f}")
        finally:
            database.dispose()


if __name__ == "__main__":
    main()
