"""Run summaries: merged figures, bad input refused with the field named, convergence times derived."""

from __future__ import annotations

import json
import math
from datetime import datetime

import httpx
import pytest

from tests.conftest import create_run

POLICY = {"monitor": "val", "mode": "min", "rules": [{"rule": "patience", "patience": 2}]}


# No server process needed: the `client` fixture is the tracker's app in this process.
pytestmark = pytest.mark.in_process


def patch(client: httpx.Client, run_id: int, body: object) -> httpx.Response:
    # json.dumps writes NaN as the literal the SDK sends; httpx's json= would refuse it.
    return client.patch(
        f"/api/v1/runs/{run_id}/summary",
        content=json.dumps(body),
        headers={"content-type": "application/json"},
    )


def test_summary_merges_key_by_key_and_null_removes(client: httpx.Client) -> None:
    run = create_run(client)
    first = patch(client, run["id"], {"summary": {"params": 1234, "device": "cpu", "gone": 1}})
    assert first.status_code == 200, first.text
    second = patch(client, run["id"], {"summary": {"flops_per_sample": 2.5e6, "gone": None, "odd": math.nan}})
    assert second.status_code == 200, second.text
    expected = {"params": 1234, "device": "cpu", "flops_per_sample": 2.5e6, "odd": "NaN"}
    assert second.json()["summary"] == expected
    assert client.get(f"/api/v1/runs/{run['id']}").json()["summary"] == expected
    assert client.get(f"/api/v1/runs/{run['id']}/summary").json()["summary"] == expected


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"summary": {"": 1}}, "summary"),
        ({"summary": {"x": "y" * 70_000}}, "summary"),
        ({"summary": [1, 2]}, "summary"),
        ({"figures": {}}, "figures"),
    ],
)
def test_bad_summary_is_refused_naming_the_field_and_nothing_changes(
    client: httpx.Client, body: object, field: str
) -> None:
    run = create_run(client)
    patch(client, run["id"], {"summary": {"params": 1}})
    response = patch(client, run["id"], body)
    assert response.status_code == 422
    assert field in response.text
    assert client.get(f"/api/v1/runs/{run['id']}/summary").json()["summary"] == {"params": 1}


def test_convergence_times_come_from_decisions_and_point_timestamps(client: httpx.Client) -> None:
    run = create_run(client, POLICY)
    start = client.get(f"/api/v1/runs/{run['id']}").json()["started_at"]
    t0 = datetime.fromisoformat(start).timestamp()
    values = [5.0, 4.0, 3.0, 3.5, 3.6, 3.7]  # best at step 2; patience 2 stops at step 4
    points = [
        {"key": "val", "step": s, "value": v, "wall_time": t0 + 10.0 * (s + 1)} for s, v in enumerate(values)
    ]
    points += [
        {"key": "train/loss", "step": s, "value": 1.0, "wall_time": t0 + 2.0 * (s + 1)} for s in range(40)
    ]
    answer = client.post(f"/api/v1/runs/{run['id']}/metrics", json={"batch_id": "b", "points": points})
    assert answer.json()["decision"]["action"] == "stop"
    convergence = client.get(f"/api/v1/runs/{run['id']}/summary").json()["convergence"]
    assert convergence["monitor"] == "val"
    assert (convergence["best_step"], convergence["best_value"]) == (2, 3.0)
    assert convergence["time_to_best_s"] == pytest.approx(30.0, abs=1e-3)
    assert (convergence["first_best_step"], convergence["time_to_first_best_s"]) == (2, pytest.approx(30.0))
    assert convergence["stop_step"] == 4
    assert convergence["time_to_stop_s"] == pytest.approx(50.0, abs=1e-3)
    # Inferred from the key logged furthest (train/loss, a point every 2 s).
    assert convergence["time_per_step_s"] == pytest.approx(2.0)
    assert convergence["time_per_step_source"] == "train/loss"
    # A measured step time (the SDK's step timer) wins over the inferred one.
    patch(client, run["id"], {"summary": {"step_time_s": 0.125}})
    measured = client.get(f"/api/v1/runs/{run['id']}/summary").json()["convergence"]
    assert (measured["time_per_step_s"], measured["time_per_step_source"]) == (0.125, "step_timer")


def test_summary_of_a_missing_run_is_404(client: httpx.Client) -> None:
    assert client.get("/api/v1/runs/999999/summary").status_code == 404
    assert patch(client, 999999, {"summary": {"a": 1}}).status_code == 404


def test_a_tie_kept_later_leaves_the_time_the_run_converged(client: httpx.Client) -> None:
    """Under a checkpoint that breaks ties by the validation loss, best_step (the model to keep) moves to a
    later evaluation at the same best value; the run converged at the first one, and the summary says both."""
    policy = {
        "monitor": "val/acc",
        "mode": "max",
        "rules": [{"rule": "checkpoint", "tie_loss_key": "val/loss"}, {"rule": "patience", "patience": 3}],
    }
    run = create_run(client, policy)
    t0 = datetime.fromisoformat(client.get(f"/api/v1/runs/{run['id']}").json()["started_at"]).timestamp()
    accuracy = [0.5, 0.9, 0.9, 0.9, 0.9, 0.8]  # best at step 1; its ties at 2 and 3 have lower losses
    loss = [1.0, 0.6, 0.5, 0.4, 0.45, 0.7]
    points = [
        {"key": key, "step": s, "value": v, "wall_time": t0 + 10.0 * (s + 1)}
        for s in range(len(accuracy))
        for key, v in (("val/acc", accuracy[s]), ("val/loss", loss[s]))
    ]
    answer = client.post(f"/api/v1/runs/{run['id']}/metrics", json={"batch_id": "t", "points": points})
    assert answer.json()["decision"]["action"] == "stop"
    convergence = client.get(f"/api/v1/runs/{run['id']}/summary").json()["convergence"]
    assert (convergence["best_step"], convergence["best_value"]) == (3, 0.9)
    assert convergence["time_to_best_s"] == pytest.approx(40.0, abs=1e-3)
    assert convergence["first_best_step"] == 1
    assert convergence["time_to_first_best_s"] == pytest.approx(20.0, abs=1e-3)
