"""Bad input never produces a 5xx, and never loses what was accepted (hypothesis against a real server)."""

from __future__ import annotations

import json
import math
import uuid

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import create_run

FUZZED = {"requests": 0, "5xx": 0}

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
point = st.fixed_dictionaries(
    {"key": st.one_of(st.text(max_size=300), json_value), "step": json_value, "value": json_value},
    optional={"rank": json_value, "wall_time": json_value, "extra": json_value},
)
batch = st.one_of(
    json_value,
    st.fixed_dictionaries(
        {
            "batch_id": st.one_of(st.text(max_size=80), json_value),
            "points": st.one_of(st.lists(point, max_size=5), json_value),
        }
    ),
)


def post_raw(client: httpx.Client, path: str, body: object) -> httpx.Response:
    content = json.dumps(body, allow_nan=True)  # NaN/Infinity literals too
    response = client.post(path, content=content, headers={"content-type": "application/json"})
    FUZZED["requests"] += 1
    FUZZED["5xx"] += response.status_code >= 500
    return response


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=batch)
def test_fuzzed_ingest_bodies_get_4xx_or_200_never_5xx(client: httpx.Client, body: object) -> None:
    run = FUZZ_RUN.setdefault("id", create_run(client)["id"])
    response = post_raw(client, f"/api/v1/runs/{run}/metrics", body)
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert response.json()["detail"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.one_of(
        json_value,
        st.fixed_dictionaries(
            {"project": json_value},
            optional={
                "experiment": json_value,
                "policy": json_value,
                "config": json_value,
                "planned_steps": json_value,
                "run_key": json_value,
            },
        ),
    )
)
def test_fuzzed_run_creation_never_5xx(client: httpx.Client, body: object) -> None:
    response = post_raw(client, "/api/v1/runs", body)
    assert response.status_code < 500, response.text


FUZZ_RUN: dict[str, int] = {}


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ("[" * 100_000 + "]" * 100_000, 422),  # deep JSON: refused by the parser, as invalid JSON
        ('{"batch_id": "x", "points": [{"key": "k", "step": 4611686018427387905, "value": 1}]}', 422),
        ('{"batch_id": "x", "points": [{"key": "k", "step": 1e400, "value": 1}]}', 422),
        # A literal float64 cannot hold is refused, not stored as inf (Infinity is spelled out when meant).
        ('{"batch_id": "x", "points": [{"key": "k", "step": 1, "value": 1e400}]}', 422),
        ('{"batch_id": "x", "points": [{"key": "k", "step": 1, "value": Infinity}]}', 200),
        ('{"batch_id": "x", "points": [{"key": "k", "step": 1, "value": 1, "rank": 100001}]}', 422),
        ('{"batch_id": "' + "x" * 65 + '", "points": []}', 422),
        ("\xff\xfe", 422),
    ],
)
def test_edge_bodies_are_handled_as_documented(client: httpx.Client, body: str, status: int) -> None:
    run = create_run(client)["id"]
    response = client.post(
        f"/api/v1/runs/{run}/metrics",
        content=body.encode("utf-8", "surrogateescape"),
        headers={"content-type": "application/json"},
    )
    FUZZED["requests"] += 1
    FUZZED["5xx"] += response.status_code >= 500
    assert response.status_code == status, response.text


def test_accepted_points_survive_the_fuzzing(client: httpx.Client) -> None:
    """Runs written before a storm of bad requests still read back exactly, NaN and inf included."""
    run = create_run(client)["id"]
    values = [0.5, math.nan, math.inf, -math.inf, 1e-300]
    post_raw(
        client,
        f"/api/v1/runs/{run}/metrics",
        {
            "batch_id": uuid.uuid4().hex,
            "points": [{"key": "v", "step": s, "value": v} for s, v in enumerate(values)],
        },
    )
    for bad in (
        {"batch_id": 1},
        {"points": "x"},
        [1, 2],
        "x",
        {"batch_id": "b", "points": [{"key": "v", "step": 0}]},
    ):
        post_raw(client, f"/api/v1/runs/{run}/metrics", bad)
    page = client.get(f"/api/v1/runs/{run}/history", params={"key": "v"}).json()
    assert [p["value"] for p in page["points"]] == [0.5, "NaN", "Infinity", "-Infinity", 1e-300]
    print(f"fuzzed requests so far: {FUZZED['requests']}, 5xx: {FUZZED['5xx']}")
    assert FUZZED["5xx"] == 0
