"""The PostgreSQL pool's size is a setting: workers x replicas x (pool + 1 listener) must fit the server's
max_connections, which the operator knows and the tracker does not."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from plateau_tracker.server.config import Settings
from plateau_tracker.server.db.engine import DEFAULT_POOL_SIZE, Database

# Engines connect lazily: building one for a server names no live connection.
SERVER_URL = "postgresql+psycopg://plateau@127.0.0.1:9/plateau"


def test_the_pool_size_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().db_pool_size == DEFAULT_POOL_SIZE == 12
    monkeypatch.setenv("PLATEAU_DB_POOL_SIZE", "40")
    settings = Settings()
    assert settings.db_pool_size == 40
    database = Database(SERVER_URL, pool_size=settings.db_pool_size)
    assert database.engine.pool.size() == 40  # type: ignore[attr-defined]
    assert Database(SERVER_URL).engine.pool.size() == 12  # type: ignore[attr-defined]


@pytest.mark.parametrize("size", ["0", "-1", "1001", "many"])
def test_a_pool_size_out_of_bounds_is_refused_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, size: str
) -> None:
    monkeypatch.setenv("PLATEAU_DB_POOL_SIZE", size)
    with pytest.raises(ValidationError, match="db_pool_size"):
        Settings()
