"""Dialect-specific ``INSERT ... ON CONFLICT DO NOTHING`` (SQLite and PostgreSQL share the syntax)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Insert
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session


def insert_ignore(session: Session, table: Any) -> Insert:
    """An insert into ``table`` that skips rows violating a unique constraint."""
    if session.get_bind().dialect.name == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing()
    return sqlite.insert(table).on_conflict_do_nothing()
