"""Distributed trainers with real processes (gloo, 2-3 ranks) against a real tracker."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import httpx
import pytest

from tests._server import TrackerProcess, free_port

# End to end: real processes, real training or real failures; kept out of the quick subset.
pytestmark = pytest.mark.slow

pytest.importorskip("torch")


def launch(job: str, world: int, tracker: TrackerProcess, *extra: str, timeout: float = 120) -> list[dict]:
    """Run ``job`` on ``world`` ranks; a hang fails the test at ``timeout`` (a hard limit)."""
    port, key = free_port(), uuid.uuid4().hex
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests._dist_jobs",
                job,
                "--rank",
                str(r),
                "--world",
                str(world),
                "--port",
                str(port),
                "--url",
                tracker.url,
                "--key",
                key,
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(world)
    ]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, err[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()  # reap it and close its pipes
    return results


def test_straggler_is_named_and_sync_wait_falls_on_the_others(tracker: TrackerProcess) -> None:
    delay = 30.0
    results = launch("straggler", 3, tracker, "--slow", "2", "--delay-ms", str(delay), "--steps", "60")
    figures = results[0]
    waits = figures["sync_wait_ms"]
    print("sync-wait table (ms, median per rank):", json.dumps(figures))
    assert figures["collectives"] >= 2  # DDP buckets were timed
    assert waits[2] < 5.0, waits  # the straggler waits for nobody
    for rank in (0, 1):
        # The others wait at least about the injected delay; a loaded host's scheduling adds to it (41 ms
        # was seen with both cores busy beside the suite), never takes from it.
        assert delay - 8.0 < waits[rank] < 3 * delay, waits
    # Transfer is what remains once the wait is taken out: the waiting ranks' transfer is about the
    # straggler's (a wait counted as transfer would add ~30 ms to it). Its own size depends on the host
    # (5.7 ms to 17 ms seen here with 3 ranks on 2 cores), so it is compared, not bounded.
    comm = figures["comm_ms"]
    assert max(comm[0], comm[1]) < comm[2] + delay / 3, figures
    assert figures["rel_perf"][2] < 0.75
    health = httpx.get(f"{tracker.url}/api/v1/runs/{figures['run_id']}/health").json()
    assert health["straggler"]["rank"] == 2
    assert health["alerts"]
    assert {a["rule"] for a in health["alerts"]} == {"straggler"}
    assert 2 in {a["evidence"]["rank"] for a in health["alerts"]}
    # Another rank is alerted only on its own reports: 3 ranks share 2 cores here, and under a loaded CI
    # pass (PostgreSQL beside them) rank 1 once computed 1.33x slower than the fastest for 3 reports in a
    # row, which is what the rule names a straggler. Every alert carries the relative performance that
    # raised it, below the bound.
    for alert in health["alerts"]:
        assert alert["evidence"]["relative_performance"] < alert["evidence"]["bound"], alert
    assert {r["rank"] for r in health["ranks"]} == {0, 1, 2}


@pytest.mark.parametrize("deferred", [False, True])
def test_one_ranks_metric_stops_every_rank_at_the_same_step(tracker: TrackerProcess, deferred: bool) -> None:
    extra = ["--steps", "200", "--trigger", "1"] + (["--deferred"] if deferred else [])
    results = launch("agreed_stop", 2, tracker, *extra, timeout=90)
    exits = [r["exit_step"] for r in results]
    assert exits[0] is not None
    assert exits[0] == exits[1], exits
    assert 5 <= exits[0] < 200
    decisions = httpx.get(f"{tracker.url}/api/v1/runs/{results[0]['run_id']}/decisions").json()["data"]
    stop = next(d for d in decisions if d["action"] == "stop")
    assert stop["step"] == 5
    assert stop["evidence"]["ranks_reported"] == 2


def test_slow_hogwild_worker_has_far_higher_staleness(tracker: TrackerProcess) -> None:
    results = launch("hogwild", 1, tracker, "--slow", "2", "--delay-ms", "25", "--seconds", "2", timeout=180)
    assert results[0]["exit_codes"] == [0, 0, 0]
    runs = httpx.get(f"{tracker.url}/api/v1/runs", params={"experiment": "hogwild", "limit": 1}).json()[
        "data"
    ]
    health = httpx.get(f"{tracker.url}/api/v1/runs/{runs[0]['id']}/health").json()
    p95 = {r["rank"]: r["figures"]["dist/staleness_p95"] for r in health["ranks"]}
    print("staleness p95 by worker:", p95, "histogram:", health["staleness_histogram"])
    assert p95[2] > 3 * max(p95[0], p95[1], 1.0), p95
    assert any(a["rule"] == "staleness" and a["evidence"]["rank"] == 2 for a in health["alerts"])


def test_single_process_pays_nothing_for_distributed_code(tracker: TrackerProcess) -> None:
    code = (
        "import sys, time\nimport plateau_tracker\n"
        f"run = plateau_tracker.init(project='dist', url={tracker.url!r})\n"
        "assert run._agreement is None\n"
        "assert 'torch' not in sys.modules\n"
        "run.finish()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
