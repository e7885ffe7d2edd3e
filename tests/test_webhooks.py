"""Signed webhooks from the outbox: a receiver down for a while, a tracker killed before delivering."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests._server import TrackerProcess, free_port
from tests.benchmarks._client_side import rss_of

SECRET = "s3cret-s3cret-s3cret"
FAST_RETRIES = {
    "PLATEAU_WEBHOOK_BACKOFF_BASE_S": "0.1",
    "PLATEAU_WEBHOOK_BACKOFF_MAX_S": "0.5",
    "PLATEAU_WEBHOOK_POLL_S": "0.1",
    "PLATEAU_WEBHOOK_ALLOW": "127.0.0.1",  # the test receivers listen on loopback
}


def serve_in_background(port: int, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """A real HTTP server on a loopback port, in a daemon thread (each request in a thread of its own)."""
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop_serving(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()


class Receiver:
    """A real HTTP server that answers 503 to its first ``failures`` requests, then verifies and records."""

    def __init__(self, port: int, failures: int = 0) -> None:
        self.failures = failures
        self.attempts = 0
        self.received: list[dict] = []
        self.bad_signatures = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                receiver.attempts += 1
                if receiver.attempts <= receiver.failures:
                    self.send_response(503)
                    self.end_headers()
                    return
                stamp = self.headers["x-plateau-timestamp"]
                expected = (
                    "sha256="
                    + hmac.new(SECRET.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
                )
                if not hmac.compare_digest(expected, self.headers["x-plateau-signature"]):
                    receiver.bad_signatures += 1
                receiver.received.append(
                    {
                        "id": self.headers["x-plateau-delivery"],
                        "event": self.headers["x-plateau-event"],
                        "body": json.loads(body),
                    }
                )
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = serve_in_background(port, Handler)

    def close(self) -> None:
        stop_serving(self.server)


@pytest.fixture
def fast_tracker(tmp_path: Path) -> Iterator[TrackerProcess]:
    server = TrackerProcess(tmp_path / "tracker", env=FAST_RETRIES)
    yield server
    server.stop()


def make_events(url: str, project: str, hook_url: str) -> tuple[int, int]:
    """A run that checkpoints twice, stops, and finishes: 2 checkpoint + 1 stop + 1 run_finished events."""
    with httpx.Client(base_url=url, timeout=30) as client:
        return _make_events(client, project, hook_url)


def _make_events(client: httpx.Client, project: str, hook_url: str) -> tuple[int, int]:
    run = client.post(
        "/api/v1/runs",
        json={
            "project": project,
            "policy": {
                "monitor": "loss",
                "rules": [{"rule": "patience", "patience": 2}, {"rule": "checkpoint"}],
            },
        },
    ).json()
    hook = register_hook(client, project, hook_url, ["stop", "checkpoint", "run_finished"])
    points = [{"key": "loss", "step": s, "value": v} for s, v in enumerate([1.0, 0.5, 0.7, 0.8])]
    client.post(f"/api/v1/runs/{run['id']}/metrics", json={"batch_id": "b", "points": points})
    client.post(f"/api/v1/runs/{run['id']}/finish", json={"status": "stopped"})
    return run["id"], hook["id"]


def register_hook(client: httpx.Client, project: str, url: str, events: list[str]) -> dict[str, Any]:
    """Subscribe ``url`` to the project's ``events`` (signed with ``SECRET``); the webhook as created."""
    hook = client.post(
        f"/api/v1/projects/{project}/webhooks", json={"url": url, "events": events, "secret": SECRET}
    )
    assert hook.status_code == 201, hook.text
    created: dict[str, Any] = hook.json()
    return created


