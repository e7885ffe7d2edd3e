"""Wake-ups across replicas through PostgreSQL: a decision made through one ``plateau serve`` wakes a
long-poll waiting on another within milliseconds, with the polling fallback set to 30 s (so only the
notification can explain it)."""

from __future__ import annotations

import statistics
from pathlib import Path

import httpx
import pytest

from plateau_tracker.server.db import migrate
from tests._cross_replica import stop_seen_on_other
from tests._server import TrackerProcess

# End to end: real processes, real training or real failures; kept out of the quick subset.
pytestmark = pytest.mark.slow

FALLBACK = {"PLATEAU_LONGPOLL_FALLBACK_S": "30"}


def test_a_decision_on_one_replica_wakes_a_long_poll_on_another(postgres_url: str, tmp_path: Path) -> None:
    migrate.upgrade(postgres_url, "head")  # PostgreSQL's schema is made by `plateau db upgrade`
    a = TrackerProcess(tmp_path / "a", database_url=postgres_url, env=FALLBACK)
    b = TrackerProcess(tmp_path / "b", database_url=postgres_url, env=FALLBACK)
    try:
        for replica in (a, b):
            assert httpx.get(f"{replica.url}/api/v1/health").json()["wakeups"] == "notify"
        latencies = []
        with (
            httpx.Client(base_url=a.url, timeout=30) as writer,
            httpx.Client(base_url=b.url, timeout=30) as reader,
        ):
            for attempt in range(12):
                latency, decision = stop_seen_on_other(writer, reader, "wake")
                assert decision["action"] == "stop", (attempt, decision)
                assert decision["step"] == 1
                latencies.append(latency)
        p50 = statistics.median(latencies)
        print(f"\ncross-replica stop to long-poll: p50 {1e3 * p50:.1f} ms, max {1e3 * max(latencies):.1f} ms")
        assert max(latencies) < 1.0  # the fallback timer is 30 s: the notification woke it
    finally:
        a.stop()
        b.stop()
