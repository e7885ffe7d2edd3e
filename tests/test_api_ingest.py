"""Ingest: idempotent batches, duplicates, bad input refused with the field named and nothing written."""

from __future__ import annotations

import json
import math
import struct
import time
from collections.abc import Iterator
from datetime import datetime

import httpx
import pytest

from tests.conftest import create_run

POLICY = {"monitor": "loss", "mode": "min", "rules": [{"rule": "patience", "patience": 2}]}


# No server process needed: the `client` fixture is the tracker's app in this process.
pytestmark = pytest.mark.in_process


def ingest(client: httpx.Client, run_id: int, batch_id: str, points: list[dict]) -> httpx.Response:
    return client.post(f"/api/v1/runs/{run_id}/metrics", json={"batch_id": batch_id, "points": points})


def stored_steps(client: httpx.Client, run_id: int, key: str = "loss") -> list[int]:
    response = client.get(f"/api/v1/runs/{run_id}/history", params={"key": key})
    if response.status_code == 404:
        return []
    return [p["step"] for p in response.json()["points"]]


def test_replayed_batch_is_acknowledged_and_not_applied_twice(client: httpx.Client) -> None:
    run = create_run(client, POLICY)
    points = [{"key": "loss", "step": s, "value": v} for s, v in enumerate([1.0, 2.0, 3.0])]
    first = ingest(client, run["id"], "batch-1", points).json()
    again = ingest(client, run["id"], "batch-1", points).json()
    assert (first["accepted"], first["duplicates"], first["replayed"]) == (3, 0, False)
    assert (again["accepted"], again["duplicates"], again["replayed"]) == (0, 3, True)
    assert again["decision"] == first["decision"]
    decisions = client.get(f"/api/v1/runs/{run['id']}/decisions").json()
    assert decisions["count"] == 1  # the stop at step 2, recorded once
    assert stored_steps(client, run["id"]) == [0, 1, 2]


def test_a_point_logged_twice_keeps_its_first_value(client: httpx.Client) -> None:
    run = create_run(client)
    ingest(client, run["id"], "a", [{"key": "loss", "step": 0, "value": 1.0}])
    answer = ingest(
        client,
        run["id"],
        "b",
        [{"key": "loss", "step": 0, "value": 9.0}, {"key": "loss", "step": 1, "value": 2.0}],
    ).json()
    assert (answer["accepted"], answer["duplicates"]) == (1, 1)
    page = client.get(f"/api/v1/runs/{run['id']}/history", params={"key": "loss"}).json()
    assert [p["value"] for p in page["points"]] == [1.0, 2.0]


@pytest.mark.parametrize(
    ("points", "loc"),
    [
        ([{"key": "loss", "step": 0, "value": "abc"}], ["body", "points", 0, "value"]),
        ([{"key": "loss", "step": 0, "value": True}], ["body", "points", 0, "value"]),
        ([{"key": "loss", "step": 0, "value": "1.5"}], ["body", "points", 0, "value"]),
        ([{"key": "loss", "step": 0, "value": None}], ["body", "points", 0, "value"]),
        (
            [{"key": "loss", "step": 0, "value": 1.0}, {"key": "loss", "step": -1, "value": 1.0}],
            ["body", "points", 1, "step"],
        ),
        ([{"key": "loss", "step": 1.5, "value": 1.0}], ["body", "points", 0, "step"]),
        ([{"key": "", "step": 0, "value": 1.0}], ["body", "points", 0, "key"]),
        ([{"key": "loss", "step": 0}], ["body", "points", 0, "value"]),
        ([{"key": "loss", "step": 0, "value": 1.0, "rank": -1}], ["body", "points", 0, "rank"]),
        ([{"key": "loss", "step": 0, "value": 1.0, "colour": "red"}], ["body", "points", 0, "colour"]),
    ],
)
def test_bad_points_are_refused_with_the_field_named_and_nothing_written(
    client: httpx.Client, points: list[dict], loc: list
) -> None:
    run = create_run(client, POLICY)
    response = ingest(client, run["id"], "bad", [{"key": "loss", "step": 5, "value": 1.0}, *points])
    assert response.status_code == 422
    detail = response.json()["detail"]
    shifted = [*loc[:2], loc[2] + 1, *loc[3:]]  # the good point is first
    assert any(d["loc"] == shifted for d in detail), detail
    assert stored_steps(client, run["id"]) == []
    # The refused batch id was not recorded: the same id with good points is applied.
    retry = ingest(client, run["id"], "bad", [{"key": "loss", "step": 5, "value": 1.0}]).json()
    assert retry["accepted"] == 1


