"""``PLATEAU_OFFLINE`` and ``PLATEAU_DISABLED``: runs that send nothing, by choice.

``PLATEAU_OFFLINE``: a run that sends nothing, by choice rather than because the tracker is away.

The run goes the way of a run whose tracker is away, with no attempt to reach one: its points, summary and
finish go to the disk spool, its ``should_stop()`` and ``should_checkpoint()`` are answered by the SDK's own
judge, and ``plateau sync`` delivers the spool later.

``PLATEAU_DISABLED``: a run that keeps nothing (a CI job, a debugging session): no connection, no spool,
no queue; ``log()`` keeps only the monitored value for the SDK's own judge, so ``should_checkpoint()``
still marks each new best and ``should_stop()`` answers from the rules the SDK judges itself.

Each is set by ``1`` (or ``true``, ``yes``, ``on``).
"""

from __future__ import annotations

import os

from plateau_tracker._http import Reply
from plateau_tracker._transport import OfflineByChoiceError, Transport

_TRUE = frozenset({"1", "true", "yes", "on"})


def offline_chosen() -> bool:
    """Whether ``$PLATEAU_OFFLINE`` asks for an offline run."""
    return os.environ.get("PLATEAU_OFFLINE", "").strip().lower() in _TRUE


def disabled_chosen() -> bool:
    """Whether ``$PLATEAU_DISABLED`` asks for runs that keep nothing."""
    return os.environ.get("PLATEAU_DISABLED", "").strip().lower() in _TRUE


class OfflineTransport(Transport):
    """A transport that never opens a connection: every call is answered as by a tracker away."""

    carries = False

    def _reply(self, method: str, path: str, **_: object) -> Reply:
        raise OfflineByChoiceError("PLATEAU_OFFLINE is set: nothing is sent; `plateau sync` sends the spool")
