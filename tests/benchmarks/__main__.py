"""Plateau's performance suite, side by side with MLflow and TensorBoard where they are installed.

    python -m tests.benchmarks [--json] [--only SECTION ...] [--postgres-url URL] [--curves PATH]

Sections (``--only`` takes their numbers): 1 ``log()`` cost; 2 ingest throughput (and the SDK's delivery
rate, ``log()`` to stored, beside it); 3 keep-alive round trip;
4 stop-signal latency (and the verdict of an evaluation under the default policy); 5 policy engine;
6 history of a 1,000,000-point run; 7 storage and memory;
8 replay of the OPDA curves; 9 a 10,000,000-point series (issue 22: downsampled view, full read, bytes per
point); 10 an experiment of 10,000 finished runs (issue 22: the runs list's first page, and a monitored
evaluation under ``percentile`` and ``asha`` at 100 and at 10,000 finished runs; ~4 min); 11 load
(``bench_load`` with its defaults: 1,000 live runs on SQLite, 2,000 on 4 PostgreSQL workers, 1,000 across two
replicas, each for 60 s; ~8 min). Every tracker
here is a real ``plateau serve`` on a loopback port (SQLite in a temporary folder unless it says
PostgreSQL); every figure is a median after a warm-up. The peers
(``pip install -e '.[bench]'``) run in the same process tree at the same time: an ``mlflow server`` on
SQLite with one worker, and PyTorch's TensorBoard ``SummaryWriter``. A missing peer is skipped and said.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout, suppress
from pathlib import Path

from plateau_tracker.server.db.migrate import upgrade
from tests._server import TrackerProcess
from tests.benchmarks import _client_side as client
from tests.benchmarks import _scale as scale
from tests.benchmarks import _tracker_side as tracker
from tests.benchmarks import bench_load
from tests.benchmarks._peers import MlflowServer, missing
from tests.benchmarks._report import Figure, table

DEFAULT_CURVES = Path(__file__).resolve().parents[3] / "shared" / "data" / "curves" / "opda_curves.jsonl"
DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
HISTORY_POINTS = 1_000_000
BIG_SERIES_POINTS = 10_000_000


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _cpu_times() -> tuple[int, int] | None:
    """(idle, total) jiffies of all CPUs since boot, or None where /proc/stat is not there."""
    with suppress(OSError):
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return fields[3] + fields[4], sum(fields)  # idle + iowait
    return None


def _settle(limit_s: float = 30.0) -> None:
    """Wait (at most ``limit_s``) until the machine is quiet, so one section's leftovers (a peer's
    background start-up, a server shutting down) are not charged to the next section's figures."""
    deadline = time.monotonic() + limit_s
    before = _cpu_times()
    while before is not None and time.monotonic() < deadline:
        time.sleep(0.5)
        after = _cpu_times()
        assert after is not None
        idle, total = after[0] - before[0], after[1] - before[1]
        if total > 0 and idle / total > 0.85:
            return
        before = after


def _within(value: float | None, limit: float) -> bool | None:
    return None if value is None else value <= limit


def _at_least(value: float | None, floor: float) -> bool | None:
    return None if value is None else value >= floor


