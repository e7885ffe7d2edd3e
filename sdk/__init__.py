"""Plateau SDK: log metrics from a training loop and read back the tracker's stop/checkpoint decisions.

    import sdk
    run = sdk.init(project="digits", monitor="val/loss", mode="min", rules=[{"rule": "patience"}])
    for epoch in range(100):
        ...
        run.log({"val/loss": loss}, step=epoch)
        if run.should_stop():
            break
    run.finish()

Imports nothing from the tracker and nothing heavy: it speaks HTTP with the standard library alone, and
imports on every platform (no Unix-only module at import time).

Public API:

- ``init``: start or join a run; returns a ``Run``.
- ``Run``: ``log``, ``should_stop``, ``should_checkpoint``, ``decision``, ``finish``, ``watch_optimizer`` (the
  rate each evaluation trained at, logged with it) and the summary figures.
- ``Decision``: the tracker's verdict (action, step, best step and value, reason, evidence).
- ``sync``: deliver what the disk spool holds (``plateau sync``); returns a ``SyncReport``.
- ``SyncReport``: what a sync delivered, left and refused.
- ``DEFAULT_URL``: the tracker's address when neither ``url`` nor ``$PLATEAU_URL`` names one.
"""

from __future__ import annotations

from sdk._decision import Decision
from sdk._init import init
from sdk._run import Run
from sdk._spool import SyncReport, sync
from sdk._transport import DEFAULT_URL

__all__ = ["DEFAULT_URL", "Decision", "Run", "SyncReport", "init", "sync"]
