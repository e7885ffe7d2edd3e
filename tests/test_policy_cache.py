"""Parsed policies are kept per app, bounded: two apps in one process on two databases, whose runs share
ids, each judge with their own runs' policies."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from plateau_tracker.server.app import create_app
from plateau_tracker.server.config import Settings
from plateau_tracker.server.services.policies import PolicyCache


def _app(home: Path) -> TestClient:
    # In-process, as a loopback client (with no API tokens the tracker serves only loopback callers).
    return TestClient(
        create_app(Settings(home=home)), base_url="http://localhost", client=("127.0.0.1", 50000)
    )


def test_two_apps_in_one_process_judge_with_their_own_runs_policies(tmp_path: Path) -> None:
    quick = {"monitor": "acc", "mode": "max", "rules": [{"rule": "patience", "patience": 1}]}
    slow = {"monitor": "acc", "mode": "max", "rules": [{"rule": "patience", "patience": 100}]}
    points = [{"key": "acc", "step": step, "value": value} for step, value in enumerate([0.5, 0.4, 0.3])]
    with _app(tmp_path / "a") as first, _app(tmp_path / "b") as second:
        for client, policy in ((first, quick), (second, slow)):
            created = client.post("/api/v1/runs", json={"project": "p", "policy": policy})
            assert created.status_code == 201, created.text
            assert created.json()["id"] == 1  # the same id in both stores
        answers = {}
        for name, client in (("quick", first), ("slow", second)):
            response = client.post("/api/v1/runs/1/metrics", json={"batch_id": "b", "points": points})
            assert response.status_code == 200, response.text
            answers[name] = response.json()["decision"]
    assert answers["quick"]["action"] == "stop"
    assert answers["quick"]["rule"] == "patience"
    assert answers["slow"] is None or answers["slow"]["action"] != "stop"


class _Run:
    def __init__(self, run_id: int, patience: int) -> None:
        self.id = run_id
        self.started_at = f"start of run {run_id}"
        self.policy = {"monitor": "m", "rules": [{"rule": "patience", "patience": patience}]}


def test_the_cache_keeps_the_most_recently_used_policies() -> None:
    cache = PolicyCache(capacity=2)
    first, second, third = _Run(1, 1), _Run(2, 2), _Run(3, 3)
    parsed = cache.of(first)
    assert cache.of(first) is parsed  # parsed once
    cache.of(second)
    cache.of(first)  # 1 is now the most recent
    cache.of(third)  # past capacity: 2, the least recent, goes
    assert len(cache) == 2
    assert cache.of(first) is parsed
    reparsed = cache.of(second)  # parsed again, and now it is 3 that goes
    assert cache.of(second) is reparsed
    assert len(cache) == 2
    # A run that took a deleted run's id (SQLite reuses the largest) has its own policy.
    successor = _Run(2, 7)
    successor.started_at = "a later start"
    assert cache.of(successor).rules[0].patience == 7  # type: ignore[union-attr]


def test_ingest_fills_the_apps_cache_and_parses_each_runs_policy_once(tmp_path: Path) -> None:
    """The cache has a length, so an empty one is falsy: ingest once tested it for truth, and an empty
    cache never filled; every batch parsed its run's policy and built its rules again."""
    policy = {"monitor": "acc", "mode": "max", "rules": [{"rule": "patience", "patience": 5}]}
    with _app(tmp_path) as client:
        run = client.post("/api/v1/runs", json={"project": "p", "policy": policy}).json()
        cache = client.app.state.ingest_services.policies  # type: ignore[attr-defined]
        for step in range(3):
            points = [{"key": "acc", "step": step, "value": 0.5}]
            answer = client.post(
                f"/api/v1/runs/{run['id']}/metrics", json={"batch_id": f"b{step}", "points": points}
            )
            assert answer.status_code == 200, answer.text
            assert len(cache) == 1
