"""Issue 22's load benchmark: many live runs driven by trainer processes through the real SDK.

    python -m tests.benchmarks.bench_load [--targets sqlite,postgres,replicas] [--seconds 60]
        [--sqlite-runs 1000] [--postgres-runs 2000] [--replica-runs 1000] [--processes 4]
        [--eval-every 10] [--flush-interval S] [--workers 4] [--postgres-url URL] [--json]

Targets: one ``plateau serve`` worker on SQLite; ``--workers`` (4) on one PostgreSQL; two ``plateau serve``
replicas on one PostgreSQL with the trainers' runs spread across them. In each, every run logs 10
training keys at 10 steps/s and ``val/acc`` every 10 steps under ``patience`` + ``checkpoint`` +
``percentile`` (:mod:`tests.benchmarks._load_trainer`); a run the tracker stops is finished and its slot
starts a new one. Reported, per target:

- points/s stored (read back from the database), against the points/s offered (runs x 110);
- steps/s the loops kept, against the 10/s each asks for (a loop held up by the tracker falls behind);
- stop-signal latency, ``log()`` of the monitored value to ``should_stop()`` True, p50 and p99;
- with replicas, cross-replica stop-signal latency: a stop decided through one replica, a long-poll
  waiting for it on the other, measured while the load runs, p50 and p99;
- tracker CPU seconds per million points stored (every process of the tracker, from /proc);
- on PostgreSQL, database transactions per idle long-poll per second of waiting (``pg_stat_database``,
  on the quiet tracker after the load: :func:`_idle_long_poll_queries`);
- the SDK's errors (warnings logged), points spooled (the tracker did not take them in time: they wait
  on disk for ``plateau sync``), and points lost (logged, and neither stored nor spooled).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text

from plateau_tracker._spool import spooled_points
from plateau_tracker.server.db.migrate import upgrade
from tests._cross_replica import stop_seen_on_other
from tests._server import TrackerProcess
from tests.benchmarks._report import Figure, percentile, table
from tests.conftest import scratch_postgres

DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
STEPS_PER_S = 10


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and every live descendant (uvicorn's workers), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    total, stack = 0.0, [pid]
    while stack:
        current = stack.pop()
        total += times.get(current, 0.0)
        stack += [child for child, parent in parents.items() if parent == current]
    return total


def _rows(database_url: str, sql: str) -> list[Any]:
    """One read of the tracker's database, on a connection of its own."""
    engine = create_engine(database_url)
    with engine.connect() as connection:
        rows = list(connection.execute(text(sql)).all())
    engine.dispose()
    return rows


def _stored_points(database_url: str) -> dict[int, int]:
    rows = _rows(database_url, "SELECT run_id, SUM(points) FROM metric_block GROUP BY run_id")
    return {int(run_id): int(points) for run_id, points in rows}


def _batches(database_url: str) -> int:
    """Ingest requests the tracker applied (one ``ingest_batch`` row each)."""
    return int(_rows(database_url, "SELECT COUNT(*) FROM ingest_batch")[0][0])


@dataclass(frozen=True)
class Cadence:
    """How each run logs: the monitored metric every ``eval_every`` steps (10 training keys at every step),
    and the SDK's ``flush_interval`` (None: its default), how long training-only keys wait to be sent."""

    eval_every: int = 10
    flush_interval: float | None = None

    def points_per_step(self) -> float:
        return 10 + 1 / self.eval_every


def _trainers(
    urls: list[str], runs: int, processes: int, seconds: float, folder: Path, cadence: Cadence
) -> list[dict[str, Any]]:
    experiment = f"load-{uuid.uuid4().hex[:8]}"
    children = []
    for index in range(processes):
        share = runs // processes + (1 if index < runs % processes else 0)
        out = folder / f"trainer-{index}.json"
        command = [sys.executable, "-m", "tests.benchmarks._load_trainer", str(out), ",".join(urls)]
        command += [str(share), str(seconds), experiment, str(index), str(folder / "spool")]
        command += [str(cadence.eval_every), str(cadence.flush_interval or "")]
        children.append((subprocess.Popen(command), out))
    seen = []
    for child, out in children:
        child.wait(timeout=seconds + 600)
        seen.append(json.loads(out.read_text()))
    return seen


