"""A step the SDK judged alone (the tracker away) and the tracker judged differently once back becomes an
``sdk_disagreed`` alert on the run, once a step; steps judged alike raise nothing."""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

import plateau_tracker as plateau
from plateau_tracker.server.config import Settings
from plateau_tracker.server.db.engine import Database
from tests._server import TrackerProcess, free_port
from tests.test_cohort_view import in_process

POLICY = {
    "monitor": "val",
    "mode": "min",
    "rules": [{"rule": "checkpoint"}, {"rule": "patience", "patience": 3}],
}


def _run_with(client: TestClient, values: list[float]) -> int:
    run = client.post("/api/v1/runs", json={"project": "away", "policy": POLICY}).json()
    points = [{"key": "val", "step": step, "value": value} for step, value in enumerate(values)]
    answer = client.post(
        f"/api/v1/runs/{run['id']}/metrics", json={"batch_id": uuid.uuid4().hex, "points": points}
    )
    assert answer.status_code == 200, answer.text
    return int(run["id"])


def _alerts(client: TestClient, run_id: int) -> list[dict[str, Any]]:
    decisions = client.get(f"/api/v1/runs/{run_id}/decisions").json()["data"]
    return [d for d in decisions if d["rule"] == "sdk_disagreed"]


def test_the_tracker_compares_the_sdks_answers_and_alerts_once_per_step(tmp_path: Path) -> None:
    def scenario(client: TestClient, database: Database) -> None:
        # Checkpoints at steps 0, 1, 2; no new best after step 2, so patience 3 stops at step 5.
        run_id = _run_with(client, [3.0, 2.0, 1.0, 1.5, 1.5, 1.5])
        answers = [
            {"step": 1, "checkpoint": True, "stop": False},  # as the tracker judged
            {"step": 2, "checkpoint": False},  # the tracker made a checkpoint here
            {"step": 3, "checkpoint": True, "stop": False},  # the tracker made none
            {"step": 4, "stop": True},  # the tracker went on
            {"step": 5, "checkpoint": False, "stop": False},  # the tracker stopped here (patience)
            {"step": 9, "stop": False},  # not judged yet
        ]
        url = f"/api/v1/runs/{run_id}/away-verdicts"
        first = client.post(url, json={"verdicts": answers})
        assert first.status_code == 200, first.text
        assert first.json() == {"compared": 5, "disagreed": [2, 3, 4, 5], "not_judged": [9]}
        alerts = {a["step"]: a for a in _alerts(client, run_id)}
        assert sorted(alerts) == [2, 3, 4, 5]
        assert alerts[2]["reason"] == (
            "the SDK and the tracker judged step 2 differently: the loop did not save the checkpoint the "
            "tracker made"
        )
        assert alerts[3]["reason"].endswith("the loop saved a checkpoint the tracker did not make")
        assert alerts[4]["reason"].endswith("the loop stopped where the tracker goes on")
        assert alerts[5]["reason"].endswith("the loop went on where the tracker stopped (patience)")
        assert alerts[5]["evidence"]["sdk"] == {"checkpoint": False, "stop": False}
        assert alerts[5]["evidence"]["tracker"] == {
            "checkpoint": False,
            "stop": True,
            "stop_rule": "patience",
        }
        # The trainer's decision is still the tracker's own stop, not an alert.
        latest = client.get(f"/api/v1/runs/{run_id}/decision").json()
        assert (latest["action"], latest["step"]) == ("stop", 5)
        # Sent again (a retry): said once a step.
        again = client.post(url, json={"verdicts": answers})
        assert again.json()["disagreed"] == []
        assert len(_alerts(client, run_id)) == 4

    in_process(Settings(home=tmp_path), scenario)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"verdicts": []}, "verdicts"),
        ({"verdicts": [{"step": -1, "stop": True}]}, "step"),
        ({"verdicts": [{"step": 1, "stop": "yes"}]}, "stop"),
        ({"verdicts": [{"step": 1, "saved": True}]}, "saved"),
    ],
)
def test_a_bad_report_is_refused_naming_the_field(tmp_path: Path, body: dict[str, Any], field: str) -> None:
    def scenario(client: TestClient, database: Database) -> None:
        run_id = _run_with(client, [1.0])
        answer = client.post(f"/api/v1/runs/{run_id}/away-verdicts", json=body)
        assert answer.status_code == 422
        assert field in answer.text
        assert _alerts(client, run_id) == []

    in_process(Settings(home=tmp_path), scenario)


@pytest.mark.slow
def test_a_stop_the_sdk_could_not_judge_alone_becomes_an_alert_once_the_tracker_is_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The tracker is away for the first 40 steps; its budget rule (which needs the tracker) stops the
    run at step 30, where the SDK, judging checkpoint and patience alone, let the loop go on. Once the
    tracker is back and has judged the spooled steps, the run holds one alert, at step 30, and the
    checkpoints the SDK gave (every step: the curve only falls) raise none."""
    port = free_port()
    policy_rules = [
        {"rule": "checkpoint"},
        {"rule": "patience", "patience": 100},
        {"rule": "budget", "max_steps": 30},
    ]
    run = plateau.init(
        project="away",
        monitor="val",
        mode="min",
        rules=policy_rules,
        url=f"http://127.0.0.1:{port}",
        spool_dir=tmp_path / "spool",
        wait=0.1,
    )
    saved = []
    tracker: TrackerProcess | None = None
    caplog.set_level(logging.WARNING, logger="plateau")
    try:
        step = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            run.log({"val": 1.0 / (step + 1)}, step=step)
            if run.should_checkpoint():
                saved.append(step)
            if run.should_stop():
                break
            if step == 40:
                tracker = TrackerProcess(tmp_path / "tracker", port=port)
            step += 1
            time.sleep(0.01)
        assert run.latest.stop
        assert run.latest.step == 30
        assert run.latest.rule == "budget"
        assert saved[:41] == list(range(41))  # the SDK's checkpoints while the tracker was away
        assert run.finish(timeout=30) == 0
        assert tracker is not None
        data = httpx.get(f"{tracker.url}/api/v1/runs/{run.id}/decisions", timeout=30).json()["data"]
        alerts = [d for d in data if d["rule"] == "sdk_disagreed"]
        assert [(a["step"], a["evidence"]["tracker"]["stop_rule"]) for a in alerts] == [(30, "budget")]
        assert run._away_report is not None
        assert run._away_report.disagreed == [30]
        said = [r.getMessage() for r in caplog.records if "differently from the SDK" in r.getMessage()]
        assert len(said) == 1
        assert "step 30" in said[0]
    finally:
        if tracker is not None:
            tracker.stop()
