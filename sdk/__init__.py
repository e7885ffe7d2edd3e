"""Plateau SDK: log metrics from a training loop and read back the tracker's stop/checkpoint decisions.

    import sdk
    run = sdk.init(project="digits", monitor="val/loss", mode="min", rules=[{"rule": "patience"}])
    for epoch in range(100):
        ...
        run.log({"val/loss": loss}, step=epoch)
        if run.should_stop():
            break
    run.finish()

Imports nothing from the tracker and nothing heavy: it speaks HTTP with the standard library alone.
"""

from __future__ import annotations

from sdk._decision import Decision
from sdk._run import DEFAULT_URL, Run, init
from sdk._spool import SyncReport, sync

__all__ = ["DEFAULT_URL", "Decision", "Run", "SyncReport", "init", "sync"]
