"""Plateau SDK: log metrics from a training loop and read back the tracker's stop/checkpoint decisions.

    import plateau_tracker as plateau
    run = plateau.init(project="digits", monitor="val/loss", mode="min", rules=[{"rule": "patience"}])
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
- ``__version__``: the installed release of Plateau.
- ``DEFAULT_URL``: the tracker's address when neither ``url`` nor ``$PLATEAU_URL`` names one.
"""

from __future__ import annotations

from plateau_tracker._decision import Decision
from plateau_tracker._init import init
from plateau_tracker._run import Run
from plateau_tracker._spool import SyncReport, sync
from plateau_tracker._transport import DEFAULT_URL

__version__ = "0.1.0"

__all__ = ["DEFAULT_URL", "Decision", "Run", "SyncReport", "__version__", "init", "sync"]
