"""Wake-ups across replicas through PostgreSQL: a decision made through one ``plateau serve`` wakes a
long-poll waiting on another within milliseconds, with the polling fallback set to 30 s (so only the
notification can explain it)."""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests._server import TrackerProcess
from tracker.db import migrate

FALLBACK = {"PLATEAU_LONGPOLL_FALLBACK_S": "30"}


def test_a_decision_on_one_replica_wakes_a_long_poll_on_another(postgres_url: str, tmp_path: Path) -> None:
    migrate.upgrade(postgres_url, "head")  # PostgreSQL's schema is made by `plateau db upgrade`
    a = TrackerProcess(tmp_path / "a", database_url=postgres_url, env=FALLBACK)
    b = TrackerProcess(tmp_path / "b", database_url=postgres_url, env=FALLBACK)
    try:
        for replica in (a, b):
            assert httpx.get(f"{replica.url}/api/v1/health").json()["wakeups"] == "notify"
        policy = {"monitor": "v", "mode": "min", "rules": [{"rule": "patience", "patience": 1}]}
        latencies = []
        with (
            httpx.Client(base_url=a.url, timeout=30) as writer,
            httpx.Client(base_url=b.url, timeout=30) as reader,
        ):
            for attempt in range(12):
                run = writer.post("/api/v1/runs", json={"project": "wake", "policy": policy}).json()
                points = [{"key": "v", "step": 0, "value": 1.0}]
                writer.post(f"/api/v1/runs/{run['id']}/metrics", json={"batch_id": "b0", "points": points})
                answer: dict[str, Any] = {}

                def wait_on_b(run_id: int = run["id"], answer: dict[str, Any] = answer) -> None:
                    got = reader.get(f"/api/v1/runs/{run_id}/decision", params={"step": 1, "wait": 20})
                    answer["at"] = time.perf_counter()
                    answer["decision"] = got.json()

                waiter = threading.Thread(target=wait_on_b)
                waiter.start()
                time.sleep(0.3)  # the long-poll is waiting on b
                points = [{"key": "v", "step": 1, "value": 2.0}]
                writer.post(f"/api/v1/runs/{run['id']}/metrics", json={"batch_id": "b1", "points": points})
                committed = time.perf_counter()
                waiter.join(timeout=25)
                assert answer["decision"]["action"] == "stop", (attempt, answer)
                assert answer["decision"]["step"] == 1
                latencies.append(max(0.0, answer["at"] - committed))
        p50 = statistics.median(latencies)
        print(f"\ncross-replica stop to long-poll: p50 {1e3 * p50:.1f} ms, max {1e3 * max(latencies):.1f} ms")
        assert max(latencies) < 1.0  # the fallback timer is 30 s: the notification woke it
    finally:
        a.stop()
        b.stop()
