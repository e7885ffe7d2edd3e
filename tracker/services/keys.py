"""Metric key names normalised to small ints, cached per process (a key's id never changes)."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from plateau_tracker.server.db.models import MetricKey
from plateau_tracker.server.services._upsert import insert_ignore

_NAMES_PER_LOOKUP = 1_000


class KeyCache:
    """Maps key names to ids. Ids inserted by a transaction are remembered only after it commits."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()

    def resolve(self, session: Session, names: Iterable[str]) -> tuple[dict[str, int], dict[str, int]]:
        """Ids for ``names``, creating missing keys. Returns (all ids, ids to remember once the transaction
        has committed): an id read in a transaction may be one an earlier batch of the same transaction
        inserted (a group commit), which a rollback would undo."""
        wanted = set(names)
        found = {name: self._ids[name] for name in wanted if name in self._ids}
        missing = wanted - found.keys()
        if not missing:
            return found, {}
        stored = self._lookup(session, missing)
        found.update(stored)
        missing -= stored.keys()
        if missing:
            session.execute(insert_ignore(session, MetricKey), [{"name": name} for name in sorted(missing)])
            stored.update(self._lookup(session, missing))
            found.update(stored)
        return found, stored

    @staticmethod
    def _lookup(session: Session, names: set[str]) -> dict[str, int]:
        # In chunks: one IN of 100,000 names is past SQLite's and PostgreSQL's bound-parameter limits.
        ordered = sorted(names)
        found: dict[str, int] = {}
        for start in range(0, len(ordered), _NAMES_PER_LOOKUP):
            chunk = ordered[start : start + _NAMES_PER_LOOKUP]
            rows = session.execute(select(MetricKey.name, MetricKey.id).where(MetricKey.name.in_(chunk)))
            found.update({name: key_id for name, key_id in rows})
        return found

    def remember(self, ids: dict[str, int]) -> None:
        if ids:
            with self._lock:
                self._ids.update(ids)
