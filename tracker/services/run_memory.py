"""What a worker remembers of each live run between its batches: the rules' states as stored, and the last
stored block of each series it wrote. Without it every batch read them back (the states' JSON parsed
again, the series' block summaries selected again), though nothing but this worker had changed them.

A memory is the database's only while the run's ``write_seq`` (counted up by every applied batch, under
the run's lock) is the count it was kept at: a worker that finds another count (another worker or replica
wrote since) forgets it and reads the run afresh. A batch takes its run's memory out for its transaction
and puts it back only once that has committed, so a batch that fails or is rolled back leaves nothing
behind that the database does not hold.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from plateau_tracker.server.db import models
from plateau_tracker.server.services._point_store import Tails
from plateau_tracker.server.services.policies import run_identity

DEFAULT_CAPACITY = 10_000


@dataclass
class RunMemory:
    """One run as its last batch left it: ``states``, its rules' states as they read back from the
    database (None: not known here); ``tails``, its series' last blocks (a series absent: not known)."""

    states: list[Any] | None = None
    tails: Tails = field(default_factory=dict)


class RunMemories:
    """Run (id and start) → its memory at a ``write_seq``, the least recently used dropped past
    ``capacity``. One per app, as :class:`~tracker.services.policies.PolicyCache`; ingest calls it from
    worker threads, hence the lock."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._memories: OrderedDict[tuple[int, object], tuple[int, RunMemory]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, run: models.Run) -> RunMemory:
        """The run's memory, taken out: what was kept at the run's ``write_seq``, else an empty one."""
        with self._lock:
            kept = self._memories.pop(run_identity(run), None)
        if kept is None or kept[0] != run.write_seq:
            return RunMemory()
        return kept[1]

    def keep(self, identity: tuple[int, object], write_seq: int, memory: RunMemory) -> None:
        """Put back the memory of a run whose transaction committed at ``write_seq``."""
        with self._lock:
            self._memories[identity] = (write_seq, memory)
            self._memories.move_to_end(identity)
            if len(self._memories) > self.capacity:
                self._memories.popitem(last=False)

    def __len__(self) -> int:
        return len(self._memories)
