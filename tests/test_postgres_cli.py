"""PostgreSQL from the CLI without tracebacks: every database that cannot be used is one line saying what
to do, ``postgres://`` URLs work, and ``plateau serve`` gives an empty database its schema, as it does
SQLite (unless ``--no-upgrade``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from plateau_tracker.server.db import migrate
from tests._cli import plateau_cli
from tests._server import TrackerProcess, free_port

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def _plateau(*args: str) -> subprocess.CompletedProcess[str]:
    return plateau_cli(*args, clean=True)


def _one_line(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr
    [line] = out.stderr.strip().splitlines()
    return line


def test_a_database_that_does_not_exist_is_one_line(postgres_server_url: str, tmp_path: Path) -> None:
    missing = (
        make_url(postgres_server_url).set(database="plateau_nowhere").render_as_string(hide_password=False)
    )
    for command in (("serve", "--port", str(free_port())), ("db", "upgrade"), ("token", "list")):
        line = _one_line(_plateau(*command, "--home", str(tmp_path), "--database-url", missing))
        assert 'database "plateau_nowhere" does not exist' in line
        assert "createdb" in line
    nobody = make_url(postgres_server_url).set(port=free_port()).render_as_string(hide_password=False)
    assert "no PostgreSQL server answers" in _one_line(_plateau("db", "upgrade", "--database-url", nobody))


def test_serve_gives_an_empty_database_its_schema_and_takes_postgres_urls(
    postgres_url: str, tmp_path: Path
) -> None:
    plain = "postgres://" + postgres_url.split("://", 1)[1]  # as libpq and hosted services print it
    refused = _plateau(
        "serve", "--port", str(free_port()), "--home", str(tmp_path), "--database-url", plain, "--no-upgrade"
    )
    assert "revision none" in _one_line(refused)
    assert "plateau db upgrade" in _one_line(refused)
    server = TrackerProcess(tmp_path / "served", database_url=plain)
    try:
        created = httpx.post(f"{server.url}/api/v1/runs", json={"project": "pg"})
        assert created.status_code == 201, created.text
    finally:
        server.stop()


def test_a_schema_behind_is_one_line(postgres_url: str, tmp_path: Path) -> None:
    migrate.upgrade(postgres_url, "0012")
    line = _one_line(
        _plateau("serve", "--port", str(free_port()), "--home", str(tmp_path), "--database-url", postgres_url)
    )
    assert "revision 0012" in line
    assert "plateau db upgrade" in line
