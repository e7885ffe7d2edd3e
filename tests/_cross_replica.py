"""One cross-replica stop: a stop decided through one tracker, and a long-poll on another waiting for it
(the wake-up test and ``bench_load`` both measure it)."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

_POLICY = {"monitor": "v", "mode": "min", "rules": [{"rule": "patience", "patience": 1}]}


def stop_seen_on_other(
    writer: httpx.Client, reader: httpx.Client, project: str
) -> tuple[float, dict[str, Any]]:
    """Create a run through ``writer``, open a long-poll for its step 1 on ``reader``, then log through
    ``writer`` the value that stops it. Returns the seconds from that log's answer to the long-poll's, and
    the decision the long-poll answered."""
    run = writer.post("/api/v1/runs", json={"project": project, "policy": _POLICY}).json()
    points = [{"key": "v", "step": 0, "value": 1.0}]
    writer.post(f"/api/v1/runs/{run['id']}/metrics", json={"batch_id": "b0", "points": points})
    answer: dict[str, Any] = {}

    def wait_on_reader() -> None:
        got = reader.get(f"/api/v1/runs/{run['id']}/decision", params={"step": 1, "wait": 20})
        answer["at"] = time.perf_counter()
        answer["decision"] = got.json()

    waiter = threading.Thread(target=wait_on_reader)
    waiter.start()
    time.sleep(0.3)  # the long-poll is waiting on the reader
    points = [{"key": "v", "step": 1, "value": 2.0}]
    writer.post(f"/api/v1/runs/{run['id']}/metrics", json={"batch_id": "b1", "points": points})
    committed = time.perf_counter()
    waiter.join(timeout=25)
    writer.post(f"/api/v1/runs/{run['id']}/finish", json={"status": "stopped"})
    return max(0.0, answer.get("at", committed) - committed), answer.get("decision", {})
