"""``POST /api/v1/batches``: many runs' batches in one request, each line stored and answered on its own,
against the shared tracker (a real uvicorn server; PostgreSQL with PLATEAU_TEST_BACKEND=postgres)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx

from tests.conftest import create_run

_POLICY = {"monitor": "loss", "mode": "min", "rules": [{"rule": "patience", "patience": 1}]}


def _line(run_id: int, batch_id: str, key: str, steps: list[int], values: list[Any]) -> str:
    series = [{"key": key, "steps": steps, "values": values}]
    return json.dumps({"run_id": run_id, "batch_id": batch_id, "series": series})


def _post(client: httpx.Client, lines: list[str]) -> httpx.Response:
    body = "\n".join(lines) + "\n"
    return client.post("/api/v1/batches", content=body, headers={"content-type": "application/x-ndjson"})


def _history(client: httpx.Client, run_id: int, key: str) -> list[tuple[int, Any]]:
    page = client.get(f"/api/v1/runs/{run_id}/history", params={"key": key})
    if page.status_code == 404:
        return []
    return [(point["step"], point["value"]) for point in page.json()["points"]]


def test_each_line_is_stored_and_judged_as_its_own_route_would(client: httpx.Client) -> None:
    first, second = create_run(client, _POLICY), create_run(client, _POLICY)
    answer = _post(
        client,
        [
            _line(first["id"], "a1", "loss", [0, 1, 2], [1.0, 2.0, 3.0]),  # worse twice: patience 1 stops
            _line(second["id"], "b1", "loss", [0, 1], [1.0, 0.5]),
            _line(first["id"], "t1", "train/loss", [0, 1, 2], [float("nan"), 0.2, 0.1]),
        ],
    )
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    expected = [(first["id"], 200), (second["id"], 200), (first["id"], 200)]
    assert [(r["run_id"], r["status"]) for r in results] == expected
    assert results[0]["answer"]["decision"]["action"] == "stop"
    assert results[0]["answer"]["judged_step"] == 2
    assert results[1]["answer"]["decision"]["action"] == "continue"  # improving: patience waits
    assert results[1]["answer"]["judged_step"] == 1
    assert results[1]["answer"]["accepted"] == 2
    assert (
        results[2]["answer"]["decision"]["action"] == "stop"
    )  # the run's latest decision, as its route says
    assert _history(client, first["id"], "loss") == [(0, 1.0), (1, 2.0), (2, 3.0)]
    assert _history(client, first["id"], "train/loss") == [(0, "NaN"), (1, 0.2), (2, 0.1)]
    assert _history(client, second["id"], "loss") == [(0, 1.0), (1, 0.5)]

    again = _post(client, [_line(second["id"], "b1", "loss", [0, 1], [1.0, 0.5])]).json()["results"][0]
    assert again["answer"]["replayed"] is True
    assert again["answer"]["accepted"] == 0


def test_a_refused_line_refuses_nothing_else(client: httpx.Client) -> None:
    run = create_run(client, _POLICY)
    answer = _post(
        client,
        [
            _line(run["id"], "ok-1", "loss", [0], [1.0]),
            _line(run["id"], "bad", "loss", [-1], [1.0]),  # a negative step: the line's own 422
            _line(2**31 - 2, "gone", "loss", [0], [1.0]),  # no such run: its 404
            "{not json",
            json.dumps({"batch_id": "no-run", "points": [{"key": "loss", "step": 0, "value": 1.0}]}),
            _line(run["id"], "ok-2", "loss", [1], [0.5]),
        ],
    )
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert [r["status"] for r in results] == [200, 422, 404, 422, 422, 200]
    assert [r["run_id"] for r in results] == [run["id"], run["id"], 2**31 - 2, None, None, run["id"]]
    assert ["body", "series", 0, "steps", 0] in [error["loc"] for error in results[1]["detail"]]
    assert "does not exist" in json.dumps(results[2]["detail"])
    assert ["body", "run_id"] in [error["loc"] for error in results[4]["detail"]]
    assert _history(client, run["id"], "loss") == [(0, 1.0), (1, 0.5)]


def test_a_body_of_no_lines_is_refused_naming_it(client: httpx.Client) -> None:
    answer = _post(client, ["", "  "])
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body"]


def test_the_openapi_document_declares_the_lines(client: httpx.Client) -> None:
    document = client.get("/openapi.json").json()
    operation = document["paths"]["/api/v1/batches"]["post"]
    assert operation["requestBody"]["content"]["application/x-ndjson"]["schema"]["$ref"].endswith("/RunBatch")
    line = document["components"]["schemas"]["RunBatch"]
    assert {"run_id", "batch_id", "series", "points"} <= set(line["properties"])


def test_a_key_first_seen_in_a_request_that_a_refused_line_rolled_back_still_stores(
    client: httpx.Client,
) -> None:
    """The lines of a request share one transaction, run again a savepoint each when one of them fails:
    a key the first attempt created (and a later line read) must not be taken for stored."""
    run = create_run(client, _POLICY)
    key = f"fresh/{uuid.uuid4().hex[:8]}"
    first = _post(
        client,
        [
            _line(run["id"], "k1", key, [0], [1.0]),
            _line(run["id"], "k2", key, [1], [2.0]),
            _line(2**31 - 2, "gone", "loss", [0], [1.0]),
        ],
    ).json()["results"]
    assert [r["status"] for r in first] == [200, 200, 404]
    again = _post(client, [_line(run["id"], "k3", key, [2], [3.0])]).json()["results"]
    assert [r["status"] for r in again] == [200]
    assert _history(client, run["id"], key) == [(0, 1.0), (1, 2.0), (2, 3.0)]
