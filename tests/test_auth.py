"""Per-project tokens: who may read and write what; loopback-only without tokens; refusing to expose."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import plateau_tracker
from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.db.migrate import upgrade
from plateau_tracker.server.services.auth import Authenticator, AuthError, create_token, revoke_token
from tests._cli import plateau_cli
from tests._server import TrackerProcess, free_port


def plateau(*args: str) -> subprocess.CompletedProcess[str]:
    return plateau_cli(*args, timeout=60)


def new_token(home: Path, project: str, scope: str) -> str:
    """A token made by ``plateau token create`` (``project`` empty for an operator token)."""
    where = ("--project", project) if project else ()
    out = plateau("token", "create", "--home", str(home), *where, "--scope", scope)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TrackerProcess, dict[str, str]]]:
    home = tmp_path_factory.mktemp("secured")
    tokens = {
        "a-write": new_token(home, "alpha", "write"),
        "a-read": new_token(home, "alpha", "read"),
        "b-write": new_token(home, "beta", "write"),
    }
    server = TrackerProcess(home)
    yield server, tokens
    server.stop()


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def test_tokens_guard_every_run_of_every_project(secured) -> None:
    server, tokens = secured
    with httpx.Client(base_url=server.url, timeout=30) as http:
        run = http.post("/api/v1/runs", json={"project": "alpha"}, headers=bearer(tokens["a-write"]))
        assert run.status_code == 201, run.text
        run_id = run.json()["id"]
        batch = {"batch_id": uuid.uuid4().hex, "points": [{"key": "loss", "step": 0, "value": 1.0}]}
        attempts = {
            "no token": ({}, 401),
            "wrong token": (bearer("plt_not-a-token"), 401),
            "malformed header": ({"authorization": "Basic abc"}, 401),
            "read token writing": (bearer(tokens["a-read"]), 403),
            # The same answer as for an id nobody has used: existence is not told across projects.
            "another project's token": (bearer(tokens["b-write"]), 404),
        }
        for name, (headers, expected) in attempts.items():
            response = http.post(f"/api/v1/runs/{run_id}/metrics", json=batch, headers=headers)
            assert response.status_code == expected, (name, response.text)
            assert response.json()["detail"]
        other = http.get(f"/api/v1/runs/{run_id}", headers=bearer(tokens["b-write"]))
        unused = http.get(f"/api/v1/runs/{run_id + 10_000}", headers=bearer(tokens["b-write"]))
        assert other.status_code == unused.status_code == 404
        assert other.json()["detail"].replace(str(run_id), "N") == unused.json()["detail"].replace(
            str(run_id + 10_000), "N"
        )
        assert http.get(f"/api/v1/runs/{run_id}").status_code == 401
        assert (
            http.post(
                "/api/v1/runs", json={"project": "alpha"}, headers=bearer(tokens["b-write"])
            ).status_code
            == 403
        )
        assert (
            http.post("/api/v1/runs", json={"project": "alpha"}, headers=bearer(tokens["a-read"])).status_code
            == 403
        )
        # Nothing of those attempts was written.
        keys = http.get(f"/api/v1/runs/{run_id}/keys", headers=bearer(tokens["a-read"]))
        assert keys.json()["keys"] == []
        listed = http.get("/api/v1/runs", headers=bearer(tokens["a-read"])).json()
        assert [r["id"] for r in listed["data"]] == [run_id]
        assert (
            http.get("/api/v1/runs", params={"project": "beta"}, headers=bearer(tokens["a-read"])).status_code
            == 403
        )
        # The project list shows a token its own project only (beta has a run too, made by its own token).
        http.post("/api/v1/runs", json={"project": "beta"}, headers=bearer(tokens["b-write"]))
        seen = http.get("/api/v1/projects", headers=bearer(tokens["a-read"])).json()["data"]
        assert [p["name"] for p in seen] == ["alpha"]
        assert http.get("/api/v1/projects").status_code == 401
        # The right token writes, and the read token reads it back.
        assert (
            http.post(f"/api/v1/runs/{run_id}/metrics", json=batch, headers=bearer(tokens["a-write"])).json()[
                "accepted"
            ]
            == 1
        )
        history = http.get(
            f"/api/v1/runs/{run_id}/history", params={"key": "loss"}, headers=bearer(tokens["a-read"])
        )
        assert [p["step"] for p in history.json()["points"]] == [0]
        assert http.get("/api/v1/health").status_code == 200  # the health check stays open


def test_sdk_sends_its_token(secured, monkeypatch: pytest.MonkeyPatch) -> None:
    server, tokens = secured
    monkeypatch.setenv("PLATEAU_TOKEN", tokens["b-write"])
    run = plateau_tracker.init(project="beta", url=server.url, monitor="loss")
    run.log({"loss": 0.5}, step=0)
    assert run.flush(10)
    assert run.finish(timeout=10) == 0
    page = httpx.get(
        f"{server.url}/api/v1/runs/{run.id}/history",
        params={"key": "loss"},
        headers=bearer(tokens["b-write"]),
    ).json()
    assert [p["value"] for p in page["points"]] == [0.5]
    with pytest.raises(ValueError, match="not 'alpha'"):
        plateau_tracker.init(project="alpha", url=server.url)  # a beta token cannot create alpha's runs


def test_without_tokens_only_loopback_clients_are_served(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plateau.db'}"
    upgrade(url)
    database = Database(url)
    try:
        auth = Authenticator(database)
        assert auth.principal(None, "127.0.0.1") is None
        assert auth.principal(None, "::1") is None
        with pytest.raises(AuthError, match="only loopback clients"):
            auth.principal(None, "10.1.2.3")
        token_id, token = create_token(database, "alpha", "write")
        fresh = Authenticator(database)
        with pytest.raises(AuthError, match="missing credentials"):
            fresh.principal(None, "127.0.0.1")  # once a token exists, loopback needs one too
        assert fresh.principal(f"Bearer {token}", "10.1.2.3").project == "alpha"
        revoke_token(database, token_id)
        with pytest.raises(AuthError, match="revoked"):
            Authenticator(database).principal(f"Bearer {token}", "127.0.0.1")
    finally:
        database.dispose()


def test_serve_refuses_an_open_non_loopback_address(tmp_path: Path) -> None:
    out = plateau("serve", "--host", "0.0.0.0", "--port", str(free_port()), "--home", str(tmp_path))
    assert out.returncode == 1
    assert "refusing to listen on 0.0.0.0 with no API token" in out.stderr


def test_tokens_are_stored_hashed(tmp_path: Path) -> None:
    token = new_token(tmp_path, "alpha", "write")
    assert token.startswith("plt_")
    assert token.encode() not in (tmp_path / "plateau.db").read_bytes()
    listing = plateau("token", "list", "--home", str(tmp_path)).stdout
    assert "alpha" in listing
    assert token not in listing


def test_an_operator_token_reads_every_project_and_writes_none(secured) -> None:
    """One dashboard for a team: a token of scope ``operator`` (no project) sees every project's runs,
    and can neither create runs nor log to them."""
    server, tokens = secured
    with httpx.Client(base_url=server.url, timeout=30) as http:
        alpha = http.post("/api/v1/runs", json={"project": "alpha"}, headers=bearer(tokens["a-write"])).json()
        beta = http.post("/api/v1/runs", json={"project": "beta"}, headers=bearer(tokens["b-write"])).json()
        assert (
            plateau(
                "token", "create", "--home", str(server.home), "--scope", "operator", "--project", "x"
            ).returncode
            == 2
        )
        assert plateau("token", "create", "--home", str(server.home), "--scope", "read").returncode == 2
        operator = new_token(server.home, "", "operator")
        seen = http.get("/api/v1/runs", headers=bearer(operator)).json()["data"]
        assert {alpha["id"], beta["id"]} <= {run["id"] for run in seen}
        names = {p["name"] for p in http.get("/api/v1/projects", headers=bearer(operator)).json()["data"]}
        assert {"alpha", "beta"} <= names
        assert http.get(f"/api/v1/runs/{beta['id']}", headers=bearer(operator)).status_code == 200
        only_beta = http.get("/api/v1/runs", params={"project": "beta"}, headers=bearer(operator)).json()[
            "data"
        ]
        assert {run["project"] for run in only_beta} == {"beta"}
        assert (
            http.post("/api/v1/runs", json={"project": "alpha"}, headers=bearer(operator)).status_code == 403
        )
        points = {"batch_id": "op", "points": [{"key": "loss", "step": 0, "value": 1.0}]}
        answer = http.post(f"/api/v1/runs/{alpha['id']}/metrics", json=points, headers=bearer(operator))
        assert answer.status_code == 403
        assert "operator" in answer.json()["detail"]
        # A project token still sees its own project only.
        own = http.get("/api/v1/runs", headers=bearer(tokens["a-write"])).json()["data"]
        assert {run["project"] for run in own} == {"alpha"}
    listed = plateau("token", "list", "--home", str(server.home)).stdout
    assert "(every project)" in listed
