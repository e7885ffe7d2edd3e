"""The SDK's HTTP client against real sockets: kept-alive connections the other end closed, a tracker
that hangs, proxies from the environment, and errors sorted into retry or give up."""

from __future__ import annotations

import json
import math
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
import pytest

from plateau_tracker._http import HttpClient
from plateau_tracker._transport import NotFoundError, RejectedError, RetryableError, Transport
from plateau_tracker.client import TrackerClient
from tests._server import TrackerProcess

# A handler gets each request's head (request line and headers) and returns the bytes to answer with, or
# None to answer nothing; and whether to close the connection afterwards.
Handler = Callable[[bytes], tuple[bytes | None, bool]]


def _answer(status: int, body: dict[str, object], extra: str = "") -> bytes:
    data = json.dumps(body).encode()
    head = (
        f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n{extra}\r\n"
    )
    return head.encode() + data


@contextmanager
def _server(handler: Handler) -> Iterator[tuple[int, list[bytes], list[int]]]:
    """A loopback HTTP/1.1 server: (its port, the request heads it got, the connections it accepted)."""
    listener = socket.create_server(("127.0.0.1", 0))
    heads: list[bytes] = []
    accepted: list[int] = []
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        buffer = b""
        with conn:
            while not stop.is_set():
                while b"\r\n\r\n" not in buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, buffer = buffer.split(b"\r\n\r\n", 1)
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.lower().split(b"\r\n")
                        if line.startswith(b"content-length")
                    ),
                    0,
                )
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                buffer = buffer[length:]
                heads.append(head)
                reply, close = handler(head)
                if reply is None:
                    stop.wait(30)
                    return
                conn.sendall(reply)
                if close:
                    return

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(1)
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1], heads, accepted
    finally:
        stop.set()
        listener.close()


def test_a_kept_alive_connection_closed_while_idle_is_replaced_without_an_error() -> None:
    # The server answers each request and then closes: every reuse meets a connection closed by the other
    # end, as a tracker's keep-alive timeout leaves it.
    with _server(lambda head: (_answer(200, {"ok": True}), True)) as (port, heads, accepted):
        client = HttpClient(f"http://127.0.0.1:{port}", timeout=5, connect_timeout=2, headers={})
        for _ in range(3):
            reply = client.request("GET", "/api/v1/health")
            assert reply.status == 200
            assert json.loads(reply.body) == {"ok": True}
            time.sleep(0.05)  # the close reaches us while the connection is idle
        client.close()
    assert len(heads) == 3
    assert len(accepted) == 3


def test_connections_are_kept_alive_and_reused() -> None:
    with _server(lambda head: (_answer(200, {"ok": True}), False)) as (port, heads, accepted):
        client = HttpClient(f"http://127.0.0.1:{port}/prefix/", timeout=5, connect_timeout=2, headers={})
        for _ in range(20):
            assert client.request("GET", "/x", params={"wait": 0.5}).status == 200
        client.close()
    assert len(accepted) == 1
    assert heads[0].split(b"\r\n")[0] == b"GET /prefix/x?wait=0.5 HTTP/1.1"


def test_a_tracker_that_hangs_costs_one_timeout_not_two() -> None:
    answers = iter([(_answer(200, {"ok": True}), False), (None, False)])
    with _server(lambda head: next(answers)) as (port, _, _):
        transport = Transport(f"http://127.0.0.1:{port}", timeout=0.5)
        transport._request("GET", "/first")  # a kept-alive connection, reused next
        started = time.monotonic()
        with pytest.raises(RetryableError, match="timed out"):
            transport._request("GET", "/hangs")
        assert time.monotonic() - started < 0.9
        transport.close()


