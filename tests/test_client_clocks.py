"""The tracker does not trust a client's clock past what is plausible: a wall time outside 2000-2100
answers 422 naming the field; within, one ahead of the tracker's clock by more than the skew, or before the
run began, is stored as the tracker's own clock, so time rules and summaries read times that happened."""

from __future__ import annotations

import collections
import time

from fastapi.testclient import TestClient

from tests.conftest import create_run

BUDGET = {"monitor": "loss", "mode": "min", "rules": [{"rule": "budget", "max_wall_seconds": 60}]}


def _post(client: TestClient, run_id: int, batch_id: str, points: list[dict[str, object]]) -> dict:
    answer = client.post(f"/api/v1/runs/{run_id}/metrics", json={"batch_id": batch_id, "points": points})
    assert answer.status_code == 200, answer.text
    result: dict = answer.json()
    return result


def test_a_clock_hours_ahead_neither_stops_a_run_nor_disables_its_budget(app_client: TestClient) -> None:
    now = time.time()
    # Before: a second point stamped 2 h ahead stopped the run under a 60 s budget after one step.
    ahead = create_run(app_client, policy=BUDGET)
    _post(app_client, ahead["id"], "a0", [{"key": "loss", "step": 0, "value": 1.0, "wall_time": now}])
    answer = _post(
        app_client, ahead["id"], "a1", [{"key": "loss", "step": 1, "value": 0.9, "wall_time": now + 7200}]
    )
    assert answer["decision"]["action"] != "stop"
    # Before: a first point a year ahead made every later elapsed time negative, so the budget never ran out.
    year = create_run(app_client, policy=BUDGET)
    _post(
        app_client,
        year["id"],
        "y0",
        [{"key": "loss", "step": 0, "value": 1.0, "wall_time": now + 365 * 86400}],
    )
    answer = _post(
        app_client, year["id"], "y1", [{"key": "loss", "step": 1, "value": 0.9, "wall_time": now + 120}]
    )
    assert answer["decision"]["action"] == "stop"
    assert answer["decision"]["rule"] == "budget"
    history = app_client.get(f"/api/v1/runs/{year['id']}/history", params={"key": "loss"}).json()["points"]
    assert abs(history[0]["wall_time"] - now) < 60  # stored as the tracker's clock
    assert history[1]["wall_time"] == now + 120  # within the skew: the client's own


def test_an_implausible_time_is_refused_naming_the_field(app_client: TestClient) -> None:
    run = create_run(app_client)
    for wall in (1e300, -1e300, 0.0, 5e9):
        body = {
            "batch_id": f"w{wall}",
            "points": [{"key": "loss", "step": 0, "value": 1.0, "wall_time": wall}],
        }
        answer = app_client.post(f"/api/v1/runs/{run['id']}/metrics", json=body)
        assert answer.status_code == 422, (wall, answer.text)
        assert answer.json()["detail"][0]["loc"] == ["body", "points", 0, "wall_time"]
    series = {
        "batch_id": "s",
        "series": [
            {"key": "loss", "steps": [0, 1], "values": [1.0, 2.0], "wall_times": [time.time(), 1e300]}
        ],
    }
    answer = app_client.post(f"/api/v1/runs/{run['id']}/metrics", json=series)
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "series", 0, "wall_times", 1]
    summary = app_client.get(f"/api/v1/runs/{run['id']}/history", params={"key": "loss"}).json()
    assert summary["points"] == []  # nothing half-written


def test_the_sdk_sends_a_clock_the_tracker_takes(app_client: TestClient) -> None:
    """A trainer's clock that reads 1970 (a board booted without its clock set) is not a refused batch:
    the SDK sends the nearest bound the tracker takes, and the tracker stores its own clock."""
    from plateau_tracker import _batcher
    from plateau_tracker.server.schemas import metrics

    assert (_batcher.EARLIEST_WALL_TIME, _batcher.LATEST_WALL_TIME) == (
        metrics.EARLIEST_WALL_TIME,
        metrics.LATEST_WALL_TIME,
    )
    batcher = _batcher.Batcher(monitor="loss", rank=0, batch_points=100, warn=lambda topic, message: None)
    pending: collections.deque = collections.deque(
        [(0, 12.0, ("loss",), (1.0,), None), (1, 1e12, ("loss",), (0.5,), None)]
    )
    batch = batcher.take(pending)
    assert batch is not None
    [column] = batch.series
    assert column["wall_times"] == [_batcher.EARLIEST_WALL_TIME, _batcher.LATEST_WALL_TIME]
    run = create_run(app_client)
    answer = app_client.post(
        f"/api/v1/runs/{run['id']}/metrics", json={"batch_id": "sdk", "series": batch.series}
    )
    assert answer.status_code == 200, answer.text
    stored = app_client.get(f"/api/v1/runs/{run['id']}/history", params={"key": "loss"}).json()["points"]
    assert [abs(p["wall_time"] - time.time()) < 60 for p in stored] == [True, True]
