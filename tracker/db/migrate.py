"""Alembic, driven from code: ``plateau db upgrade`` and the embedded default's upgrade on start."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

import plateau_tracker.migrations as migrations


def alembic_config(database_url: str) -> Config:
    """An Alembic config pointing at the packaged ``migrations`` scripts and ``database_url``."""
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    # Alembic interpolates '%' in option values.
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str) -> None:
    command.downgrade(alembic_config(database_url), revision)


def head_revision(database_url: str) -> str | None:
    return ScriptDirectory.from_config(alembic_config(database_url)).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()
