"""The parsed policy of each run, kept per app: a run's policy never changes after creation, and parsing
it on every batch cost more than judging the batch's points."""

from __future__ import annotations

import threading
from collections import OrderedDict

from plateau_tracker.server.db import models
from plateau_tracker.server.policy import PolicySpec

DEFAULT_CAPACITY = 10_000


class PolicyCache:
    """Run id → parsed policy, the least recently used dropped past ``capacity``.

    One per app (``app.state``), never per process: run ids are only unique within one database, and two
    apps in one process (tests, or a tool serving two stores) must not read each other's policies. Ingest
    calls it from worker threads, hence the lock."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._policies: OrderedDict[int, PolicySpec] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, run: models.Run) -> PolicySpec:
        """The run's policy, parsed once (the run must have one)."""
        with self._lock:
            policy = self._policies.get(run.id)
            if policy is not None:
                self._policies.move_to_end(run.id)
                return policy
        policy = PolicySpec.model_validate(run.policy)
        with self._lock:
            self._policies[run.id] = policy
            if len(self._policies) > self.capacity:
                self._policies.popitem(last=False)
        return policy

    def __len__(self) -> int:
        return len(self._policies)
