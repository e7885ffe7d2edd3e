"""The parsed policy of each run, kept per app: a run's policy never changes after creation, and parsing
it on every batch cost more than judging the batch's points."""

from __future__ import annotations

import threading
from collections import OrderedDict

from plateau_tracker.server.db import models
from plateau_tracker.server.policy import PolicySpec

DEFAULT_CAPACITY = 10_000
_NONE_JUDGED: frozenset[str] = frozenset()


def run_identity(run: models.Run) -> tuple[int, object]:
    """What names one run for the caches of an app: its id and its start. SQLite gives a deleted run's id to
    the next run created, and a cached policy or decision of the deleted run must not answer for it."""
    return run.id, run.started_at


class PolicyCache:
    """Run (id and start, :func:`run_identity`) → parsed policy, the least recently used dropped past
    ``capacity``.

    One per app (``app.state``), never per process: run ids are only unique within one database, and two
    apps in one process (tests, or a tool serving two stores) must not read each other's policies. Ingest
    calls it from worker threads, hence the lock."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._policies: OrderedDict[tuple[int, object], PolicySpec] = OrderedDict()
        self._watched: OrderedDict[int, frozenset[str]] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, run: models.Run) -> PolicySpec:
        """The run's policy, parsed once (the run must have one)."""
        identity = run_identity(run)
        with self._lock:
            policy = self._policies.get(identity)
            if policy is not None:
                self._policies.move_to_end(identity)
                return policy
        policy = PolicySpec.model_validate(run.policy)
        with self._lock:
            self._policies[identity] = policy
            if len(self._policies) > self.capacity:
                self._policies.popitem(last=False)
        return policy

    def note_watched(self, run_id: int, policy: PolicySpec | None) -> None:
        """Remember which keys the run's rules judge (none without a policy), for :meth:`watched`."""
        keys = _NONE_JUDGED if policy is None else policy.judged_keys()
        with self._lock:
            if self._watched.get(run_id) is keys:
                return
            self._watched[run_id] = keys
            if len(self._watched) > self.capacity:
                self._watched.popitem(last=False)

    def watched(self, run_id: int) -> frozenset[str] | None:
        """The keys the run's rules judge, as noted by an earlier batch of the run (None: none noted).
        Looked up by id alone, before the run's row is read: only the writer's queue order rests on it,
        so the id of a deleted run that SQLite gave a new one misleads that order at most."""
        with self._lock:
            return self._watched.get(run_id)

    def __len__(self) -> int:
        return len(self._policies)