def test_unknown_run_is_404_and_names_it(client: httpx.Client) -> None:
    response = ingest(client, 987654, "x", [{"key": "loss", "step": 0, "value": 1.0}])
    assert response.status_code == 404
    assert "run 987654" in response.json()["detail"]
    assert client.get("/api/v1/runs/987654").status_code == 404
    assert client.get("/api/v1/runs/987654/decision").status_code == 404


@pytest.mark.parametrize(
    ("body", "loc", "kind"),
    [
        ("{not json", ["body"], "json_invalid"),
        ("[]", ["body"], "model_type"),
        ('{"points": []}', ["body", "batch_id"], "missing"),
        ('{"batch_id": "x"}', ["body"], "value_error"),
        ('{"batch_id": "x", "points": {"key": "loss"}}', ["body", "points"], "list_type"),
        (
            '{"batch_id": "x", "series": [{"key": "loss", "steps": [0]}]}',
            ["body", "series", 0, "values"],
            "missing",
        ),
    ],
)
def test_malformed_bodies_are_refused(client: httpx.Client, body: str, loc: list, kind: str) -> None:
    run = create_run(client)
    response = client.post(
        f"/api/v1/runs/{run['id']}/metrics", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    assert (response.json()["detail"][0]["loc"], response.json()["detail"][0]["type"]) == (loc, kind)


def ingest_series(client: httpx.Client, run_id: int, batch_id: str, series: list[dict]) -> httpx.Response:
    # json.dumps, not httpx's json=: the columns carry NaN and infinities as JSON literals, as the SDK sends.
    return client.post(
        f"/api/v1/runs/{run_id}/metrics",
        content=json.dumps({"batch_id": batch_id, "series": series}),
        headers={"content-type": "application/json"},
    )


def test_series_form_stores_columns_with_non_finite_values_and_judges_them(client: httpx.Client) -> None:
    t0 = float(int(time.time()))  # wall times are the trainer's clock: near the tracker's
    run = create_run(client, POLICY)
    answer = ingest_series(
        client,
        run["id"],
        "s1",
        [
            {
                "key": "loss",
                "steps": [0, 1, 2],
                "values": [1.0, 2, "Infinity"],
                "wall_times": [t0, t0 + 1.0, t0 + 2.5],
            },
            {"key": "grad", "rank": 3, "steps": [0, 1, 1], "values": [math.nan, -math.inf, 7.0]},
        ],
    ).json()
    # grad's step 1 comes twice in the batch: the first value is kept, the second counted as a duplicate.
    assert (answer["accepted"], answer["duplicates"]) == (5, 1)
    assert answer["decision"]["action"] == "stop"  # patience 2 after the best at step 0
    loss = client.get(f"/api/v1/runs/{run['id']}/history", params={"key": "loss"}).json()["points"]
    assert [(p["step"], p["value"], p["wall_time"]) for p in loss] == [
        (0, 1.0, t0),
        (1, 2.0, t0 + 1.0),
        (2, "Infinity", t0 + 2.5),
    ]
    grad = client.get(f"/api/v1/runs/{run['id']}/history", params={"key": "grad", "rank": 3}).json()["points"]
    assert [(p["step"], p["value"]) for p in grad] == [(0, "NaN"), (1, "-Infinity")]


def test_series_and_points_in_one_batch_share_duplicate_rules(client: httpx.Client) -> None:
    run = create_run(client)
    ingest(client, run["id"], "a", [{"key": "loss", "step": 0, "value": 1.0}])
    body = {
        "batch_id": "b",
        "points": [{"key": "loss", "step": 1, "value": 2.0}],
        "series": [{"key": "loss", "steps": [0, 1, 2], "values": [9.0, 9.0, 3.0]}],
    }
    answer = client.post(f"/api/v1/runs/{run['id']}/metrics", json=body).json()
    assert (answer["accepted"], answer["duplicates"]) == (2, 2)
    page = client.get(f"/api/v1/runs/{run['id']}/history", params={"key": "loss"}).json()
    assert [p["value"] for p in page["points"]] == [1.0, 2.0, 3.0]


@pytest.mark.parametrize(
    ("series", "loc"),
    [
        ({"key": "loss", "steps": [0, 1], "values": [1.0]}, ["body", "series", 1]),
        ({"key": "loss", "steps": [0], "values": [1.0], "wall_times": [1.0, 2.0]}, ["body", "series", 1]),
        ({"key": "loss", "steps": [0, -1], "values": [1.0, 2.0]}, ["body", "series", 1, "steps", 1]),
        ({"key": "loss", "steps": [0, 1.5], "values": [1.0, 2.0]}, ["body", "series", 1, "steps", 1]),
        ({"key": "loss", "steps": [0, 1], "values": [1.0, "1.5"]}, ["body", "series", 1, "values"]),
        ({"key": "loss", "steps": [0, 1], "values": [1.0, True]}, ["body", "series", 1, "values"]),
        ({"key": "", "steps": [0], "values": [1.0]}, ["body", "series", 1, "key"]),
        ({"key": "loss", "rank": -2, "steps": [0], "values": [1.0]}, ["body", "series", 1, "rank"]),
        ({"key": "loss", "steps": [0], "values": [1.0], "wall_times": ["NaN"]}, ["body", "series", 1]),
        ({"key": "loss", "steps": [0], "values": [1.0], "wall_times": ["12.5"]}, ["body", "series", 1]),
    ],
)
def test_bad_series_are_refused_with_the_field_named_and_nothing_written(
    client: httpx.Client, series: dict, loc: list
) -> None:
    run = create_run(client, POLICY)
    good = {"key": "loss", "steps": [5], "values": [1.0]}
    response = ingest_series(client, run["id"], "bad", [good, series])
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert any(d["loc"][: len(loc)] == loc for d in detail), detail
    assert stored_steps(client, run["id"]) == []
    assert ingest_series(client, run["id"], "bad", [good]).json()["accepted"] == 1


def test_non_integer_run_id_is_refused(client: httpx.Client) -> None:
    response = ingest(client, "abc", "x", [])  # type: ignore[arg-type]
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["path", "run_id"]


def test_oversized_body_is_refused_before_reading(client: httpx.Client) -> None:
    run = create_run(client)
    response = client.post(
        f"/api/v1/runs/{run['id']}/metrics",
        content=b"{" + b" " * (33 * 1024 * 1024) + b"}",
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 413


def test_oversized_body_without_a_length_is_refused_and_nothing_stored(client: httpx.Client) -> None:
    run = create_run(client)
    points = json.dumps([{"key": "loss", "step": 0, "value": 1.0}]).encode()

    def chunks() -> Iterator[bytes]:  # a generator: httpx sends it chunked, with no Content-Length
        yield b'{"batch_id":"big","points":' + points + b',"pad":"'
        for _ in range(33):
            yield b" " * (1024 * 1024)
        yield b'"}'

    response = client.post(
        f"/api/v1/runs/{run['id']}/metrics", content=chunks(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert "over the limit" in response.json()["detail"]
    assert stored_steps(client, run["id"]) == []
    small = client.post(
        f"/api/v1/runs/{run['id']}/metrics",
        content=iter([b'{"batch_id":"small","points":', points, b"}"]),
        headers={"content-type": "application/json"},
    )
    assert small.json()["accepted"] == 1  # a chunked body within the limit is read whole and stored


def test_errors_on_the_ingest_path_are_the_routes_own(client: httpx.Client) -> None:
    """Batches are served before FastAPI's routing; anything but success is answered by the route."""
    run = create_run(client)
    wrong_method = client.get(f"/api/v1/runs/{run['id']}/metrics")
    assert wrong_method.status_code == 405
    for huge in (2**31, 2**63, 10**30):  # past the id columns' range (32-bit on PostgreSQL)
        huge_id = ingest(client, huge, "x", [])
        assert huge_id.status_code == 422
        assert huge_id.json()["detail"][0]["loc"] == ["path", "run_id"]
    huge_hook = client.delete(f"/api/v1/projects/tests/webhooks/{2**31}")
    assert huge_hook.status_code == 422
    assert huge_hook.json()["detail"][0]["loc"] == ["path", "webhook_id"]
    unknown = ingest(client, 2**31 - 1, "x", [])
    assert unknown.status_code == 404
    assert "does not exist" in unknown.json()["detail"]
    invalid = client.post(
        f"/api/v1/runs/{run['id']}/metrics",
        content=b'{"batch_id": 3}',
        headers={"content-type": "application/json"},
    )
    assert invalid.status_code == 422
    assert invalid.json()["detail"][0]["loc"] == ["body", "batch_id"]
    ok = ingest(client, run["id"], "fine", [{"key": "loss", "step": 0, "value": 1.0}])
    assert ok.status_code == 200
    assert ok.headers["content-type"] == "application/json"
    assert ok.json()["accepted"] == 1


def test_a_batch_moves_the_runs_heartbeat(client: httpx.Client) -> None:
    run = create_run(client)
    before = client.get(f"/api/v1/runs/{run['id']}").json()["last_heartbeat"]
    time.sleep(0.01)
    ingest(client, run["id"], "beat", [{"key": "loss", "step": 0, "value": 1.0}])
    after = client.get(f"/api/v1/runs/{run['id']}").json()["last_heartbeat"]
    assert datetime.fromisoformat(after) > datetime.fromisoformat(before)


def test_bad_policy_is_refused_with_the_field_named(client: httpx.Client) -> None:
    response = client.post(
        "/api/v1/runs",
        json={
            "project": "tests",
            "policy": {"monitor": "loss", "rules": [{"rule": "patience", "patience": 0}]},
        },
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "policy", "rules", 0, "patience", "patience"]
    bad_mode = client.post(
        "/api/v1/runs", json={"project": "tests", "policy": {"monitor": "loss", "mode": "up"}}
    )
    assert bad_mode.json()["detail"][0]["loc"] == ["body", "policy", "mode"]


def test_run_key_joins_the_same_run(client: httpx.Client) -> None:
    first = client.post("/api/v1/runs", json={"project": "tests", "experiment": "j", "run_key": "job-42"})
    second = client.post("/api/v1/runs", json={"project": "tests", "experiment": "j", "run_key": "job-42"})
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["id"] == second.json()["id"]
    assert second.json()["joined"] is True
    elsewhere = client.post("/api/v1/runs", json={"project": "tests", "experiment": "k", "run_key": "job-42"})
    assert elsewhere.status_code == 409


def test_list_get_and_finish(client: httpx.Client) -> None:
    run = create_run(client, POLICY, experiment="listing", name="alpha", config={"lr": 0.1})
    listed = client.get("/api/v1/runs", params={"project": "tests", "experiment": "listing"}).json()
    assert [r["id"] for r in listed["data"]] == [run["id"]]
    assert listed["data"][0]["config"] == {"lr": 0.1}
    finished = client.post(f"/api/v1/runs/{run['id']}/finish", json={"status": "stopped"}).json()
    assert finished["status"] == "stopped"
    assert finished["ended_at"] is not None
    assert (
        client.get("/api/v1/runs", params={"status": "stopped", "experiment": "listing"}).json()["count"] == 1
    )
    bad = client.post(f"/api/v1/runs/{run['id']}/finish", json={"status": "exploded"})
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["body", "status"]


def test_openapi_document_is_served(client: httpx.Client) -> None:
    document = client.get("/openapi.json").json()
    paths = document["paths"]
    assert "/api/v1/runs/{run_id}/metrics" in paths
    # The ingest route parses its own body; its schema is still documented, both forms included.
    body = paths["/api/v1/runs/{run_id}/metrics"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/MetricBatch"}
    schemas = document["components"]["schemas"]
    assert {"MetricBatch", "PointIn", "SeriesIn"} <= schemas.keys()
    assert {"points", "series", "batch_id"} <= schemas["MetricBatch"]["properties"].keys()
    assert client.get("/docs").status_code == 200


def test_history_reads_back_as_columns_page_by_page(client: httpx.Client) -> None:
    """``form=columns`` gives the same points as ``points``, NaN and +-inf spelled alike, in pages."""
    t0 = float(int(time.time()))
    run = create_run(client)
    values = [0.5, math.nan, math.inf, -math.inf, 0.25, 1e-300, -2.0]
    body = {
        "batch_id": "c",
        "series": [
            {"key": "loss", "steps": [0, 2, 4, 6, 8, 10, 12], "values": values, "wall_times": [t0] * 7}
        ],
    }
    response = client.post(
        f"/api/v1/runs/{run['id']}/metrics",
        content=json.dumps(body),
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 200, response.text
    url = f"/api/v1/runs/{run['id']}/history"
    points = client.get(url, params={"key": "loss"}).json()["points"]
    pages, start = [], 0
    while start is not None:
        page = client.get(
            url, params={"key": "loss", "form": "columns", "limit": 3, "start_step": start}
        ).json()
        assert set(page) == {"run_id", "key", "rank", "steps", "values", "wall_times", "next_step"}
        assert len(page["steps"]) == len(page["values"]) == len(page["wall_times"]) <= 3
        pages.append(page)
        start = page["next_step"]
    assert len(pages) == 3
    steps = [s for page in pages for s in page["steps"]]
    read = [v for page in pages for v in page["values"]]
    assert steps == [p["step"] for p in points] == [0, 2, 4, 6, 8, 10, 12]
    assert read == [p["value"] for p in points] == [0.5, "NaN", "Infinity", "-Infinity", 0.25, 1e-300, -2.0]
    assert [w for page in pages for w in page["wall_times"]] == [t0] * 7
    bad = client.get(url, params={"key": "loss", "form": "rows"})
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["query", "form"]


def test_history_reads_back_packed_page_by_page(client: httpx.Client) -> None:
    """``form=binary``: the steps, values and wall times as packed little-endian columns, NaN and +-inf bit
    for bit, the page's size and the next page's step in headers; pages of up to 1,000,000 (JSON: 100,000)."""
    t0 = float(int(time.time()))
    run = create_run(client)
    values = [0.5, math.nan, math.inf, -math.inf, 0.25, 5e-324, -2.0]
    series = [{"key": "loss", "steps": [0, 2, 4, 6, 8, 10, 2**62], "values": values, "wall_times": [t0] * 7}]
    sent = client.post(
        f"/api/v1/runs/{run['id']}/metrics",
        content=json.dumps({"batch_id": "b", "series": series}),
        headers={"content-type": "application/json"},
    )
    assert sent.status_code == 200, sent.text
    url = f"/api/v1/runs/{run['id']}/history"
    steps: list[int] = []
    read: list[float] = []
    walls: list[float] = []
    start: int | None = 0
    while start is not None:
        page = client.get(url, params={"key": "loss", "form": "binary", "limit": 3, "start_step": start})
        assert page.status_code == 200, page.text
        assert page.headers["content-type"] == "application/octet-stream"
        count = int(page.headers["x-plateau-points"])
        assert len(page.content) == 24 * count
        assert 1 <= count <= 3
        steps += struct.unpack(f"<{count}q", page.content[: 8 * count])
        read += struct.unpack(f"<{count}d", page.content[8 * count : 16 * count])
        walls += struct.unpack(f"<{count}d", page.content[16 * count :])
        following = page.headers.get("x-plateau-next-step")
        start = None if following is None else int(following)
    assert steps == [0, 2, 4, 6, 8, 10, 2**62]
    assert [struct.pack("<d", v) for v in read] == [struct.pack("<d", v) for v in values]
    assert walls == [t0] * 7
    assert client.get(url, params={"key": "loss", "form": "binary", "limit": 1_000_000}).status_code == 200
    for form, limit in (("columns", 100_001), ("points", 100_001), ("binary", 1_000_001)):
        refused = client.get(url, params={"key": "loss", "form": form, "limit": limit})
        assert refused.status_code == 422, (form, refused.text)
        assert refused.json()["detail"][0]["loc"] == ["query", "limit"]
    missing = client.get(url, params={"key": "nope", "form": "binary"})
    assert missing.status_code == 404


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"batch_id": "\x00", "points": []}, ["body", "batch_id"]),
        (
            {"batch_id": "n", "points": [{"key": "lo\x00ss", "step": 0, "value": 1.0}]},
            ["body", "points", 0, "key"],
        ),
        (
            {"batch_id": "n", "series": [{"key": "\x00", "steps": [0], "values": [1.0]}]},
            ["body", "series", 0, "key"],
        ),
    ],
)
def test_a_nul_character_is_refused_naming_the_field(client: httpx.Client, body: dict, loc: list) -> None:
    """PostgreSQL's text cannot hold NUL: both stores refuse it with a 422, never a 500."""
    run = create_run(client)
    response = client.post(f"/api/v1/runs/{run['id']}/metrics", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == loc
    assert client.post("/api/v1/runs", json={"project": "p\x00"}).status_code == 422
