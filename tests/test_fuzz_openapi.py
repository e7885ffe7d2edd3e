"""Schemathesis against the tracker's own OpenAPI document: every operation, with inputs that fit the
schema and inputs that break it, with and without a token, on SQLite (and on PostgreSQL with
PLATEAU_TEST_BACKEND=postgres). No answer may be a 5xx, and the tracker must still serve afterwards.

Bounded: a fixed number of generated cases per operation and mode (``FUZZ_EXAMPLES``), derandomised so a
failure reproduces; the explicit regressions of what fuzzing found live in test_api_hostile.py.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from plateau_tracker.server.config import Settings
from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.db.migrate import upgrade
from plateau_tracker.server.services.auth import create_token
from tests._server import TrackerProcess
from tests.conftest import DEFAULT_POSTGRES_URL, scratch_postgres

# End to end: real processes, real training or real failures; kept out of the quick subset.
pytestmark = pytest.mark.slow

FUZZ_EXAMPLES = int(os.environ.get("PLATEAU_FUZZ_EXAMPLES", "40"))
# Long-polls are capped at the server's max_wait_seconds: keep it short, or a generated wait=1e300 costs
# a minute a case.
_ENV = {"PLATEAU_MAX_WAIT_SECONDS": "0.2"}


@schemathesis.serializer("application/x-ndjson")
def _ndjson(_context: Any, value: Any) -> bytes:
    """POST /api/v1/batches takes one run's batch per line: a generated batch is one line, a list a line
    per item."""
    items = value if isinstance(value, list) else [value]
    return b"".join(json.dumps(item, default=str).encode() + b"\n" for item in items)


@pytest.fixture(scope="module", params=["open", "token"])
def fuzzed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp(f"fuzz-{request.param}")
    with _database_url(home) as url:
        token = None
        if request.param == "token":
            target = url or Settings(home=home).resolved_database_url()
            upgrade(target)
            database = Database(target)
            token = create_token(database, "fuzz", "write")[1]
            database.dispose()
        tracker = TrackerProcess(home, database_url=url, env=_ENV)
        try:
            headers = {"authorization": f"Bearer {token}"} if token else {}
            with httpx.Client(base_url=tracker.url, headers=headers, timeout=30) as client:
                for _ in range(3):  # real ids for the generated paths to find now and then
                    assert client.post("/api/v1/runs", json={"project": "fuzz"}).status_code == 201
            yield {"tracker": tracker, "headers": headers, "mode": request.param}
        finally:
            tracker.stop()


def _database_url(home: Path) -> Any:
    """A scratch PostgreSQL database's URL under PLATEAU_TEST_BACKEND=postgres, else None (SQLite)."""
    if os.environ.get("PLATEAU_TEST_BACKEND") != "postgres":
        return contextlib.nullcontext(None)
    admin = os.environ.get("PLATEAU_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)

    @contextlib.contextmanager
    def scratch() -> Iterator[str]:
        with scratch_postgres(admin) as url:
            upgrade(url)
            yield url

    return scratch()


def test_no_generated_request_gets_a_5xx(fuzzed: dict[str, Any]) -> None:
    tracker: TrackerProcess = fuzzed["tracker"]
    schema = schemathesis.openapi.from_url(f"{tracker.url}/openapi.json")
    statuses: collections.Counter[int] = collections.Counter()
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(
                max_examples=FUZZ_EXAMPLES,
                deadline=None,
                derandomize=True,
                database=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def call(case: Any) -> None:
                for name, value in fuzzed["headers"].items():
                    case.headers = {**(case.headers or {}), name: value}
                response = case.call(base_url=tracker.url, timeout=30)
                statuses[response.status_code] += 1
                if response.status_code >= 500:
                    failures.append(
                        f"{case.method} {case.formatted_path} {case.query}: {response.text[:200]}"
                    )

            with contextlib.suppress(Unsatisfiable):  # an operation no generated example satisfies
                call()
    counts = dict(sorted(statuses.items()))
    print(f"fuzz ({fuzzed['mode']}): {sum(statuses.values())} requests, statuses {counts}")
    assert failures == []
    assert sum(statuses.values()) > 500
    assert httpx.get(f"{tracker.url}/api/v1/health", timeout=5).status_code == 200