def _cross_replica_probe(a: str, b: str, stop: threading.Event, latencies: list[float]) -> None:
    """While the load runs: a stop decided through ``a`` and a long-poll on ``b`` waiting for it."""
    with httpx.Client(base_url=a, timeout=60) as writer, httpx.Client(base_url=b, timeout=60) as reader:
        while not stop.is_set():
            latency, decision = stop_seen_on_other(writer, reader, "load-probe")
            if decision.get("action") == "stop":
                latencies.append(latency)
            stop.wait(0.5)


def _transactions(database_url: str) -> int:
    sql = "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
    return int(_rows(database_url, sql)[0][0])


def _idle_long_poll_queries(url: str, database_url: str, polls: int = 50) -> float:
    """Database transactions per idle long-poll per second of waiting: ``polls`` long-polls on runs that
    get no points, waiting 12 s and waiting 2 s; the difference, less the quiet tracker's own over the
    same 10 s, is what waiting costs (opening and answering a long-poll cost the same in both). Each
    count is read 11 s after its window: PostgreSQL publishes a backend's counters once it has been idle
    10 s (``PGSTAT_IDLE_INTERVAL``)."""
    with httpx.Client(base_url=url, timeout=60) as http:
        ids = [
            http.post("/api/v1/runs", json={"project": "load", "experiment": "idle"}).json()["id"]
            for _ in range(polls)
        ]

        def window(seconds: float, *, waiting: bool) -> int:
            before = _transactions(database_url)
            if waiting:
                with ThreadPoolExecutor(polls) as pool:
                    wait = {"step": 0, "wait": seconds}
                    list(
                        pool.map(lambda run_id: http.get(f"/api/v1/runs/{run_id}/decision", params=wait), ids)
                    )
            else:
                time.sleep(seconds)
            time.sleep(11)
            return _transactions(database_url) - before

        quiet = window(12, waiting=False) - window(2, waiting=False)
        waited = window(12, waiting=True) - window(2, waiting=True)
    return max(0, waited - quiet) / (polls * 10)


def _target(
    name: str,
    servers: list[TrackerProcess],
    database_url: str,
    runs: int,
    processes: int,
    seconds: float,
    folder: Path,
    cadence: Cadence,
) -> dict[str, Any]:
    urls = [server.url for server in servers]
    probe_latencies: list[float] = []
    probe_stop = threading.Event()
    probe = None
    if len(urls) > 1:
        probe = threading.Thread(
            target=_cross_replica_probe, args=(urls[0], urls[1], probe_stop, probe_latencies), daemon=True
        )
    cpu_before = sum(tree_cpu_seconds(server.process.pid) for server in servers)
    stored_before = sum(_stored_points(database_url).values())
    batches_before = _batches(database_url)
    started = time.monotonic()
    if probe is not None:
        probe.start()
    seen = _trainers(urls, runs, processes, seconds, folder / name, cadence)
    elapsed = time.monotonic() - started
    probe_stop.set()
    if probe is not None:
        probe.join(timeout=60)
    cpu = sum(tree_cpu_seconds(server.process.pid) for server in servers) - cpu_before
    stored = _stored_points(database_url)
    logged = {run_id: points for trainer in seen for run_id, points in trainer["runs"].items()}
    # What waits in the spool for `plateau sync`, read from the disk (the SDK's counters aside).
    spooled = spooled_points(sorted((folder / name / "spool").glob("*/b-*.json")))
    # Logged and neither stored nor in the spool (for `plateau sync`): lost.
    missing = sum(max(0, points - stored.get(int(run_id), 0)) for run_id, points in logged.items())
    # Runs whose creation the tracker never answered: their points can only be in the spool (which holds
    # the creation too, for `plateau sync`) or lost.
    missing += sum(t["uncreated_points"] for t in seen)
    lost = max(0, missing - spooled)
    stored_total = sum(stored.values()) - stored_before
    batches = _batches(database_url) - batches_before
    latencies = [latency for trainer in seen for latency in trainer["latencies"]]
    # The second half of the run, once the slots' first runs (all created in the first second) have given
    # way to a steady churn: a fleet's trainers do not all start at once.
    settled = [
        latency
        for trainer in seen
        for latency, at in zip(trainer["latencies"], trainer["stopped_at"], strict=True)
        if at >= elapsed / 2
    ]
    stops: dict[str, int] = {}
    for trainer in seen:
        for rule, count in trainer["stops"].items():
            stops[rule] = stops.get(rule, 0) + count
    result: dict[str, Any] = {
        "target": name,
        "live_runs": runs,
        "runs_driven": len(logged),
        "runs_never_created": sum(t["uncreated_runs"] for t in seen),
        "seconds": round(elapsed, 1),
        "eval_every": cadence.eval_every,
        "flush_interval": cadence.flush_interval,
        "workers": len(servers) if len(servers) > 1 else servers[0].workers,
        "points_per_s_offered": round(runs * STEPS_PER_S * cadence.points_per_step()),
        "points_per_s_stored": round(stored_total / elapsed),
        "steps_per_s_per_run": round(sum(t["steps"] for t in seen) / runs / elapsed, 2),
        "stops": stops,
        "stop_latency_ms_p50": round(1000 * percentile(latencies, 0.5), 1) if latencies else None,
        "stop_latency_ms_p99": round(1000 * percentile(latencies, 0.99), 1) if latencies else None,
        "stop_latency_ms_p99_second_half": round(1000 * percentile(settled, 0.99), 1) if settled else None,
        "tracker_cpu_s_per_million_points": round(cpu / max(stored_total, 1) * 1e6, 2),
        # Where the time goes: run batches (one ingest_batch row each, whether it came alone or carried).
        "ingest_batches_per_s": round(batches / elapsed),
        "tracker_cpu_ms_per_batch": round(1000 * cpu / max(batches, 1), 3),
        "tracker_cpu_share": round(cpu / elapsed, 2),
        "sdk_errors": sum(t["errors"] for t in seen),
        "first_errors": [message for t in seen for message in t["first_errors"]][:5],
        "points_spooled": spooled,
        # Read back: logged, and neither stored nor spooled (a run never created counts whole). The SDK's
        # own count (what finish() returned) is beside it, not added to it: those points are among these.
        "points_lost": lost,
        "points_lost_by_sdk_count": sum(t["lost"] for t in seen),
    }
    if probe_latencies:
        result["cross_replica_ms_p50"] = round(1000 * percentile(probe_latencies, 0.5), 1)
        result["cross_replica_ms_p99"] = round(1000 * percentile(probe_latencies, 0.99), 1)
        result["cross_replica_probes"] = len(probe_latencies)
    if not database_url.startswith("sqlite"):
        result["queries_per_idle_long_poll_per_s"] = round(_idle_long_poll_queries(urls[0], database_url), 4)
    return result


