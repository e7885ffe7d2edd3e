"""A run whose trainer goes silent turns ``crashed`` after the tracker's heartbeat time, fires the
``crashed`` webhook, and is running again at its next point or heartbeat; the SDK's heartbeats keep a
quiet loop's run alive. Against a real tracker process with a heartbeat time of one second."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import plateau_tracker
from plateau_tracker import _sender
from tests._server import TrackerProcess, free_port
from tests.test_webhooks import FAST_RETRIES, Receiver, register_hook

POLICY = {"monitor": "loss", "rules": [{"rule": "patience", "patience": 50}]}


@pytest.fixture
def tracker(tmp_path: Path, store_url: str) -> Iterator[TrackerProcess]:
    """A tracker on SQLite and one on PostgreSQL (whose sweep takes the rows it marks with SKIP LOCKED)."""
    server = TrackerProcess(
        tmp_path / "tracker", database_url=store_url, env={**FAST_RETRIES, "PLATEAU_CRASH_AFTER_S": "1"}
    )
    yield server
    server.stop()


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")


def _point(client: httpx.Client, run_id: int, step: int) -> None:
    body = {"batch_id": f"b{step}", "points": [{"key": "loss", "step": step, "value": 1.0 / (step + 1)}]}
    assert client.post(f"/api/v1/runs/{run_id}/metrics", json=body).status_code == 200


def _status(client: httpx.Client, run_id: int) -> str:
    status: str = client.get(f"/api/v1/runs/{run_id}").json()["status"]
    return status


def test_a_silent_run_turns_crashed_fires_its_webhook_and_runs_again_at_its_next_point(
    tracker: TrackerProcess,
) -> None:
    receiver = Receiver(free_port())
    try:
        with httpx.Client(base_url=tracker.url, timeout=30) as client:
            first = client.post("/api/v1/runs", json={"project": "crash", "policy": POLICY}).json()["id"]
            client.post(f"/api/v1/runs/{first}/finish", json={"status": "finished"})  # makes the project
            register_hook(client, "crash", f"http://127.0.0.1:{receiver.server.server_port}/h", ["crashed"])
            run_id = client.post("/api/v1/runs", json={"project": "crash", "policy": POLICY}).json()["id"]
            _point(client, run_id, 0)

            wait_for(lambda: _status(client, run_id) == "crashed", "the silent run marked crashed")
            crashed = client.get(f"/api/v1/runs/{run_id}").json()
            assert crashed["ended_at"] == crashed["last_heartbeat"]  # it ended when it last spoke
            events = wait_for(lambda: receiver.received, "the crashed webhook delivered")
            assert [e["event"] for e in events] == ["crashed"]
            assert events[0]["body"]["run"]["id"] == run_id
            assert events[0]["body"]["run"]["status"] == "crashed"
            assert receiver.bad_signatures == 0

            _point(client, run_id, 1)
            revived = client.get(f"/api/v1/runs/{run_id}").json()
            assert (revived["status"], revived["ended_at"]) == ("running", None)

            finished = client.post(f"/api/v1/runs/{run_id}/finish", json={"status": "finished"}).json()
            assert finished["status"] == "finished"
            assert finished["ended_at"] is not None
    finally:
        receiver.close()


def test_heartbeats_keep_a_quiet_run_running_and_bring_a_crashed_one_back(tracker: TrackerProcess) -> None:
    with httpx.Client(base_url=tracker.url, timeout=30) as client:
        quiet, silent = (
            client.post("/api/v1/runs", json={"project": "crash", "policy": POLICY}).json()["id"]
            for _ in "ab"
        )

        def silent_crashed() -> bool:
            assert client.post(f"/api/v1/runs/{quiet}/heartbeat", json={}).status_code == 204
            return _status(client, silent) == "crashed"

        wait_for(silent_crashed, "the run without heartbeats marked crashed")
        assert _status(client, quiet) == "running"

        assert client.post(f"/api/v1/runs/{silent}/heartbeat", json={}).status_code == 204
        assert _status(client, silent) == "running"
        assert client.post("/api/v1/runs/999999999/heartbeat", json={}).status_code == 404


def test_the_sdk_sends_heartbeats_while_its_loop_logs_nothing(
    tracker: TrackerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sender, "HEARTBEAT_S", 0.2)
    run = plateau_tracker.init(project="crash", monitor="loss", url=tracker.url, spool=False)
    try:
        run.log({"loss": 1.0}, step=0)
        with httpx.Client(base_url=tracker.url, timeout=30) as client:
            wait_for(lambda: run.id is not None and _status(client, run.id) == "running", "the SDK's run")
            # A run that says nothing, beside it, shows the heartbeat time has passed.
            control = client.post("/api/v1/runs", json={"project": "crash", "policy": POLICY}).json()["id"]
            wait_for(lambda: _status(client, control) == "crashed", "the control run marked crashed")
            assert _status(client, run.id) == "running"
    finally:
        run.finish()