@contextmanager
def _mlflow(home: Path, skipped: list[str]) -> Iterator[MlflowServer | None]:
    reason = missing("mlflow")
    if reason:
        skipped.append(f"MLflow: {reason}")
        yield None
        return
    server = MlflowServer(home / "mlflow")
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def _postgres_database(admin_url: str, skipped: list[str]) -> Iterator[str | None]:
    """A fresh database on the PostgreSQL server, dropped afterwards; None (and why) if unreachable."""
    try:
        import psycopg
        from sqlalchemy.engine import make_url
    except ImportError:
        skipped.append("PostgreSQL: psycopg is not installed (pip install -e '.[postgres]')")
        yield None
        return
    url = make_url(admin_url)
    conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
    name = f"plateau_bench_{uuid.uuid4().hex[:8]}"
    try:
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=3) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        skipped.append(f"PostgreSQL: {admin_url} is not reachable ({str(exc).strip()[:100]})")
        yield None
        return
    try:
        database_url = url.set(database=name).render_as_string(hide_password=False)
        upgrade(database_url)  # `plateau db upgrade`: the tracker never migrates PostgreSQL by itself
        yield database_url
    finally:
        with psycopg.connect(conninfo, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _log_cost(
    figures: list[Figure], home: Path, server: TrackerProcess, mlflow: MlflowServer | None, skipped: list[str]
) -> None:
    tb_missing = missing("tensorboard") or missing("torch")
    if tb_missing:
        skipped.append(f"TensorBoard: {tb_missing}")
    for keys in (1, 10):
        _say(f"1. log() with {keys} key(s)")
        ours = client.plateau_log_ns(server.url, keys)
        scalar = None if tb_missing else client.tensorboard_add_scalar_ns(home / f"tb-{keys}", keys)
        figure = Figure("1", f"run.log(), {keys} key{'s' if keys > 1 else ''}", ours / 1000, "µs/call")
        if scalar is not None:
            figure.peer, figure.peer_value = f"add_scalar x{keys}", scalar / 1000
        if keys == 1:
            figure.target = "<= 2 µs and <= 1/10 of add_scalar"
            figure.met = ours <= 2000 and (scalar is None or ours <= scalar / 10)
        figures.append(figure)
        if mlflow is not None:
            _say(f"1. mlflow.log_metric(synchronous=False) with {keys} key(s)")
            theirs = client.mlflow_log_metric_ns(mlflow.url, keys)
            figures.append(
                Figure(
                    "1",
                    f"run.log(), {keys} key{'s' if keys > 1 else ''}",
                    ours / 1000,
                    "µs/call",
                    peer="mlflow async" + ("" if keys == 1 else " log_metrics"),
                    peer_value=theirs / 1000,
                )
            )


def _ingest(
    figures: list[Figure],
    home: Path,
    server: TrackerProcess,
    mlflow: MlflowServer | None,
    postgres_url: str,
    skipped: list[str],
) -> None:
    _say("2. ingest, SQLite, 1 worker")
    ours = tracker.plateau_ingest(server.url, clients=2)
    theirs = tracker.mlflow_log_batch(mlflow.url, clients=2) if mlflow is not None else None
    ratio = ours / theirs if theirs else None
    figures.append(
        Figure(
            "2",
            "ingest, SQLite, 1 worker",
            ours,
            "points/s",
            ">= 250,000 and >= 25x MLflow",
            ours >= 250_000 and (ratio is None or ratio >= 25),
            "mlflow log_batch" if theirs else "",
            theirs,
            f"{ratio:.0f}x MLflow" if ratio else "",
        )
    )
    _say("2. the SDK's delivery, log() to stored, one process")
    delivered = client.sdk_delivery_rate(server.url)
    figures.append(
        Figure(
            "2",
            "SDK log() to stored, 1 process, SQLite",
            delivered,
            "points/s",
            ">= 1/2 of ingest",
            delivered >= ours / 2,
            "tracker ingest (above)",
            ours,
            f"{delivered / ours:.0%} of ingest",
        )
    )
    with _postgres_database(postgres_url, skipped) as database_url:
        if database_url is None:
            return
        for workers in (1, 4):
            _say(f"2. ingest, PostgreSQL, {workers} worker(s)")
            pg = TrackerProcess(home / f"pg-{workers}", workers=workers, database_url=database_url)
            try:
                rate = tracker.plateau_ingest(pg.url, clients=max(2, workers))
            finally:
                pg.stop()
            figures.append(
                Figure(
                    "2",
                    f"ingest, PostgreSQL, {workers} worker{'s' if workers > 1 else ''}",
                    rate,
                    "points/s",
                    ">= 150,000" if workers == 4 else "",
                    _at_least(rate, 150_000) if workers == 4 else None,
                )
            )


def _round_trip(
    figures: list[Figure], home: Path, server: TrackerProcess, mlflow: MlflowServer | None
) -> None:
    for workers in (1, 4):
        _say(f"3. one-point round trip, {workers} worker(s)")
        if workers == 1:
            p50, p99 = tracker.plateau_round_trip(server.url)
        else:
            four = TrackerProcess(home / "rtt-4", workers=4)
            try:
                p50, p99 = tracker.plateau_round_trip(four.url)
            finally:
                four.stop()
        theirs = tracker.mlflow_round_trip(mlflow.url) if mlflow is not None and workers == 1 else None
        name = f"one-point round trip, {workers} worker{'s' if workers > 1 else ''}"
        for which, (ours, limit) in enumerate(((p50, 1.5), (p99, 5.0))):
            figures.append(
                Figure(
                    "3",
                    f"{name}, {('p50', 'p99')[which]}",
                    ours,
                    "ms",
                    f"<= {limit:g} ms",
                    _within(ours, limit),
                    "mlflow log_metric (1 worker)" if theirs else "",
                    theirs[which] if theirs else None,
                )
            )


def _stop_latency(figures: list[Figure], server: TrackerProcess) -> None:
    _say("4. stop-signal latency")
    p50, p99 = client.stop_latency_ms(server.url)
    figures.append(Figure("4", "stop-signal latency, p50", p50, "ms", "<= 10 ms", _within(p50, 10)))
    figures.append(Figure("4", "stop-signal latency, p99", p99, "ms", "<= 50 ms", _within(p99, 50)))
    p50, p99 = client.default_verdict_ms(server.url)
    name = "verdict of an evaluation under the default policy, shared tracker"
    figures.append(Figure("4", f"{name}, p50", p50, "ms", "<= 10 ms", _within(p50, 10)))
    figures.append(Figure("4", f"{name}, p99", p99, "ms", "<= 50 ms", _within(p99, 50)))


def _engine(figures: list[Figure]) -> None:
    _say("5. policy engine, in-process")
    patience, default = tracker.engine_in_tracker_process()
    figures.append(
        Figure(
            "5",
            "policy engine, patience",
            patience,
            "points/s",
            ">= 1,000,000",
            _at_least(patience, 1_000_000),
        )
    )
    figures.append(
        Figure(
            "5",
            "policy engine, default policy",
            default,
            "points/s",
            ">= 200,000",
            _at_least(default, 200_000),
        )
    )


def _history_and_storage(figures: list[Figure], home: Path, mlflow: MlflowServer | None, quick: bool) -> None:
    points = 100_000 if quick else HISTORY_POINTS
    _say(f"6. history of a {points:,}-point run (seeding)")
    server = TrackerProcess(home / "history")
    try:
        started = time.perf_counter()
        run_id = tracker.seed_history(server.url, points)
        seeded = time.perf_counter() - started
        full_s, points_form_s, down_ms = tracker.history_reads(server.url, run_id, points)
    finally:
        server.stop()
    theirs = mlflow_bytes = None
    mlflow_points = 100_000
    if mlflow is not None and not quick:
        _say(f"6. MLflow history of {mlflow_points:,} points (seeding)")
        theirs, mlflow_bytes = tracker.mlflow_history(mlflow.url, mlflow.database, mlflow_points)
    figures.append(
        Figure(
            "6",
            f"history, {points:,} points, full read, form=columns",
            full_s,
            "s",
            "<= 1.5 s",
            _within(full_s, 1.5),
            f"mlflow get_metric_history of {mlflow_points:,}" if theirs else "",
            theirs,
            f"seeded in {seeded:.1f} s",
        )
    )
    figures.append(Figure("6", f"history, {points:,} points, full read, form=points", points_form_s, "s"))
    figures.append(
        Figure(
            "6",
            f"history, {points:,} points, downsampled to 2,000",
            down_ms,
            "ms",
            "<= 100 ms",
            _within(down_ms, 100),
        )
    )
    database = home / "history" / "plateau.db"
    per_point = tracker.sqlite_bytes(database) / points if database.exists() else None
    figures.append(
        Figure(
            "7",
            "storage, SQLite, indexes included",
            per_point,
            "bytes/point",
            "<= 60",
            _within(per_point, 60),
            "mlflow" if mlflow_bytes else "",
            mlflow_bytes,
        )
    )


def _memory(figures: list[Figure], server: TrackerProcess) -> None:
    _say("7. memory with 100 live runs")
    sdk_mb, tracker_mb = client.memory_with_live_runs(server.url, server.process.pid)
    figures.append(
        Figure(
            "7",
            "SDK memory, 100 live runs (over python + torch)",
            sdk_mb,
            "MB",
            "<= 30 MB",
            _within(sdk_mb, 30),
        )
    )
    figures.append(
        Figure("7", "tracker memory, 100 live runs", tracker_mb, "MB", "<= 300 MB", _within(tracker_mb, 300))
    )


def _replay(figures: list[Figure], curves: Path, skipped: list[str]) -> None:
    if not curves.exists():
        skipped.append(f"replay: no curves at {curves} (pass --curves)")
        return
    _say("8. plateau replay of the OPDA curves")
    seconds, runs = tracker.replay_seconds(curves)
    figures.append(
        Figure("8", f"plateau replay default, {runs:,} runs", seconds, "s", "<= 5 s", _within(seconds, 5))
    )


def _big_series(figures: list[Figure], home: Path, quick: bool) -> None:
    points = 1_000_000 if quick else BIG_SERIES_POINTS
    _say(f"9. a {points:,}-point series (seeding)")
    server = TrackerProcess(home / "big")
    try:
        started = time.perf_counter()
        run_id = tracker.seed_history(server.url, points)
        seeded = time.perf_counter() - started
        full_s, _, down_ms = tracker.history_reads(server.url, run_id, points, repeats=3)
        packed_s = tracker.packed_read_s(server.url, run_id, points)
    finally:
        server.stop()
    database = home / "big" / "plateau.db"
    per_point = tracker.sqlite_bytes(database) / points if database.exists() else None
    label = f"series of {points:,} points"
    figures.append(
        Figure("9", f"{label}, downsampled to 2,000", down_ms, "ms", "<= 100 ms", _within(down_ms, 100))
    )
    figures.append(
        Figure(
            "9",
            f"{label}, full read, form=binary (packed columns, TrackerClient.history_columns)",
            packed_s,
            "s",
            "<= 5 s",
            _within(packed_s, 5),
            note=f"seeded in {seeded:.1f} s",
        )
    )
    figures.append(Figure("9", f"{label}, full read, form=columns (JSON)", full_s, "s"))
    figures.append(Figure("9", f"{label}, storage, SQLite, indexes included", per_point, "bytes/point"))


def _big_experiment(figures: list[Figure], home: Path, quick: bool) -> None:
    large = 1_000 if quick else 10_000
    server = TrackerProcess(home / "experiment")
    costs: dict[tuple[str, int], float] = {}
    try:
        held = 0
        for runs in (100, large):
            _say(f"10. an experiment of {runs:,} finished runs (seeding)")
            scale.add_finished_runs(server.url, "big", held, runs - held)
            held = runs
            for rule in ("percentile", "asha"):
                costs[(rule, runs)] = scale.monitored_evaluation_ms(server.url, "big", {"rule": rule})
        build_ms = scale.rung_view_build_ms(server.url, "big", rung=5)  # no view of rung 5 yet
        list_ms = scale.runs_list_ms(server.url, "big")
        page_s = scale.dashboard_runs_page_s(server.url)
    finally:
        server.stop()
    if page_s is None:
        _say("10. the dashboard's runs page: skipped (Chromium, Playwright or Streamlit missing)")
    else:
        figures.append(
            Figure(
                "10",
                f"dashboard runs page in Chromium, {large:,} runs (first load of a fresh dashboard counted)",
                page_s,
                "s",
                "<= 3 s",
                _within(page_s, 3),
            )
        )
    figures.append(
        Figure(
            "10",
            f"runs list, first page of 50, {large:,} runs",
            list_ms,
            "ms",
            "<= 100 ms",
            _within(list_ms, 100),
        )
    )
    for rule in ("percentile", "asha"):
        small, big = costs[(rule, 100)], costs[(rule, large)]
        figures.append(
            Figure(
                "10",
                f"monitored evaluation under {rule}, {large:,} finished runs (at 100: {small:.1f} ms)",
                big,
                "ms",
                "<= 2x its cost at 100",
                _within(big, 2 * small),
            )
        )
    figures.append(
        Figure(
            "10",
            f"first asha judgement at a new rung (reads every run, builds the rung's view), {large:,} runs",
            build_ms,
            "ms",
            note="once per rung and experiment",
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument(
        "--only", type=int, nargs="+", choices=range(1, 12), metavar="N", help="these sections"
    )
    parser.add_argument("--quick", action="store_true", help="a 100,000-point history and no MLflow history")
    parser.add_argument(
        "--postgres-url", default=os.environ.get("PLATEAU_TEST_POSTGRES_URL", DEFAULT_POSTGRES)
    )
    parser.add_argument("--curves", type=Path, default=DEFAULT_CURVES)
    args = parser.parse_args()
    sections = set(args.only or range(1, 12))
    figures: list[Figure] = []
    skipped: list[str] = []
    started = time.perf_counter()
    # The peers print as they go (MLflow's "View run ..." lines): keep stdout for the table or the JSON.
    with redirect_stdout(sys.stderr), tempfile.TemporaryDirectory(prefix="plateau-bench-") as folder:
        home = Path(folder)
        server = TrackerProcess(home / "sqlite")
        try:
            needs_mlflow = bool(sections & {1, 2, 3, 6, 7})
            with _mlflow(home, skipped) if needs_mlflow else _nothing() as mlflow:
                if 1 in sections:
                    _settle()
                    _log_cost(figures, home, server, mlflow, skipped)
                if 2 in sections:
                    _settle()
                    _ingest(figures, home, server, mlflow, args.postgres_url, skipped)
                if 3 in sections:
                    _settle()
                    _round_trip(figures, home, server, mlflow)
                if 4 in sections:
                    _settle()
                    _stop_latency(figures, server)
                if 5 in sections:
                    _settle()
                    _engine(figures)
                if 6 in sections or 7 in sections:
                    _settle()
                    _history_and_storage(figures, home, mlflow, args.quick)
                if 7 in sections:
                    _settle()
                    _memory(figures, server)
            if 8 in sections:
                _settle()
                _replay(figures, args.curves, skipped)
            if 9 in sections:
                _settle()
                _big_series(figures, home, args.quick)
            if 10 in sections:
                _settle()
                _big_experiment(figures, home, args.quick)
            if 11 in sections:
                _settle()
                load = bench_load.parser().parse_args(["--postgres-url", args.postgres_url])
                figures += bench_load.figures(bench_load.run(load))
        finally:
            server.stop()
    machine = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "processor": _cpu_model(),
        "seconds": round(time.perf_counter() - started, 1),
    }
    if args.json:
        print(
            json.dumps(
                {"machine": machine, "skipped": skipped, "figures": [f.as_dict() for f in figures]}, indent=2
            )
        )
        return
    print(
        f"Machine: {machine['processor']}, {machine['cpus']} CPUs, Python {machine['python']}, "
        f"{machine['platform']}; suite took {machine['seconds']} s\n"
    )
    print(table(figures))
    for reason in skipped:
        print(f"\nskipped: {reason}")


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


def _cpu_model() -> str:
    with suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    main()
