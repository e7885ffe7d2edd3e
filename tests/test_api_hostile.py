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
