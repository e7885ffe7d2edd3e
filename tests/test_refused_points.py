"""A point the tracker cannot store never takes good points with it: the SDK drops it alone before sending,
counts and names it; and a batch the tracker refuses for some of its points is sent again without them."""

from __future__ import annotations

import logging
import time

import httpx
import pytest
from fastapi.testclient import TestClient

import plateau_tracker as plateau
from plateau_tracker._refusal import without_refused
from tests._server import TrackerProcess
from tests.conftest import create_run


def _steps(tracker: TrackerProcess, run_id: int, key: str) -> list[int]:
    page = httpx.get(
        f"{tracker.url}/api/v1/runs/{run_id}/history", params={"key": key, "limit": 10_000}, timeout=30
    ).json()
    return [point["step"] for point in page["points"]]


@pytest.mark.parametrize("bad_key", ["k" * 300, "nul\x00key", "lone\udc80surrogate", ""])
def test_a_bad_key_in_a_tight_loop_loses_no_good_point(
    tracker: TrackerProcess, bad_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    """300 steps logged in a tight loop (one batch), the monitored key replaced by a bad one at step 150:
    299 points stored, 1 invalid, 0 lost."""
    caplog.set_level(logging.WARNING, logger="plateau")
    run = plateau.init(
        project="refused", url=tracker.url, monitor="m", mode="min", rules=[{"rule": "checkpoint"}]
    )
    for step in range(300):
        run.log({bad_key: 1.0} if step == 150 else {"m": 1.0 / (step + 1)}, step=step)
    assert run.finish(timeout=30) == 0
    assert _steps(tracker, run.id, "m") == [s for s in range(300) if s != 150]
    assert (run.invalid_points, run.lost_points) == (1, 0)
    assert "at step 150" in caplog.text
    assert "counted in run.invalid_points" in caplog.text


def test_a_step_or_rank_out_of_range_is_dropped_alone(
    tracker: TrackerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="plateau")
    with plateau.init(project="refused", url=tracker.url) as run:
        run.log({"a": 1.0, "b": 2.0}, step=0)
        run.log({"a": 1.0, "b": 2.0}, step=2**63)
        run._sender.submit(1, {"a": 3.0}, rank=200_000)
        run.log({"a": 4.0}, step=2)
        assert run.flush(20)
        run_id = run.id
    assert _steps(tracker, run_id, "a") == [0, 2]
    assert (run.invalid_points, run.lost_points) == (3, 0)
    assert "step must be a whole number from 0 to 2**62" in caplog.text
    assert "rank must be a whole number from 0 to 100,000, got 200000" in caplog.text


def test_a_422_that_names_points_leaves_the_rest_to_send_again(app_client: TestClient) -> None:
    """The tracker's own 422 for a batch with a too-long key and a step past 2**62: what is left is every
    other point, and the refused are named by key and step."""
    run = create_run(app_client)
    t = time.time()
    series = [
        {"key": "m", "rank": 0, "steps": [0, 1, 2], "values": [1.0, 2.0, 3.0], "wall_times": [t, t, t]},
        {"key": "k" * 300, "rank": 0, "steps": [1], "values": [1.0], "wall_times": [t]},
        {"key": "x", "rank": 0, "steps": [0, 2**63, 5], "values": [1.0, 2.0, 3.0], "wall_times": [t] * 3},
    ]
    answer = app_client.post(f"/api/v1/runs/{run['id']}/metrics", json={"batch_id": "b", "series": series})
    assert answer.status_code == 422
    rest = without_refused(series, answer.json()["detail"])
    assert rest is not None
    kept, refused = rest
    assert sorted(refused) == sorted([("k" * 300, 1), ("x", 2**63)])
    assert [(c["key"], c["steps"], c["values"]) for c in kept] == [
        ("m", [0, 1, 2], [1.0, 2.0, 3.0]),
        ("x", [0, 5], [1.0, 3.0]),
    ]
    again = app_client.post(f"/api/v1/runs/{run['id']}/metrics", json={"batch_id": "b", "series": kept})
    assert again.status_code == 200, again.text
    assert again.json()["accepted"] == 5


@pytest.mark.parametrize(
    "detail",
    [
        None,
        "run 3 does not exist",
        [],
        [{"loc": ["body", "batch_id"], "msg": "too long"}],
        [{"loc": ["body", "series", 9]}],
    ],
)
def test_a_refusal_that_names_no_point_of_the_batch_salvages_nothing(detail: object) -> None:
    series = [{"key": "m", "rank": 0, "steps": [0], "values": [1.0], "wall_times": [0.0]}]
    assert without_refused(series, detail) is None
