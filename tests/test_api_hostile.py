"""What a hostile client or an unlucky trainer sends, through a real tracker: every case here once broke
the tracker for the sender or for others (a 500 forever, a wedge, a silent change), and must not again."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from tests.conftest import create_run


def post(client: httpx.Client, run_id: int, body: dict[str, Any]) -> httpx.Response:
    return client.post(f"/api/v1/runs/{run_id}/metrics", json={"batch_id": uuid.uuid4().hex, **body})


def history(client: httpx.Client, run_id: int, key: str) -> list[dict[str, Any]]:
    response = client.get(f"/api/v1/runs/{run_id}/history", params={"key": key, "limit": 10_000})
    assert response.status_code == 200, response.text
    points: list[dict[str, Any]] = response.json()["points"]
    return points


def test_a_loss_growing_to_1e300_is_stopped_by_the_default_policy_and_every_point_is_stored(
    client: httpx.Client,
) -> None:
    # It once made every later batch of its run fail with a 500: the rules overflowed, and nothing stopped.
    run = create_run(client, {"monitor": "val/loss", "mode": "min"}, planned_steps=200)
    values = [10.0 ** (20 * i) for i in range(16)]  # 1 .. 1e300
    answers = []
    for step, value in enumerate(values):
        response = post(client, run["id"], {"points": [{"key": "val/loss", "step": step, "value": value}]})
        assert response.status_code == 200, response.text
        answers.append(response.json())
    stops = [d for answer in answers for d in answer["decisions"] if d["action"] == "stop"]
    assert [s["rule"] for s in stops] == ["divergence"]
    assert stops[0]["step"] == 1  # 1e20, ten times the run's scale (1) past its best
    assert stops[0]["best_step"] == 0
    assert [p["value"] for p in history(client, run["id"], "val/loss")] == values


def _series(key: str, steps: list[int], values: list[Any]) -> dict[str, Any]:
    return {"series": [{"key": key, "steps": steps, "values": values}]}


def test_a_late_nan_is_judged_and_stops_the_run(client: httpx.Client) -> None:
    # Steps 10-19, then 0-9 with a NaN at step 5: the NaN was stored and never judged.
    run = create_run(client, {"monitor": "val/loss", "mode": "min"})
    first = post(
        client, run["id"], _series("val/loss", list(range(10, 20)), [1.0 - 0.01 * s for s in range(10)])
    )
    assert first.status_code == 200
    assert first.json()["late_points"] == 0
    late_values: list[Any] = [1.0] * 10
    late_values[5] = "NaN"
    answer = post(client, run["id"], _series("val/loss", list(range(10)), late_values))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["late_points"] == 10
    stops = [d for d in body["decisions"] if d["action"] == "stop"]
    assert [(d["rule"], d["step"]) for d in stops] == [("non_finite", 5)]
    assert "a late point: it arrived after step 19 was judged" in stops[0]["reason"]
    assert stops[0]["evidence"]["late"] is True
    assert body["decision"]["action"] == "stop"


def test_late_finite_points_are_said_to_be_late_once(client: httpx.Client) -> None:
    run = create_run(client, {"monitor": "acc", "mode": "max"})
    post(client, run["id"], _series("acc", [10, 11], [0.5, 0.6]))
    answers = [post(client, run["id"], _series("acc", [s], [0.4])).json() for s in (3, 4)]
    assert [a["late_points"] for a in answers] == [1, 1]
    alerts = [d for a in answers for d in a["decisions"] if d["action"] == "alert"]
    assert [(d["rule"], d["step"]) for d in alerts] == [("late", 3)]
    assert "arrived after step 11 had been judged" in alerts[0]["reason"]
    assert "non_finite" in alerts[0]["reason"]
    decisions = client.get(f"/api/v1/runs/{run['id']}/decisions").json()["data"]
    assert [d["rule"] for d in decisions if d["action"] == "alert"] == ["late"]
    # Alerts are for people: the trainer's latest decision is still about the monitored steps.
    assert answers[-1]["decision"]["action"] != "alert"
