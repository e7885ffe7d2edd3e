"""Ranks creating one run_key at the same moment all get the same run: one creates it, the rest join."""

from __future__ import annotations

import threading
import uuid

import httpx


def test_simultaneous_creates_with_one_run_key_join_one_run(tracker) -> None:
    key = uuid.uuid4().hex
    barrier = threading.Barrier(8)
    answers: list[httpx.Response] = []

    def create() -> None:
        with httpx.Client(base_url=tracker.url, timeout=30) as client:
            barrier.wait()
            answers.append(client.post("/api/v1/runs", json={"project": "race", "run_key": key}))

    threads = [threading.Thread(target=create) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(a.status_code for a in answers) == [200] * 7 + [201]
    assert len({a.json()["id"] for a in answers}) == 1
    assert sum(a.json()["joined"] is False for a in answers) == 1
