"""The SDK's batcher (records in, series batches out) and its link state, without a thread or a tracker."""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import pytest

from plateau_tracker._batcher import BACKLOG_BATCHES, Batcher, Marker, Queue, Record, queued_points
from plateau_tracker._link import Link, recently_unreachable
from plateau_tracker._transport import RetryableError


def _batcher(warnings: list[tuple[str, str]] | None = None, **overrides: Any) -> Batcher:
    options: dict[str, Any] = {"monitor": "val", "rank": 0, "batch_points": 8}
    options.update(overrides)
    sink = warnings if warnings is not None else []
    return Batcher(warn=lambda topic, message: sink.append((topic, message)), **options)


T0 = 1_700_000_000.0  # a wall time the tracker takes


def _record(step: int, rank: int | None = None, **metrics: Any) -> Record:
    return (step, T0 + step, tuple(metrics), tuple(metrics.values()), rank)


def test_records_become_columns_per_key_and_rank_in_order() -> None:
    pending: Queue = deque(
        [_record(1, loss=0.5, val=0.1), _record(2, loss=0.4), _record(2, rank=3, loss=0.7)]
    )
    batch = _batcher().take(pending)
    assert batch is not None
    assert not pending
    columns = {(c["key"], c["rank"]): c for c in batch.series}
    assert columns[("loss", 0)] == {
        "key": "loss",
        "rank": 0,
        "steps": [1, 2],
        "values": [0.5, 0.4],
        "wall_times": [T0 + 1, T0 + 2],
    }
    assert columns[("loss", 3)]["steps"] == [2]
    assert columns[("val", 0)]["values"] == [0.1]
    assert batch.points == 4
    assert batch.monitor_step == 1


def test_monitor_step_is_the_newest_of_the_own_rank_only() -> None:
    pending: Queue = deque([_record(5, val=0.2), _record(9, rank=1, val=0.3), _record(3, val=0.1)])
    batch = _batcher().take(pending)
    assert batch is not None
    assert batch.monitor_step == 5
    other_rank_only: Queue = deque([_record(9, rank=1, val=0.3)])
    later = _batcher().take(other_rank_only)
    assert later is not None
    assert later.monitor_step is None


def test_values_that_are_not_numbers_are_dropped_alone_and_counted() -> None:
    warnings: list[tuple[str, str]] = []
    batcher = _batcher(warnings)
    pending: Queue = deque([_record(1, loss="high", acc=0.5, nan=math.nan, flag=True)])
    batch = batcher.take(pending)
    assert batch is not None
    values = {c["key"]: c["values"] for c in batch.series}
    assert values["acc"] == [0.5]
    assert values["flag"] == [1.0]
    assert math.isnan(values["nan"][0])
    assert "loss" not in values
    assert batcher.invalid_points == 1
    assert [topic for topic, _ in warnings] == ["value:loss"]
    assert batcher.keys_logged == {"acc", "nan", "flag"}


@pytest.mark.parametrize("step", [-1, 1.5, "3", None])
def test_a_record_with_a_bad_step_is_dropped_with_a_warning(step: Any) -> None:
    warnings: list[tuple[str, str]] = []
    pending: Queue = deque([(step, 0.0, ("loss",), (0.1,), None), _record(2, loss=0.2)])
    batch = _batcher(warnings).take(pending)
    assert batch is not None
    assert batch.points == 1
    assert batch.series[0]["steps"] == [2]
    assert [topic for topic, _ in warnings] == ["step"]


def test_keys_must_be_non_empty_strings() -> None:
    warnings: list[tuple[str, str]] = []
    pending: Queue = deque([(1, 0.0, ("", 7, "ok"), (1.0, 2.0, 3.0), None)])
    batcher = _batcher(warnings)
    batch = batcher.take(pending)
    assert batch is not None
    assert [c["key"] for c in batch.series] == ["ok"]
    # One warning per bad key, naming it and the step; each bad point counted.
    assert {topic for topic, _ in warnings} == {"key:''", "key:7"}
    assert all("at step 1 is not a non-empty string" in said for _, said in warnings)
    assert batcher.invalid_points == 2


def test_a_flush_marker_ends_the_batch_it_completes() -> None:
    marker = Marker()
    pending: Queue = deque([_record(1, loss=0.1), marker, _record(2, loss=0.2)])
    batcher = _batcher()
    first = batcher.take(pending)
    assert first is not None
    assert first.markers == [marker]
    assert first.points == 1
    second = batcher.take(pending)
    assert second is not None
    assert second.markers == []
    assert second.series[0]["steps"] == [2]
    assert batcher.take(pending) is None
    only_marker: Queue = deque([Marker()])
    empty = batcher.take(only_marker)
    assert empty is not None
    assert empty.points == 0
    assert len(empty.markers) == 1


def test_a_batch_holds_about_batch_points_and_more_with_a_backlog() -> None:
    batcher = _batcher(batch_points=8)  # wakes at 2 records; a backlog is more than 4
    short: Queue = deque(_record(i, a=1, b=2, c=3, d=4) for i in range(4))
    batch = batcher.take(short)
    assert batch is not None
    assert batch.points == 8
    assert queued_points(short) == 8
    backlog: Queue = deque(_record(i, a=1, b=2, c=3, d=4) for i in range(100))
    big = batcher.take(backlog)
    assert big is not None
    assert big.points == 8 * BACKLOG_BATCHES


def test_a_record_wider_than_the_series_bound_is_split_across_batches() -> None:
    batcher = _batcher(batch_points=1000, max_series=3)
    wide = {f"k{i}": float(i) for i in range(7)}
    pending: Queue = deque([_record(4, **wide)])
    sizes = []
    while (batch := batcher.take(pending)) is not None:
        assert len(batch.series) <= 3
        sizes.append(batch.points)
    assert sizes == [3, 3, 1]
    assert batcher.keys_logged == set(wide)


def test_the_link_goes_offline_backs_off_and_comes_back() -> None:
    url = "http://127.0.0.1:9/link-test"
    link = Link(url, max_backoff=30.0)
    assert link.online
    assert link.probe_due()
    assert not recently_unreachable(url)
    delay = link.failed(RetryableError("refused", retry_after=5.0))
    assert not link.online
    assert link.failures == 1
    assert delay >= 5.0
    assert not link.probe_due()
    assert recently_unreachable(url)
    link.probe_now()
    assert link.probe_due()
    link.failed(RetryableError("refused"))
    assert link.failures == 2
    assert link.answered() is True
    assert link.online
    assert link.failures == 0
    assert not recently_unreachable(url)
    assert link.answered() is False
