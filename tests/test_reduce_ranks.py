"""Ranks agree on a reduced metric, on PostgreSQL as on SQLite. Two jobs of four ranks each (eight
clients), ``reduce="mean"``, each rank a process of its own without torch.distributed, rank 0 slower than
the others; on PostgreSQL, four tracker workers. Every rank leaves at the stop step the mean over all four
ranks gives, and every decision was judged on all four.

The reduce timeout is shorter than the job, so a rank that ran ahead of the verdicts would have steps
judged without rank 0, and stops at another step. ``PLATEAU_REDUCE_RUNS`` repeats the PostgreSQL test (CI
runs it 5 times).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from plateau_tracker.server.db.migrate import upgrade
from tests._reduce_rank import value
from tests._server import TrackerProcess

pytestmark = pytest.mark.slow

WORLD = 4
MINIMA = [150, 60, 60, 60]  # rank 0's curve bottoms out later than the others'
PATIENCE = 10
STEPS = 400
REPEATS = int(os.environ.get("PLATEAU_REDUCE_RUNS", "1"))


def expected_stop() -> int:
    """Patience over the mean of all four ranks: its best step, then ``PATIENCE`` steps without a better."""
    means = [sum(value(r, s, MINIMA) for r in range(WORLD)) / WORLD for s in range(STEPS)]
    best = min(range(STEPS), key=means.__getitem__)
    return best + PATIENCE


def launch_job(url: str, key: str) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests._reduce_rank",
                "--rank",
                str(rank),
                "--world",
                str(WORLD),
                "--url",
                url,
                "--key",
                key,
                "--minima",
                ",".join(map(str, MINIMA)),
                "--patience",
                str(PATIENCE),
                "--steps",
                str(STEPS),
                "--reduce-timeout",
                "3",
                "--slow-ms",
                "40",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("PLATEAU_")},
        )
        for rank in range(WORLD)
    ]


def _every_rank_stops_at_the_mean_stop(server: TrackerProcess) -> None:
    processes: list[subprocess.Popen[str]] = []
    try:
        for key in (uuid.uuid4().hex, uuid.uuid4().hex):
            processes += launch_job(server.url, key)
        results = []
        for process in processes:
            out, err = process.communicate(timeout=300)
            assert process.returncode == 0, err[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.communicate()
    stop = expected_stop()
    for job in (results[:WORLD], results[WORLD:]):
        assert [r["exit_step"] for r in job] == [stop] * WORLD, job
        [run_id] = {r["run_id"] for r in job}
        decisions = httpx.get(f"{server.url}/api/v1/runs/{run_id}/decisions", timeout=30).json()["data"]
        judged = [d for d in decisions if d["action"] in ("stop", "checkpoint")]
        assert [d["step"] for d in judged if d["action"] == "stop"] == [stop]
        assert all(d["evidence"]["ranks_reported"] == WORLD for d in judged), [
            (d["step"], d["evidence"]) for d in judged if d["evidence"]["ranks_reported"] != WORLD
        ]
        assert not any(d["evidence"]["timed_out"] for d in judged)


@pytest.mark.postgres
@pytest.mark.parametrize("repeat", range(REPEATS))
def test_four_ranks_reduce_mean_stop_at_the_same_step_on_every_rank(
    postgres_url: str, tmp_path: Path, repeat: int
) -> None:
    upgrade(postgres_url)
    server = TrackerProcess(tmp_path, workers=4, database_url=postgres_url)
    try:
        _every_rank_stops_at_the_mean_stop(server)
    finally:
        server.stop()


def test_the_same_on_sqlite(tmp_path: Path) -> None:
    server = TrackerProcess(tmp_path)
    try:
        _every_rank_stops_at_the_mean_stop(server)
    finally:
        server.stop()
