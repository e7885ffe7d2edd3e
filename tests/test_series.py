"""Downsampling for drawing: at most the requested points, always first, last and each bucket's extremes."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from plateau_tracker.server.db import migrate
from plateau_tracker.server.db.engine import Database, make_engine
from plateau_tracker.server.db.models import BLOCK_STEPS
from plateau_tracker.server.schemas.metrics import MetricBatch
from plateau_tracker.server.schemas.runs import RunCreate
from plateau_tracker.server.services import ingest, runs
from plateau_tracker.server.services.block_format import summarise_block
from plateau_tracker.server.services.keys import KeyCache
from plateau_tracker.server.services.series import _buckets_from_blocks, select_indexes
from tests.conftest import create_run

# No server process needed: the `client` fixture is the tracker's app in this process.
pytestmark = pytest.mark.in_process


def _walls(steps: list[int], t0: float | None = None) -> list[float]:
    """Wall times the tracker keeps as sent: the trainer's clock now, a millisecond a step."""
    base = time.time() if t0 is None else t0
    return [base + step / 1000 for step in steps]


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


def _stored(url: str) -> tuple[dict[tuple, tuple], dict[tuple, tuple], dict[tuple, tuple]]:
    """The ``metric_block`` summaries, the summaries recomputed from the packed points, keyed alike
    (run_id, key_id, rank, block), and the points: (rank, step) -> (value, wall_time)."""
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT run_id, key_id, rank, block, points, first_step, first_wall, min_value, "
                    "min_step, min_wall, max_value, max_step, max_wall, step_data, value_data, wall_data "
                    "FROM metric_block ORDER BY run_id, key_id, rank, block"
                )
            ).all()
    finally:
        engine.dispose()
    kept = {tuple(row[:4]): tuple(row[4:13]) for row in rows}
    expected, points = {}, {}
    for row in rows:
        steps = np.frombuffer(row[13], "<i8").tolist()
        values = np.frombuffer(row[14], "<f8").tolist()
        walls = np.frombuffer(row[15], "<f8").tolist()
        assert steps == sorted(set(steps))  # packed in step order, each step once
        assert all(step // BLOCK_STEPS == row[3] for step in steps)
        # Summarised from scratch, to compare with what ingest merged batch by batch.
        expected[tuple(row[:4])] = tuple(summarise_block(steps, values, walls))
        points |= {
            (row[2], step): (value, wall) for step, value, wall in zip(steps, values, walls, strict=True)
        }
    return kept, expected, points


def _same(a: dict, b: dict) -> bool:
    """Equal, NaN-aware (points hold NaN; summaries never do)."""
    return a.keys() == b.keys() and all(
        all(x == y or (x != x and y != y) for x, y in zip(a[k], b[k], strict=True)) for k in a
    )


def _ingest_awkward_series(url: str) -> dict[tuple, tuple]:
    """Batches out of step order, overlapping (the first value of a step wins), with NaN and +-inf, on
    two ranks, and a block that holds nothing but NaN; returns the points that must be stored, (rank,
    step) -> (value, wall_time)."""
    migrate.upgrade(url)
    database = Database(url)
    try:
        run = runs.create_or_join(database, RunCreate.model_validate({"project": "p", "experiment": "e"}))
        keys = KeyCache()
        rng = np.random.default_rng(7)
        sent: dict[tuple, tuple] = {}
        chunks = [(s, s + 700) for s in range(0, 6300, 700)]
        rng.shuffle(chunks)
        for number, (low, high) in enumerate([*chunks, (300, 2500)]):
            steps = list(range(low, high))
            values = [float(v) for v in rng.normal(size=len(steps))]
            for i, step in enumerate(steps):
                if step % 97 == 0 or 3072 <= step < 4096:
                    values[i] = math.nan
                elif step % 101 == 0:
                    values[i] = math.inf if step % 2 else -math.inf
            walls = _walls(steps)
            batch = MetricBatch.model_validate(
                {
                    "batch_id": f"b{number}",
                    "series": [
                        {
                            "key": "loss",
                            "rank": rank,
                            "steps": steps,
                            "values": values,
                            "wall_times": walls,
                        }
                        for rank in (0, 1)
                    ],
                }
            )
            ingest.ingest(database, keys, run.id, batch)
            for rank in (0, 1):
                for step, value, wall in zip(steps, values, walls, strict=True):
                    sent.setdefault((rank, step), (value, wall))
    finally:
        database.dispose()
    return sent


def _check_awkward_series(url: str) -> None:
    sent = _ingest_awkward_series(url)
    kept, expected, points = _stored(url)
    assert len(kept) == 2 * math.ceil(6300 / BLOCK_STEPS)  # steps 0..6299 on each of 2 ranks
    assert _same(kept, expected)
    assert _same(points, sent)  # every point once, the first value sent for its step, NaN and +-inf kept
    nan_only = [s for key, s in kept.items() if 3072 <= key[3] * BLOCK_STEPS < 4096 - BLOCK_STEPS + 1]
    assert nan_only
    assert all(summary[3] is None for summary in nan_only)  # blocks of only NaN: no min, no max


def test_blocks_hold_the_first_value_of_each_step_and_their_summaries_on_sqlite(tmp_path: Path) -> None:
    _check_awkward_series(f"sqlite:///{tmp_path / 'blocks.db'}")


def test_blocks_hold_the_first_value_of_each_step_and_their_summaries_on_postgres(
    postgres_url: str,
) -> None:
    _check_awkward_series(postgres_url)


def test_migrations_keep_points_and_summaries_stored_before_them(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    _ingest_awkward_series(url)
    kept, _, points = _stored(url)
    # Back to a point per row and no summaries (as a database made before either existed), and up again.
    migrate.downgrade(url, "0005")
    migrate.upgrade(url)
    again, expected, points_again = _stored(url)
    assert _same(again, kept)
    assert _same(again, expected)
    assert _same(points_again, points)


def test_a_long_curve_downsamples_from_block_summaries(client: httpx.Client) -> None:
    """Buckets of whole blocks: each keeps its lowest and highest finite value, or its first point when
    it holds only NaN, plus the first and last points; the same as a brute-force pass."""
    run = create_run(client)
    n, limit = 60_000, 20
    rng = np.random.default_rng(3)
    values = np.cumsum(rng.normal(size=n))
    values[40_000] = -1e9  # a dip and a spike a plot must not lose
    values[17_777] = 1e9
    buckets = (limit - 2) // 2
    span = math.ceil(n / BLOCK_STEPS)  # blocks from the first to the last
    bucket_of = (np.arange(n) // BLOCK_STEPS) * buckets // span
    values[bucket_of == 1] = math.nan  # a bucket of nothing but NaN
    t0 = time.time()
    for start in reversed(range(0, n, 10_000)):  # newest first: the summaries are merged, not appended
        steps = list(range(start, start + 10_000))
        body = {
            "batch_id": f"long{start}",
            "series": [
                {
                    "key": "long",
                    "steps": steps,
                    "values": [float(values[s]) for s in steps],
                    "wall_times": _walls(steps, t0),
                }
            ],
        }
        response = client.post(
            f"/api/v1/runs/{run['id']}/metrics",
            content=json.dumps(body),
            headers={"content-type": "application/json"},
        )
        assert response.status_code == 200, response.text
    page = client.get(f"/api/v1/runs/{run['id']}/series", params={"key": "long", "points": limit}).json()
    assert page["total"] == n
    assert page["downsampled"] is True
    expected = {0, n - 1}
    for bucket in range(buckets):
        steps = np.flatnonzero(bucket_of == bucket)
        chunk = values[steps]
        if np.isnan(chunk).all():
            expected.add(int(steps[0]))
        else:
            expected |= {int(steps[np.nanargmin(chunk)]), int(steps[np.nanargmax(chunk)])}
    got = [point["step"] for point in page["points"]]
    assert got == sorted(expected)
    assert len(got) <= limit
    assert {17_777, 40_000} <= set(got)
    by_step = {point["step"]: point for point in page["points"]}
    assert by_step[int(np.flatnonzero(bucket_of == 1)[0])]["value"] == "NaN"
    assert by_step[40_000]["value"] == -1e9
    assert by_step[17_777]["wall_time"] == _walls([17_777], t0)[0]


def test_buckets_of_block_summaries_take_the_earliest_extreme_and_never_a_nan_block() -> None:
    """Ties go to the earliest block (as a scan in step order finds them); a block of nothing but NaN
    (NULL extremes) is a bucket's pick only when the bucket holds nothing else, even beside +-inf."""
    inf = math.inf
    summaries = [
        (0, 256, 1.0, 5.0),
        (1, 256, 1.0, 5.0),  # ties block 0 on both ends
        (2, 256, None, None),
        (3, 256, None, None),  # a bucket of NaN only: its first block
        (4, 256, None, None),
        (5, 256, inf, inf),  # only +inf: the bucket's lowest and highest, not the NaN block before it
    ]
    assert _buckets_from_blocks(summaries, 3) == [
        ("min", 0),
        ("max", 0),
        ("first", 2),
        ("min", 5),
        ("max", 5),
    ]


def test_buckets_of_block_summaries_keep_block_numbers_past_float_precision() -> None:
    """Steps go up to 2^62, so blocks past 2^53: each bucket names its block exactly."""
    top = 2**62 // BLOCK_STEPS
    summaries = [(0, 256, 3.0, 4.0), (1, 256, 1.0, 9.0), (top - 2, 256, 0.5, 0.7), (top - 1, 256, 0.6, 0.9)]
    assert _buckets_from_blocks(summaries, 2) == [("min", 1), ("max", 1), ("min", top - 2), ("max", top - 1)]
    # Buckets enough that their product with the span passes 2^63: the same buckets, no overflow.
    assert _buckets_from_blocks(summaries, 1024) == _buckets_from_blocks(summaries, 2)
