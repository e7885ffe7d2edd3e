"""Shared fixtures: a real tracker process on SQLite, an HTTP client, the tracker's app in-process, a
scratch PostgreSQL database."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import os
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from plateau_tracker.server.app import create_app
from plateau_tracker.server.config import Settings
from plateau_tracker.server.db.migrate import upgrade
from plateau_tracker.server.db.prepare import prepare_schema
from tests._server import TrackerProcess

DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


class _RepositoryFoldersAreNotPackages(importlib.abc.MetaPathFinder):
    """The checkout's root is on ``sys.path`` (the tests import ``tests.*``), which would let ``sdk`` or
    ``tracker`` import as packages of their own and hide a reference to the old names that an installed
    wheel cannot satisfy. Under the tests they fail as they would there."""

    FOLDERS = frozenset({"sdk", "tracker", "dashboard", "migrations"})

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in self.FOLDERS:
            raise ModuleNotFoundError(f"{fullname!r} is a folder of the repository; import plateau_tracker")
        return None


sys.meta_path.insert(0, _RepositoryFoldersAreNotPackages())


@pytest.fixture(autouse=True)
def plateau_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test's SDK spool (and anything else under PLATEAU_HOME) lives in its own temporary folder."""
    home = tmp_path_factory.mktemp("plateau-home")
    monkeypatch.setenv("PLATEAU_HOME", str(home))
    return home


@contextlib.contextmanager
def _shared_store() -> Iterator[str | None]:
    """The store of the shared tracker and of the in-process app: None (SQLite under their home), or with
    PLATEAU_TEST_BACKEND=postgres a fresh, migrated PostgreSQL database, dropped on exit."""
    if os.environ.get("PLATEAU_TEST_BACKEND") != "postgres":
        yield None
        return
    admin_url = os.environ.get("PLATEAU_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)
    with scratch_postgres(admin_url) as url:
        upgrade(url)
        yield url


@pytest.fixture(scope="session")
def tracker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TrackerProcess]:
    """The shared tracker: SQLite, or with PLATEAU_TEST_BACKEND=postgres a fresh PostgreSQL database."""
    home = tmp_path_factory.mktemp("tracker-home")
    with _shared_store() as database_url:
        process = TrackerProcess(home, database_url=database_url)
        yield process
        process.stop()


@contextlib.contextmanager
def scratch_postgres(admin_url: str) -> Iterator[str]:
    """A new empty database on the server at ``admin_url``, dropped on exit."""
    name = f"plateau_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def client(request: pytest.FixtureRequest) -> Iterator[httpx.Client]:
    """An HTTP client of the shared tracker process; in modules marked ``in_process`` (API tests that need
    no server process: no SDK, no second client, no long-poll woken from elsewhere), of the tracker's app
    in this process instead (:func:`app_client`)."""
    if request.node.get_closest_marker("in_process") is not None:
        yield request.getfixturevalue("app_client")
        return
    tracker: TrackerProcess = request.getfixturevalue("tracker")
    with httpx.Client(base_url=tracker.url, timeout=30) as http:
        yield http


@pytest.fixture(scope="session")
def app_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The tracker's app in this process (``create_app`` on its own store: SQLite, or with
    PLATEAU_TEST_BACKEND=postgres a fresh PostgreSQL database); requests come from loopback."""
    home = tmp_path_factory.mktemp("app-home")
    with _shared_store() as database_url:
        app = create_app(Settings(home=home, database_url=database_url))
        with TestClient(app, base_url="http://localhost", client=("127.0.0.1", 50000)) as client:
            yield client


def create_run(client: httpx.Client, policy: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"project": "tests", "experiment": "e", **fields}
    if policy is not None:
        body["policy"] = policy
    response = client.post("/api/v1/runs", json=body)
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


@pytest.fixture(scope="session")
def postgres_server_url() -> str:
    """The admin URL of a reachable PostgreSQL (``PLATEAU_TEST_POSTGRES_URL``, else the local default)."""
    explicit = os.environ.get("PLATEAU_TEST_POSTGRES_URL")
    url = explicit or DEFAULT_POSTGRES_URL
    try:
        engine = create_engine(url, connect_args={"connect_timeout": 3})
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        engine.dispose()
    except Exception as exc:  # any failure to connect means: no server here
        if explicit:  # asked for by name: failing to reach it is an error, not a skip
            raise
        pytest.skip(
            f"no PostgreSQL reachable at {make_url(url).render_as_string()} ({type(exc).__name__}); "
            "set PLATEAU_TEST_POSTGRES_URL to run these tests"
        )
    return url


@pytest.fixture
def postgres_url(postgres_server_url: str) -> Iterator[str]:
    """A fresh, empty database on the PostgreSQL server, dropped afterwards."""
    with scratch_postgres(postgres_server_url) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty store at the newest schema, once as a SQLite file and once as a scratch PostgreSQL
    database (skipped, saying so, where no server answers)."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        upgrade(url, "head")
        return url
    url = f"sqlite:///{tmp_path / 'plateau.db'}"
    prepare_schema(url)
    return url
