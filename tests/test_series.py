"""Downsampling for drawing: at most the requested points, always first, last and each bucket's extremes."""

from __future__ import annotations

import math

import httpx
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import create_run
from tracker.services.series import select_indexes


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.one_of(st.floats(-1e6, 1e6), st.just(math.nan)), min_size=1, max_size=3000),
    limit=st.integers(min_value=2, max_value=500),
)
def test_selection_keeps_first_last_and_extremes_within_the_limit(values: list[float], limit: int) -> None:
    array = np.array(values, dtype=np.float64)
    chosen = select_indexes(array, limit)
    assert len(chosen) <= limit
    assert list(chosen) == sorted(set(chosen.tolist()))
    assert chosen[0] == 0
    assert chosen[-1] == len(values) - 1
    finite = array[~np.isnan(array)]
    if len(finite) and limit >= 4:
        kept = array[chosen]
        assert np.nanmin(kept) == finite.min()
        assert np.nanmax(kept) == finite.max()


def test_series_endpoint_downsamples_a_long_run(client: httpx.Client) -> None:
    run = create_run(client)
    n = 20_000
    rng = np.random.default_rng(0)
    values = np.cumsum(rng.normal(size=n))
    spike = 12_345
    values[spike] = 1e6  # a spike a plot must not lose
    for start in range(0, n, 5000):
        points = [{"key": "loss", "step": s, "value": float(values[s])} for s in range(start, start + 5000)]
        assert (
            client.post(
                f"/api/v1/runs/{run['id']}/metrics", json={"batch_id": f"b{start}", "points": points}
            ).status_code
            == 200
        )
    page = client.get(f"/api/v1/runs/{run['id']}/series", params={"key": "loss", "points": 2000}).json()
    assert page["total"] == n
    assert page["downsampled"] is True
    assert len(page["points"]) <= 2000
    steps = [p["step"] for p in page["points"]]
    assert steps[0] == 0
    assert steps[-1] == n - 1
    assert spike in steps
    assert steps == sorted(steps)
    assert min(p["value"] for p in page["points"]) == float(values.min())
    short = client.get(f"/api/v1/runs/{run['id']}/series", params={"key": "loss", "points": 50_000}).json()
    assert short["downsampled"] is False
    assert len(short["points"]) == n
    assert (
        client.get(f"/api/v1/runs/{run['id']}/series", params={"key": "loss", "points": 3}).status_code == 422
    )