def test_statuses_are_sorted_into_retry_and_give_up() -> None:
    replies = iter(
        [
            (_answer(503, {"detail": "busy"}, "retry-after: 2\r\n"), False),
            (_answer(422, {"detail": [{"loc": ["body", "batch_id"]}]}), False),
            (b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nnot", False),
        ]
    )
    with _server(lambda head: next(replies)) as (port, _, _):
        transport = Transport(f"http://127.0.0.1:{port}")
        with pytest.raises(RetryableError) as busy:
            transport._request("GET", "/a")
        assert busy.value.retry_after == 2.0
        with pytest.raises(RejectedError, match="batch_id"):
            transport._request("GET", "/b")
        with pytest.raises(RetryableError, match="unreadable"):
            transport._request("GET", "/c")
        transport.close()
    refused = Transport(f"http://127.0.0.1:{port}", timeout=1)  # the server is gone now
    with pytest.raises(RetryableError):
        refused._request("GET", "/a")


def test_the_proxy_from_the_environment_is_used_except_for_no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    with _server(lambda head: (_answer(200, {"via": "proxy"}), False)) as (port, heads, _):
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("NO_PROXY", "direct.example")
        client = HttpClient("http://tracker.example:8000", timeout=5, connect_timeout=2, headers={})
        assert json.loads(client.request("GET", "/api/v1/health").body) == {"via": "proxy"}
        client.close()
        request_line, *headers = heads[0].split(b"\r\n")
        assert request_line == b"GET http://tracker.example:8000/api/v1/health HTTP/1.1"
        assert b"host: tracker.example:8000" in headers
        direct = HttpClient("http://direct.example:8000", timeout=1, connect_timeout=1, headers={})
        assert direct._proxy is None
        loopback = HttpClient("http://127.0.0.1:9", timeout=1, connect_timeout=1, headers={})
        assert loopback._proxy is None  # no proxy reaches this machine's loopback


def test_the_sdk_transport_round_trips_against_a_real_tracker(tracker: TrackerProcess) -> None:
    transport = Transport(tracker.url)
    try:
        run = transport.create_run({"project": "http", "policy": {"monitor": "loss", "mode": "min"}})
        series = [
            {"key": "loss", "rank": 0, "steps": [0, 1], "values": [2.0, 1.0], "wall_times": None},
            {"key": "aux", "rank": 0, "steps": [0, 1], "values": [math.nan, -math.inf], "wall_times": None},
        ]
        answer = transport.send_series(run["id"], "b1", series)
        assert (answer.decision.action, answer.decision.step) == ("checkpoint", 1)  # a new best at step 1
        assert answer.judged_step == 1
        # Both steps were judged in this batch: a checkpoint at each (the first value, then a new best).
        assert [(d.action, d.step) for d in answer.decisions] == [("checkpoint", 0), ("checkpoint", 1)]
        again = transport.send_series(run["id"], "b1", series)  # a replayed batch: its decisions again
        assert [(d.action, d.step) for d in again.decisions] == [("checkpoint", 0), ("checkpoint", 1)]
        url = f"{tracker.url}/api/v1/runs/{run['id']}/history"
        history = httpx.get(url, params={"key": "aux"}).json()
        assert [p["value"] for p in history["points"]] == ["NaN", "-Infinity"]  # sent as literals, kept
        with pytest.raises(RejectedError, match="HTTP 404"):
            transport.send_points(2**31 - 1, "b2", [{"key": "loss", "step": 0, "value": 1.0}])
        transport.finish_run(run["id"], "finished", timeout=5)
        assert transport.get_decision(run["id"]).step == 1
    finally:
        transport.close()


def test_the_client_reads_a_long_history_in_packed_pages(tracker: TrackerProcess) -> None:
    """``history_columns`` reads every point in packed pages (here 1,000 a page over 2,500 points), NaN and
    infinities as logged, and says clearly when the key does not exist."""
    client = TrackerClient(tracker.url)
    try:
        run = client.create_run({"project": "http"})
        values = [math.sin(step) for step in range(2_500)]
        values[7], values[1_500], values[2_499] = math.nan, math.inf, -math.inf
        walls = [time.time() + step / 1000 for step in range(2_500)]
        steps = list(range(0, 5_000, 2))
        client.send_series(
            run["id"], "b", [{"key": "k", "steps": steps, "values": values, "wall_times": walls}]
        )
        read_steps, read_values, read_walls = client.history_columns(run["id"], "k", page=1_000)
        assert list(read_steps) == steps
        assert [struct.pack("<d", v) for v in read_values] == [struct.pack("<d", v) for v in values]
        assert list(read_walls) == walls
        with pytest.raises(NotFoundError, match="has no points"):
            client.history_columns(run["id"], "missing")
    finally:
        client.close()
