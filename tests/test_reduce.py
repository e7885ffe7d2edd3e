"""Policies that judge a reduction over ranks (``reduce``: mean, min, max): a step is judged once every
rank has reported it, or ``reduce_timeout_s`` after its first report, on the ranks present, and the
decision says so. In-process; the timeout is reached through the points' own wall times, not by sleeping.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from plateau_tracker.server.config import Settings
from plateau_tracker.server.db.engine import Database
from tests.test_cohort_view import in_process


def _run(client: TestClient, reduce: str, rules: list[dict[str, Any]]) -> int:
    policy = {"monitor": "val", "mode": "min", "reduce": reduce, "reduce_timeout_s": 5.0, "rules": rules}
    body = {"project": "reduce", "experiment": reduce, "world_size": 2, "policy": policy}
    answer = client.post("/api/v1/runs", json=body)
    assert answer.status_code in (200, 201), answer.text
    return int(answer.json()["id"])


def _post(client: TestClient, run_id: int, *points: tuple[int, int, float, float]) -> dict[str, Any]:
    """(rank, step, value, wall time) points of ``val``; the tracker's answer."""
    batch = {
        "batch_id": uuid.uuid4().hex,
        "points": [
            {"key": "val", "rank": rank, "step": step, "value": value, "wall_time": wall}
            for rank, step, value, wall in points
        ],
    }
    # NaN as the JSON literal the SDK sends (httpx's json= refuses it).
    answer = client.post(
        f"/api/v1/runs/{run_id}/metrics",
        content=json.dumps(batch),
        headers={"content-type": "application/json"},
    )
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def test_a_step_is_judged_on_every_rank_once_all_have_reported_it(tmp_path: Path) -> None:
    def scenario(client: TestClient, database: Database) -> None:
        run_id = _run(client, "mean", [{"rule": "checkpoint"}])
        now = time.time()
        first = _post(client, run_id, (0, 0, 1.0, now))
        assert first["judged_step"] is None  # rank 1 has not reported step 0, and the timeout is far
        assert first["decisions"] == []
        second = _post(client, run_id, (1, 0, 3.0, now))
        assert second["judged_step"] == 0
        [checkpoint] = second["decisions"]
        assert checkpoint["action"] == "checkpoint"
        assert checkpoint["best_value"] == 2.0  # the mean of 1.0 and 3.0
        assert checkpoint["evidence"]["ranks_reported"] == 2
        assert checkpoint["evidence"]["world_size"] == 2
        assert checkpoint["evidence"]["timed_out"] is False
        assert "after the reduce timeout" not in checkpoint["reason"]

    in_process(Settings(home=tmp_path), scenario)


def test_a_rank_that_never_reports_is_waited_for_until_the_timeout_then_said(tmp_path: Path) -> None:
    def scenario(client: TestClient, database: Database) -> None:
        run_id = _run(client, "max", [{"rule": "checkpoint"}])
        now = time.time()
        # Step 0 first reported 30 s ago (past the 5 s timeout); step 1 just now: step 0 is judged on the
        # one rank present, step 1 waits for rank 1 (steps are judged in order).
        answer = _post(client, run_id, (0, 0, 4.0, now - 30), (0, 1, 2.0, now))
        assert answer["judged_step"] == 0
        [checkpoint] = answer["decisions"]
        assert checkpoint["step"] == 0
        assert checkpoint["best_value"] == 4.0
        assert checkpoint["evidence"]["ranks_reported"] == 1
        assert checkpoint["evidence"]["timed_out"] is True
        assert "judged on 1 of 2 ranks after the reduce timeout" in checkpoint["reason"]
        later = _post(client, run_id, (1, 1, 1.0, now))
        assert later["judged_step"] == 1
        [better] = later["decisions"]
        assert better["best_value"] == 2.0  # max(2.0, 1.0), a new best under mode min
        assert better["evidence"]["ranks_reported"] == 2
        assert better["evidence"]["timed_out"] is False

    in_process(Settings(home=tmp_path), scenario)


def test_a_nan_on_any_rank_makes_the_reduced_value_nan(tmp_path: Path) -> None:
    def scenario(client: TestClient, database: Database) -> None:
        run_id = _run(client, "min", [{"rule": "non_finite"}, {"rule": "checkpoint"}])
        now = time.time()
        _post(client, run_id, (0, 0, 1.0, now), (1, 0, 1.5, now))
        answer = _post(client, run_id, (0, 1, 0.5, now), (1, 1, math.nan, now))
        stops = [d for d in answer["decisions"] if d["action"] == "stop"]
        assert [(d["rule"], d["step"]) for d in stops] == [("non_finite", 1)]
        assert stops[0]["evidence"]["ranks_reported"] == 2

    in_process(Settings(home=tmp_path), scenario)