def _with_postgres(admin_url: str, work: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    with scratch_postgres(admin_url) as url:
        upgrade(url)
        return work(url)


_LABELS = {
    "sqlite": "SQLite, 1 worker",
    "postgres": "PostgreSQL, {workers} workers",
    "replicas": "2 replicas on PostgreSQL",
}


def figures(results: list[dict[str, Any]]) -> list[Figure]:
    """The suite's section 11: each target's figures beside issue 22's targets."""
    out = []
    for r in results:
        store = _LABELS[r["target"]].format(workers=r["workers"])
        label = f"load, {store}, {r['live_runs']:,} live runs, monitored every {r['eval_every']} steps"
        floor = 0.95 * r["points_per_s_offered"]
        p50, p99 = r["stop_latency_ms_p50"], r["stop_latency_ms_p99"]
        out += [
            Figure(
                "11",
                f"{label}: points/s stored ({r['points_per_s_offered']:,} offered; loops kept "
                f"{r['steps_per_s_per_run']} of 10 steps/s)",
                r["points_per_s_stored"],
                "points/s",
                f">= {floor:,.0f} (sustained)",
                r["points_per_s_stored"] >= floor,
            ),
            Figure("11", f"{label}: stop-signal latency p50", p50, "ms"),
            Figure(
                "11",
                f"{label}: stop-signal latency p99 in the run's second half (the start's storm passed)",
                r["stop_latency_ms_p99_second_half"],
                "ms",
            ),
            Figure(
                "11",
                f"{label}: stop-signal latency p99 ({sum(r['stops'].values())} stops)",
                p99,
                "ms",
                "<= 50 ms",
                p99 is not None and p99 <= 50,
            ),
            Figure(
                "11",
                f"{label}: SDK errors + points lost ({r['points_spooled']:,} spooled for plateau sync)",
                r["sdk_errors"] + r["points_lost"],
                "",
                "0",
                r["sdk_errors"] + r["points_lost"] == 0,
            ),
            Figure(
                "11", f"{label}: tracker CPU per million points", r["tracker_cpu_s_per_million_points"], "s"
            ),
            Figure(
                "11",
                f"{label}: tracker CPU per ingest batch ({r['ingest_batches_per_s']:,} batches/s)",
                r["tracker_cpu_ms_per_batch"],
                "ms",
            ),
            Figure(
                "11",
                f"{label}: tracker CPU, every process of it",
                r["tracker_cpu_share"],
                "cores",
                f"<= {r['workers']} (1 a worker)",
                r["tracker_cpu_share"] <= r["workers"],
            ),
        ]
        if "cross_replica_ms_p99" in r:
            out += [
                Figure(
                    "11", f"{label}: cross-replica stop-signal latency p50", r["cross_replica_ms_p50"], "ms"
                ),
                Figure(
                    "11",
                    f"{label}: cross-replica stop-signal latency p99 ({r['cross_replica_probes']} probes)",
                    r["cross_replica_ms_p99"],
                    "ms",
                    "<= 20 ms",
                    r["cross_replica_ms_p99"] <= 20,
                ),
            ]
        if "queries_per_idle_long_poll_per_s" in r:
            idle = r["queries_per_idle_long_poll_per_s"]
            out.append(
                Figure("11", f"{label}: database queries per idle long-poll per s", idle, "", "0", idle == 0)
            )
    return out


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every target ``args.targets`` names (see :func:`parser`), one after the other."""
    results = []
    cadence = Cadence(eval_every=args.eval_every, flush_interval=args.flush_interval)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(args.keep) if args.keep else Path(scratch)
        for target in args.targets.split(","):
            (folder / target).mkdir()
            if target == "sqlite":
                server = TrackerProcess(folder / "home-sqlite")
                try:
                    url = f"sqlite:///{folder / 'home-sqlite' / 'plateau.db'}"
                    results.append(
                        _target(
                            "sqlite",
                            [server],
                            url,
                            args.sqlite_runs,
                            args.processes,
                            args.seconds,
                            folder,
                            cadence,
                        )
                    )
                finally:
                    server.stop()
            elif target in ("postgres", "replicas"):

                def on_postgres(url: str, target: str = target) -> dict[str, Any]:
                    if target == "postgres":
                        servers = [TrackerProcess(folder / "home-pg", database_url=url, workers=args.workers)]
                        runs = args.postgres_runs
                    else:
                        servers = [
                            TrackerProcess(folder / f"home-replica-{i}", database_url=url) for i in range(2)
                        ]
                        runs = args.replica_runs
                    try:
                        return _target(
                            target, servers, url, runs, args.processes, args.seconds, folder, cadence
                        )
                    finally:
                        for server in servers:
                            server.stop()

                results.append(_with_postgres(args.postgres_url, on_postgres))
            else:
                raise SystemExit(f"unknown target {target!r}: sqlite, postgres or replicas")
            print(json.dumps(results[-1]) if args.json else _line(results[-1]), flush=True)
    return results


def _line(result: dict[str, Any]) -> str:
    return "  ".join(f"{key}={value}" for key, value in result.items())


def parser() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    options.add_argument("--targets", default="sqlite,postgres,replicas")
    options.add_argument("--seconds", type=float, default=60.0)
    options.add_argument("--sqlite-runs", type=int, default=1000)
    options.add_argument("--postgres-runs", type=int, default=2000)
    options.add_argument("--replica-runs", type=int, default=1000)
    options.add_argument("--processes", type=int, default=4, help="trainer processes")
    options.add_argument(
        "--eval-every", type=int, default=10, help="steps between monitored evaluations (10 steps/s)"
    )
    options.add_argument(
        "--flush-interval",
        type=float,
        help="the SDK's flush_interval: how long training-only keys wait to be sent (default: the SDK's)",
    )
    options.add_argument("--workers", type=int, default=4, help="uvicorn workers of the PostgreSQL target")
    options.add_argument(
        "--postgres-url", default=os.environ.get("PLATEAU_TEST_POSTGRES_URL", DEFAULT_POSTGRES)
    )
    options.add_argument("--json", action="store_true")
    options.add_argument("--keep", help="a folder to keep the trackers' homes and logs in")
    return options


def main() -> None:
    args = parser().parse_args()
    results = run(args)
    if not args.json:
        print(table(figures(results)))


if __name__ == "__main__":
    main()
