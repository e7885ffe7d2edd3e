"""The runs still open in this process: finished at interpreter exit, their sender restarted in a forked
child. The hooks are installed once, by the first run started."""

from __future__ import annotations

import atexit
import os
import sys
import threading
import weakref
from typing import Protocol

from plateau_tracker._types import FinalStatus


class LiveRun(Protocol):
    """What the hooks need of a run."""

    exit_timeout: float

    def finish(self, status: FinalStatus | None = None, timeout: float = ...) -> int: ...

    def restart_after_fork(self) -> None: ...


# Documented module state: the runs still open (weakly held: a run nobody holds is not kept alive).
_live: weakref.WeakSet[LiveRun] = weakref.WeakSet()
_installed = False
_lock = threading.Lock()


def add(run: LiveRun) -> None:
    """Keep ``run`` until it finishes: finish it at exit, restart its sender in a forked child."""
    _install()
    _live.add(run)


def discard(run: LiveRun) -> None:
    """``run`` has finished."""
    _live.discard(run)


def _install() -> None:
    global _installed
    with _lock:
        if _installed:
            return
        atexit.register(_finish_at_exit)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_restart_after_fork)
        _installed = True


def _finish_at_exit() -> None:
    crashed = getattr(sys, "last_value", None) is not None or getattr(sys, "last_exc", None) is not None
    for run in list(_live):
        run.finish("failed" if crashed else None, timeout=run.exit_timeout)


def _restart_after_fork() -> None:
    for run in list(_live):
        run.restart_after_fork()
