"""Each live run's latest decision for the trainer, kept per app: ingest answers every batch with it, and
reading it back cost a query per batch (a twentieth of a batch's work) though it changes only when the
run's rules decide something."""

from __future__ import annotations

import threading
from collections import OrderedDict

from plateau_tracker.server.db import models
from plateau_tracker.server.schemas.decisions import DecisionPublic
from plateau_tracker.server.services.convert import no_decision
from plateau_tracker.server.services.policies import run_identity

DEFAULT_CAPACITY = 10_000


class LatestDecisions:
    """Run id → (its ``decision_seq``, the newest decision that is not an alert), the least recently used
    dropped past ``capacity``.

    Decisions are append-only and numbered under the run's row lock, so the answer for a run at a given
    ``decision_seq`` never changes, on any replica: an entry is used only while the run's row, read under
    that lock, still has the same ``decision_seq``. Entries are remembered only once the transaction that
    read or made them has committed (a batch rolled back may have numbered a decision that never was). One
    per app, as :class:`~tracker.services.policies.PolicyCache`; ingest calls it from worker threads, hence
    the lock."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._latest: OrderedDict[tuple[int, object], tuple[int, DecisionPublic | None]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, run: models.Run) -> DecisionPublic | None:
        """The run's latest decision as remembered at its current ``decision_seq``; None when not known."""
        identity = run_identity(run)
        with self._lock:
            known = self._latest.get(identity)
            if known is None or known[0] != run.decision_seq:
                return None
            self._latest.move_to_end(identity)
        decision = known[1]
        # None: only alerts so far, so "continue" at the run's judged step now (it moves without a decision).
        return no_decision(run) if decision is None else decision

    def remember(
        self, identity: tuple[int, object], decision_seq: int, decision: DecisionPublic | None
    ) -> None:
        """After the commit: ``decision`` is the newest non-alert decision of the run (``identity``:
        :func:`run_identity`) at ``decision_seq`` (None when every decision so far is an alert)."""
        with self._lock:
            self._latest[identity] = (decision_seq, decision)
            self._latest.move_to_end(identity)
            if len(self._latest) > self.capacity:
                self._latest.popitem(last=False)

    def __len__(self) -> int:
        return len(self._latest)
