"""A keep-alive one-point ingest round trip stays within milliseconds, with one worker and with several.

Nagle's algorithm plus delayed ACK costs ~40 ms per request on a keep-alive connection without
TCP_NODELAY (uvicorn issue 3149, multi-worker sockets). The bound here is far above a healthy round trip
(about a millisecond) and far below the stall, so it catches the bug without timing noise.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest

from sdk._transport import Transport
from tests._server import TrackerProcess


@pytest.mark.parametrize("workers", [1, 2])
def test_keep_alive_round_trip_is_milliseconds(tmp_path: Path, workers: int) -> None:
    server = TrackerProcess(tmp_path, workers=workers)
    transport = Transport(server.url)
    try:
        run = transport.create_run({"project": "rtt", "policy": {"monitor": "loss"}})
        durations = []
        for step in range(60):
            started = time.perf_counter()
            transport.send_points(
                run["id"], f"b{step}", [{"key": "loss", "step": step, "value": 1.0 / (step + 1)}]
            )
            durations.append(time.perf_counter() - started)
        median = statistics.median(durations[10:])
        assert median < 0.02, f"median keep-alive round trip {median * 1000:.1f} ms with {workers} worker(s)"
    finally:
        transport.close()
        server.stop()
