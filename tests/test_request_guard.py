"""What a web page in the user's browser can forge is refused, with tokens and without: a foreign Host
(DNS rebinding) answers 400, a write that is not JSON (a cross-site "simple" request) 415, and two
Authorization headers 400. Against a real tracker on a loopback port."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests._server import TrackerProcess
from tests.test_auth import bearer, new_token, plateau

POINTS = {"batch_id": "csrf", "points": [{"key": "loss", "step": 0, "value": 1.0}]}


@pytest.fixture(scope="module")
def open_tracker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TrackerProcess]:
    server = TrackerProcess(tmp_path_factory.mktemp("open"), env={"PLATEAU_ALLOWED_HOSTS": "tracker.lab"})
    yield server
    server.stop()


def _raw(
    server: TrackerProcess, method: str, path: str, headers: list[tuple[str, str]], body: bytes = b""
) -> tuple[int, str]:
    """One request with exactly these headers (repeats included), as a browser or a script would send."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers:
            connection.putheader(name, value)
        if body:
            connection.putheader("content-length", str(len(body)))
        connection.endheaders(body or None)
        answer = connection.getresponse()
        return answer.status, answer.read().decode()
    finally:
        connection.close()


def _stored(server: TrackerProcess, run_id: int, headers: dict[str, str] | None = None) -> int:
    page = httpx.get(
        f"{server.url}/api/v1/runs/{run_id}/history", params={"key": "loss"}, headers=headers or {}
    )
    return len(page.json()["points"]) if page.status_code == 200 else 0


def test_a_cross_site_form_or_text_post_is_refused_and_stores_nothing(open_tracker: TrackerProcess) -> None:
    run = httpx.post(f"{open_tracker.url}/api/v1/runs", json={"project": "csrf"}).json()
    path = f"/api/v1/runs/{run['id']}/metrics"
    host = ("host", f"127.0.0.1:{open_tracker.port}")
    for content_type in (
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ):
        status, body = _raw(
            open_tracker, "POST", path, [host, ("content-type", content_type)], json.dumps(POINTS).encode()
        )
        assert status == 415, (content_type, body)
        assert "application/json" in json.loads(body)["detail"]
    status, _ = _raw(open_tracker, "POST", path, [host], json.dumps(POINTS).encode())  # no Content-Type
    assert status == 415
    assert _stored(open_tracker, run["id"]) == 0
    status, _ = _raw(
        open_tracker,
        "POST",
        path,
        [host, ("content-type", "application/json; charset=utf-8")],
        json.dumps(POINTS).encode(),
    )
    assert status == 200
    assert _stored(open_tracker, run["id"]) == 1


def test_a_request_naming_a_foreign_host_is_refused(open_tracker: TrackerProcess) -> None:
    httpx.post(f"{open_tracker.url}/api/v1/runs", json={"project": "rebinding", "name": "secret-run"})
    status, body = _raw(open_tracker, "GET", "/api/v1/runs", [("host", "evil.example")])
    assert status == 400
    assert "secret-run" not in body
    assert "PLATEAU_ALLOWED_HOSTS" in json.loads(body)["detail"]
    status, _ = _raw(open_tracker, "GET", "/api/v1/runs", [("host", f"evil.example:{open_tracker.port}")])
    assert status == 400
    for allowed in (
        f"127.0.0.1:{open_tracker.port}",
        f"localhost:{open_tracker.port}",
        f"[::1]:{open_tracker.port}",
        "tracker.lab:8765",
        "TRACKER.LAB",
    ):
        status, body = _raw(open_tracker, "GET", "/api/v1/runs", [("host", allowed)])
        assert status == 200, (allowed, body)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TrackerProcess, str]]:
    home = tmp_path_factory.mktemp("secured")
    token = new_token(home, "alpha", "write")
    server = TrackerProcess(home)
    yield server, token
    server.stop()


