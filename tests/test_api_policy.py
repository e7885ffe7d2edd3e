"""The patience table again, through a real tracker on a real SQLite file, one batch per step."""

from __future__ import annotations

import json
import math
import uuid

import httpx
import pytest

from tests.conftest import create_run
from tests.patience_cases import CASES, Case


def post_point(client: httpx.Client, run_id: int, key: str, step: int, value: float) -> dict:
    # Python's json writes NaN/Infinity literals, as the SDK sends them (httpx's json= refuses them).
    body = json.dumps({"batch_id": uuid.uuid4().hex, "points": [{"key": key, "step": step, "value": value}]})
    response = client.post(
        f"/api/v1/runs/{run_id}/metrics", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_patience_table_through_the_server(client: httpx.Client, case: Case) -> None:
    run = create_run(client, {"monitor": "val/m", "mode": case.mode, "rules": case.rules})
    answers = [post_point(client, run["id"], "val/m", step, value) for step, value in enumerate(case.values)]

    decisions = client.get(f"/api/v1/runs/{run['id']}/decisions").json()["data"]
    stops = [d for d in decisions if d["action"] == "stop"]
    stored = client.get(f"/api/v1/runs/{run['id']}").json()
    assert stored["stop_step"] == case.stop_step
    if case.stop_step is None:
        assert stops == []
        assert all(a["decision"]["action"] != "stop" for a in answers)
    else:
        (stop,) = stops
        assert (stop["step"], stop["best_step"], stop["rule"]) == (case.stop_step, case.best_step, case.rule)
        assert stop["reason"]
        # The stop reaches the trainer in the answer to the batch that caused it, not later.
        assert answers[case.stop_step]["decision"]["action"] == "stop"
        assert all(a["decision"]["action"] != "stop" for a in answers[: case.stop_step])
    assert [d["step"] for d in decisions if d["action"] == "checkpoint"] == case.checkpoints


def test_whole_curve_in_one_batch_is_judged_in_step_order(client: httpx.Client) -> None:
    run = create_run(
        client, {"monitor": "loss", "mode": "min", "rules": [{"rule": "patience", "patience": 2}]}
    )
    points = [
        {"key": "loss", "step": s, "value": v}
        for s, v in reversed(list(enumerate([3.0, 2.0, 2.5, 2.5, 1.0])))
    ]
    answer = client.post(
        f"/api/v1/runs/{run['id']}/metrics", json={"batch_id": "one", "points": points}
    ).json()
    assert answer["accepted"] == 5
    assert answer["decision"]["action"] == "stop"
    assert (answer["decision"]["step"], answer["decision"]["best_step"]) == (3, 1)


def test_points_of_other_ranks_and_keys_are_not_judged(client: httpx.Client) -> None:
    run = create_run(
        client, {"monitor": "loss", "mode": "min", "rules": [{"rule": "patience", "patience": 1}]}
    )
    points = [
        {"key": "loss", "step": 0, "value": 1.0},
        {"key": "loss", "step": 1, "value": 5.0, "rank": 1},
        {"key": "other", "step": 1, "value": 5.0},
    ]
    answer = client.post(f"/api/v1/runs/{run['id']}/metrics", json={"batch_id": "b", "points": points}).json()
    assert answer["decision"]["action"] == "continue"


def test_step_exact_decision(client: httpx.Client) -> None:
    run = create_run(
        client,
        {
            "monitor": "acc",
            "mode": "max",
            "rules": [{"rule": "patience", "patience": 2}, {"rule": "checkpoint"}],
        },
    )
    for step, value in enumerate([0.5, 0.6, 0.55, 0.55, 0.9]):
        post_point(client, run["id"], "acc", step, value)
    at = {s: client.get(f"/api/v1/runs/{run['id']}/decision", params={"step": s}).json() for s in range(6)}
    assert at[0]["action"] == "checkpoint"
    assert at[1]["action"] == "checkpoint"
    assert at[2]["action"] == "continue"
    assert at[3]["action"] == "stop"
    assert at[4]["action"] == "stop"  # after a stop every later step is a stop
    assert at[5]["judged"] is True  # judged: the run stopped before it
    never = create_run(client, {"monitor": "acc", "mode": "max"})
    pending = client.get(f"/api/v1/runs/{never['id']}/decision", params={"step": 3, "wait": 0.2}).json()
    assert pending["judged"] is False
    assert pending["action"] == "continue"


def test_long_poll_wakes_on_a_new_decision(client: httpx.Client, tracker) -> None:
    import threading
    import time

    run = create_run(client, {"monitor": "acc", "mode": "max", "rules": [{"rule": "checkpoint"}]})
    result: dict = {}

    def poll() -> None:
        with httpx.Client(base_url=tracker.url, timeout=30) as other:
            result["decision"] = other.get(
                f"/api/v1/runs/{run['id']}/decision", params={"after": 0, "wait": 10}
            ).json()
            result["answered"] = time.monotonic()

    waiter = threading.Thread(target=poll)
    waiter.start()
    time.sleep(0.3)
    posted = time.monotonic()
    post_point(client, run["id"], "acc", 0, 0.5)
    waiter.join(timeout=15)
    assert result["decision"]["action"] == "checkpoint"
    assert result["decision"]["seq"] == 1
    # It waited for the decision (answered after the point was posted), and woke soon after it.
    assert posted < result["answered"] < posted + 5


def test_nan_and_inf_are_stored_and_returned_faithfully(client: httpx.Client) -> None:
    run = create_run(client)
    values = ["NaN", "Infinity", '"-Infinity"', "1.5"]  # JSON literals, and the string form
    points = ", ".join(f'{{"key": "v", "step": {s}, "value": {v}}}' for s, v in enumerate(values))
    body = f'{{"batch_id": "x", "points": [{points}]}}'
    answer = client.post(
        f"/api/v1/runs/{run['id']}/metrics", content=body, headers={"content-type": "application/json"}
    )
    assert answer.json()["accepted"] == 4
    page = client.get(f"/api/v1/runs/{run['id']}/history", params={"key": "v"}).json()
    values = [p["value"] for p in page["points"]]
    assert values == ["NaN", "Infinity", "-Infinity", 1.5]
    assert math.isnan(float(values[0]))


def test_history_pages_in_step_order(client: httpx.Client) -> None:
    run = create_run(client)
    points = [{"key": "loss", "step": s, "value": float(s)} for s in range(25)]
    client.post(f"/api/v1/runs/{run['id']}/metrics", json={"batch_id": "h", "points": points[::-1]})
    steps, start = [], 0
    while start is not None:
        page = client.get(
            f"/api/v1/runs/{run['id']}/history", params={"key": "loss", "start_step": start, "limit": 10}
        ).json()
        steps += [p["step"] for p in page["points"]]
        start = page["next_step"]
    assert steps == list(range(25))
    assert client.get(f"/api/v1/runs/{run['id']}/keys").json()["keys"] == ["loss"]