def wait_until(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def settled_log(get: Callable[[str], httpx.Response], path: str, timeout: float = 10.0) -> dict[str, Any]:
    """The deliveries log once no delivery in it is pending: a receiver holds the request before the
    tracker has read its answer and written the outcome, so the log can lag what a receiver saw."""
    log: dict[str, Any] = get(path).json()
    deadline = time.monotonic() + timeout
    while any(d["status"] == "pending" for d in log["data"]) and time.monotonic() < deadline:
        time.sleep(0.05)
        log = get(path).json()
    return log


def test_receiver_down_for_a_while_gets_every_event_signed_once(fast_tracker: TrackerProcess) -> None:
    receiver = Receiver(free_port(), failures=5)
    try:
        project = f"hooks-{uuid.uuid4().hex[:6]}"
        run_id, hook_id = make_events(
            fast_tracker.url, project, f"http://127.0.0.1:{receiver.server.server_port}/h"
        )
        assert wait_until(lambda: len({r["id"] for r in receiver.received}) == 4)
        events = sorted(r["event"] for r in receiver.received)
        assert events == ["checkpoint", "checkpoint", "run_finished", "stop"]
        assert receiver.bad_signatures == 0
        assert len(receiver.received) == len({r["id"] for r in receiver.received})  # no duplicates here
        stop = next(r["body"] for r in receiver.received if r["event"] == "stop")
        assert stop["run"]["id"] == run_id
        assert stop["decision"]["rule"] == "patience"
        assert "has not improved" in stop["decision"]["reason"]
        log = settled_log(
            httpx.get, f"{fast_tracker.url}/api/v1/projects/{project}/webhooks/{hook_id}/deliveries"
        )
        assert {d["status"] for d in log["data"]} == {"delivered"}
        attempts = sum(d["attempts"] for d in log["data"])
        delivered, seen = log["count"], receiver.attempts
        print(f"webhooks: {attempts} deliveries attempted, {delivered} delivered, receiver saw {seen}")
        assert attempts == receiver.attempts == 4 + 5
    finally:
        receiver.close()


@pytest.mark.slow
def test_tracker_killed_before_delivering_delivers_after_restart(tmp_path: Path) -> None:
    port, hook_port = free_port(), free_port()
    home = tmp_path / "tracker"
    server = TrackerProcess(home, port=port, env=FAST_RETRIES)
    project = f"hooks-{uuid.uuid4().hex[:6]}"
    make_events(server.url, project, f"http://127.0.0.1:{hook_port}/h")  # nobody listens yet
    os.kill(server.process.pid, signal.SIGKILL)
    server.process.wait()
    receiver = Receiver(hook_port)
    server = TrackerProcess(home, port=port, env=FAST_RETRIES)
    try:
        assert wait_until(lambda: len({r["id"] for r in receiver.received}) == 4)
        assert receiver.bad_signatures == 0
    finally:
        receiver.close()
        server.stop()


def test_webhook_input_is_validated(fast_tracker: TrackerProcess) -> None:
    with httpx.Client(base_url=fast_tracker.url) as client:
        check_webhook_validation(client)


def check_webhook_validation(client: httpx.Client) -> None:
    client.post("/api/v1/runs", json={"project": "hooks-v"})
    bad = [
        ({"url": "ftp://x", "events": ["stop"], "secret": SECRET}, "url"),
        ({"url": "http://x", "events": ["exploded"], "secret": SECRET}, "events"),
        ({"url": "http://x", "events": ["stop"], "secret": "short"}, "secret"),
    ]
    for body, field in bad:
        response = client.post("/api/v1/projects/hooks-v/webhooks", json=body)
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"][1] == field
    assert (
        client.post("/api/v1/projects/nope/webhooks", json=bad[0][0] | {"url": "http://x"}).status_code == 404
    )
    assert client.get("/api/v1/projects/hooks-v/webhooks").json()["count"] == 0


class Trickler:
    """A receiver that never answers (until closed), or with ``huge`` answers of that many bytes as fast as
    it can."""

    def __init__(self, port: int, huge: int = 0) -> None:
        self.attempts = 0
        self.closed = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["content-length"]))
                receiver.attempts += 1
                if not huge:
                    receiver.closed.wait()  # no status line, no answer: the attempt ends at its deadline
                    return
                self.send_response(200)
                self.send_header("content-length", str(huge))
                self.end_headers()
                try:
                    chunk = b"x" * 1024 * 1024
                    for _ in range(huge // len(chunk)):
                        self.wfile.write(chunk)
                except OSError:
                    pass  # the tracker hung up: that is the point

            def log_message(self, *args: object) -> None:
                pass

        self.server = serve_in_background(port, Handler)

    def close(self) -> None:
        self.closed.set()
        stop_serving(self.server)


@pytest.mark.slow
def test_a_receiver_that_never_answers_delays_no_other_delivery(tmp_path: Path) -> None:
    tracker = TrackerProcess(tmp_path / "tracker", env={**FAST_RETRIES, "PLATEAU_WEBHOOK_DEADLINE_S": "3"})
    slow, fast = Trickler(free_port()), Receiver(free_port())
    try:
        with httpx.Client(base_url=tracker.url, timeout=30) as client:
            _make_events(
                client, f"slow-{uuid.uuid4().hex[:6]}", f"http://127.0.0.1:{slow.server.server_port}/"
            )
            assert wait_until(lambda: slow.attempts >= 4, timeout=10)  # every slot to it is now stuck
            started = time.monotonic()
            project = f"fast-{uuid.uuid4().hex[:6]}"
            _, hook_id = _make_events(client, project, f"http://127.0.0.1:{fast.server.server_port}/")
            assert wait_until(lambda: len(fast.received) == 4, timeout=10)
            took = time.monotonic() - started
            print(f"webhooks: another project's 4 events delivered in {took:.2f} s beside a silent receiver")
            assert took < 2.5  # behind the silent receiver's batch, it would wait for its deadline
            fast_log = settled_log(client.get, f"/api/v1/projects/{project}/webhooks/{hook_id}/deliveries")
            assert {d["status"] for d in fast_log["data"]} == {"delivered"}
        # The silent receiver's attempts end at their deadline and are retried.
        assert wait_until(lambda: slow.attempts >= 8, timeout=15)
    finally:
        slow.close()
        fast.close()
        tracker.stop()


@pytest.mark.slow
def test_a_huge_answer_is_not_read_into_memory(tmp_path: Path) -> None:
    tracker = TrackerProcess(tmp_path / "tracker", env=FAST_RETRIES)
    huge = Trickler(free_port(), huge=256 * 1024 * 1024)
    try:
        before = rss_of(tracker.process.pid) / 2**20
        with httpx.Client(base_url=tracker.url, timeout=30) as client:
            project = f"huge-{uuid.uuid4().hex[:6]}"
            _, hook_id = _make_events(client, project, f"http://127.0.0.1:{huge.server.server_port}/")
            path = f"/api/v1/projects/{project}/webhooks/{hook_id}/deliveries"
            assert wait_until(
                lambda: {d["status"] for d in client.get(path).json()["data"]} == {"delivered"}, timeout=20
            )
        grown = rss_of(tracker.process.pid) / 2**20 - before
        print(f"webhooks: tracker grew {grown:.1f} MiB over four 256 MiB answers")
        assert grown < 40
    finally:
        huge.close()
        tracker.stop()


class Internal:
    """An internal service on loopback that answers every request with its own secret page, or redirects
    to ``redirect_to``; counts the requests it got."""

    def __init__(self, port: int, status: int = 403, redirect_to: str | None = None) -> None:
        self.requests = 0
        internal = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                internal.requests += 1
                page = b"<admin>SECRET-TOKEN-1234</admin>"
                self.send_response(status)
                if redirect_to is not None:
                    self.send_header("location", redirect_to)
                self.send_header("content-length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args: object) -> None:
                pass

        self.server = serve_in_background(port, Handler)

    def close(self) -> None:
        stop_serving(self.server)


@pytest.mark.slow
def test_webhooks_cannot_reach_internal_services_nor_read_their_answers(tmp_path: Path) -> None:
    """Without the operator's allowance a loopback, private or metadata URL is refused at registration
    (422 naming the url), in any spelling. An allowed receiver's answer never reaches the delivery log,
    and its redirect is not followed. A URL allowed when registered and no longer allowed is refused at
    delivery: the check runs again each time."""
    internal = Internal(free_port())
    strict = {key: value for key, value in FAST_RETRIES.items() if key != "PLATEAU_WEBHOOK_ALLOW"}
    tracker = TrackerProcess(tmp_path / "strict", env=strict)
    try:
        with httpx.Client(base_url=tracker.url, timeout=30) as client:
            client.post("/api/v1/runs", json={"project": "ssrf"})
            port = internal.server.server_port
            for url in (
                f"http://127.0.0.1:{port}/admin",
                f"http://localhost:{port}/admin",
                f"http://[::1]:{port}/",
                f"http://[::ffff:127.0.0.1]:{port}/",
                f"http://2130706433:{port}/",
                "http://169.254.169.254/latest/meta-data/",
                "http://10.0.0.1/",
            ):
                body = {"url": url, "events": ["run_finished"], "secret": SECRET}
                response = client.post("/api/v1/projects/ssrf/webhooks", json=body)
                assert response.status_code == 422, (url, response.text)
                assert response.json()["detail"][0]["loc"] == ["body", "url"]
                assert "PLATEAU_WEBHOOK_ALLOW" in response.json()["detail"][0]["msg"]
            assert client.get("/api/v1/projects/ssrf/webhooks").json()["count"] == 0
    finally:
        tracker.stop()
    assert internal.requests == 0

    home = tmp_path / "allowing"
    tracker = TrackerProcess(home, env=FAST_RETRIES)
    redirect_target = Receiver(free_port())
    redirecting = Internal(
        free_port(), status=302, redirect_to=f"http://127.0.0.1:{redirect_target.server.server_port}/"
    )
    try:
        with httpx.Client(base_url=tracker.url, timeout=30) as client:
            _, hook_id = _make_events(
                client, "read-back", f"http://127.0.0.1:{internal.server.server_port}/admin"
            )
            log = settled_log(client.get, f"/api/v1/projects/read-back/webhooks/{hook_id}/deliveries")
            assert log["count"] == 4
            assert {d["last_error"] for d in log["data"]} == {"the receiver answered HTTP 403"}
            assert "SECRET" not in json.dumps(log)
            _, hook_id = _make_events(
                client, "redirect", f"http://127.0.0.1:{redirecting.server.server_port}/"
            )
            log = settled_log(client.get, f"/api/v1/projects/redirect/webhooks/{hook_id}/deliveries")
            assert {d["last_error"] for d in log["data"]} == {"the receiver answered HTTP 302"}
            assert redirecting.requests >= 4
            assert redirect_target.attempts == 0  # the redirect is not followed
            # A hook registered while allowed; then the operator withdraws the allowance.
            receiver = Receiver(free_port())
            project = "withdrawn"
            client.post("/api/v1/runs", json={"project": project})
            hook = register_hook(
                client, project, f"http://127.0.0.1:{receiver.server.server_port}/", ["run_finished"]
            )
        tracker.stop()
        tracker = TrackerProcess(home, env=strict)
        with httpx.Client(base_url=tracker.url, timeout=30) as client:
            run = client.post("/api/v1/runs", json={"project": project}).json()
            client.post(f"/api/v1/runs/{run['id']}/finish", json={"status": "finished"})
            path = f"/api/v1/projects/{project}/webhooks/{hook['id']}/deliveries"
            assert wait_until(lambda: client.get(path).json()["data"][0]["status"] == "failed", timeout=20)
            [delivery] = client.get(path).json()["data"]
            assert delivery["last_error"].startswith("refused by the webhook URL policy")
            assert "loopback" in delivery["last_error"]
        assert receiver.attempts == 0
        receiver.close()
    finally:
        tracker.stop()
        internal.close()
        redirecting.close()
        redirect_target.close()
