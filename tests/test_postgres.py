"""PostgreSQL with several workers: concurrent batches for one run keep every point once, decide once."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from pathlib import Path

import httpx
import pytest

from plateau_tracker.server.db.migrate import upgrade
from tests._server import TrackerProcess

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def test_four_workers_eight_clients_exact_counts_and_single_decisions(
    postgres_url: str, tmp_path: Path
) -> None:
    upgrade(postgres_url)
    server = TrackerProcess(tmp_path, workers=4, database_url=postgres_url)
    try:
        policy = {
            "monitor": "loss",
            "mode": "min",
            "rules": [{"rule": "patience", "patience": 20}, {"rule": "checkpoint"}],
        }
        run = httpx.post(f"{server.url}/api/v1/runs", json={"project": "pg", "policy": policy}).json()
        steps, clients = 400, 8
        errors: list[str] = []

        def client(index: int) -> None:
            with httpx.Client(base_url=server.url, timeout=60) as http:
                for start in range(index * 10, steps, clients * 10):
                    points = [
                        {"key": key, "step": s, "value": (1000.0 / (s + 1) if s < 300 else 3.5) + i}
                        for s in range(start, start + 10)
                        for i, key in enumerate(("loss", "acc", "lr"))
                    ]
                    # Each batch twice with the same id (a retry), and its first point again in a new batch.
                    batch_id = uuid.uuid4().hex
                    for body in (
                        {"batch_id": batch_id, "points": points},
                        {"batch_id": batch_id, "points": points},
                        {"batch_id": uuid.uuid4().hex, "points": points[:1]},
                    ):
                        response = http.post(f"/api/v1/runs/{run['id']}/metrics", json=body)
                        if response.status_code != 200:
                            errors.append(response.text)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        assert errors == []
        for key in ("loss", "acc", "lr"):
            page = httpx.get(
                f"{server.url}/api/v1/runs/{run['id']}/history", params={"key": key, "limit": 100_000}
            ).json()
            assert [p["step"] for p in page["points"]] == list(range(steps)), key
        decisions = httpx.get(f"{server.url}/api/v1/runs/{run['id']}/decisions").json()["data"]
        per_step = Counter((d["action"], d["step"]) for d in decisions)
        assert per_step
        assert max(per_step.values()) == 1
        assert [d["seq"] for d in decisions] == list(range(1, len(decisions) + 1))
        assert sum(d["action"] == "stop" for d in decisions) <= 1
    finally:
        server.stop()