def test_with_tokens_the_same_holds(secured: tuple[TrackerProcess, str]) -> None:
    server, token = secured
    run = httpx.post(f"{server.url}/api/v1/runs", json={"project": "alpha"}, headers=bearer(token)).json()
    path = f"/api/v1/runs/{run['id']}/metrics"
    status, _ = _raw(
        server,
        "POST",
        path,
        [("host", "127.0.0.1"), ("authorization", f"Bearer {token}"), ("content-type", "text/plain")],
        json.dumps(POINTS).encode(),
    )
    assert status == 415
    status, _ = _raw(
        server, "GET", "/api/v1/runs", [("host", "evil.example"), ("authorization", f"Bearer {token}")]
    )
    assert status == 400
    assert _stored(server, run["id"], bearer(token)) == 0


def test_two_authorization_headers_are_refused_on_every_route(secured: tuple[TrackerProcess, str]) -> None:
    """Before, the routes read the first header and ingest the last: ``Bearer garbage`` then the write
    token was refused on GET /runs/1 and accepted on POST /runs/1/metrics."""
    server, token = secured
    run = httpx.post(f"{server.url}/api/v1/runs", json={"project": "alpha"}, headers=bearer(token)).json()
    both = [("host", "127.0.0.1"), ("authorization", "Bearer garbage"), ("authorization", f"Bearer {token}")]
    status, body = _raw(server, "GET", f"/api/v1/runs/{run['id']}", both)
    assert status == 400
    assert "Authorization" in json.loads(body)["detail"]
    status, _ = _raw(
        server,
        "POST",
        f"/api/v1/runs/{run['id']}/metrics",
        [*both, ("content-type", "application/json")],
        json.dumps(POINTS).encode(),
    )
    assert status == 400
    assert _stored(server, run["id"], bearer(token)) == 0
    status, _ = _raw(server, "GET", f"/api/v1/runs/{run['id']}", both[:1] + both[2:])
    assert status == 200


def test_revoking_a_token_ends_its_open_long_poll(tmp_path: Path) -> None:
    """A poll opened with a read token waits 30 s for a new decision; the token is revoked, and a
    decision is made 6.5 s later (past the 5 s promise). Before, the poll answered 200 with it; now it
    answers 401, within 5 s of the revocation."""
    home = tmp_path / "revoke"
    home.mkdir()
    writer, reader = new_token(home, "alpha", "write"), new_token(home, "alpha", "read")
    server = TrackerProcess(home)
    try:
        policy = {"monitor": "loss", "mode": "min", "rules": [{"rule": "checkpoint"}]}
        run = httpx.post(
            f"{server.url}/api/v1/runs", json={"project": "alpha", "policy": policy}, headers=bearer(writer)
        ).json()
        outcome: dict[str, object] = {}

        def poll() -> None:
            answer = httpx.get(
                f"{server.url}/api/v1/runs/{run['id']}/decision",
                params={"after": 0, "wait": 30},
                headers=bearer(reader),
                timeout=60,
            )
            outcome["status"], outcome["at"] = answer.status_code, time.monotonic()

        poller = threading.Thread(target=poll)
        poller.start()
        time.sleep(0.5)  # the poll is open (a decision now would answer it: none comes)
        listed = plateau("token", "list", "--home", str(home))
        reader_id = next(
            line.split()[0] for line in listed.stdout.splitlines() if "read" in line and "alpha" in line
        )
        assert plateau("token", "revoke", reader_id, "--home", str(home)).returncode == 0
        revoked = time.monotonic()
        time.sleep(6.5)
        if "status" not in outcome:  # still open: a decision now must not reach the revoked token
            points = {"batch_id": "b", "points": [{"key": "loss", "step": 0, "value": 1.0}]}
            httpx.post(f"{server.url}/api/v1/runs/{run['id']}/metrics", json=points, headers=bearer(writer))
        poller.join(timeout=60)
        assert outcome["status"] == 401
        assert float(outcome["at"]) - revoked < 5.0  # type: ignore[arg-type]
    finally:
        server.stop()
