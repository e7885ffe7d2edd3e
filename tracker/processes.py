"""Child processes a command starts (a tracker, Streamlit): they end when the command ends, however it ends.

Ctrl-C reaches the whole foreground process group, but ``kill <pid>`` (SIGTERM) and a closed terminal
(SIGHUP) reach only the command, and its children used to live on, reparented to PID 1. So a command
that starts children turns SIGTERM and SIGHUP into ``SystemExit`` (its ``finally`` blocks stop them), and
on Linux each child also asks the kernel for SIGTERM when its parent dies (``PR_SET_PDEATHSIG``): that
covers ``kill -9`` of the command, which runs no code at all.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import IO, Any

_PR_SET_PDEATHSIG = 1
_EXIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP) if hasattr(signal, "SIGHUP") else (signal.SIGTERM,)


def _exit_on(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def exit_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise ``SystemExit`` in the main thread, so ``finally`` blocks
    (which stop the children) run. A no-op outside the main thread, where handlers cannot be set."""
    try:
        previous = {signum: signal.signal(signum, _exit_on) for signum in _EXIT_SIGNALS}
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _die_with(parent: int) -> Callable[[], None]:
    def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        # The parent may have died between the fork and the prctl (a loaded machine, a kill -9 right
        # after the start): then no signal would ever come, so act on it now.
        if os.getppid() != parent:
            os._exit(128 + signal.SIGTERM)

    return die_with_parent


def start_child(
    command: Sequence[str], *, env: dict[str, str], log: IO[bytes] | None = None
) -> subprocess.Popen[Any]:
    """Start ``command``; on Linux it gets SIGTERM if this process dies first, even by SIGKILL."""
    output: dict[str, Any] = {"stdout": log, "stderr": subprocess.STDOUT} if log is not None else {}
    on_linux = sys.platform.startswith("linux")
    return subprocess.Popen(
        list(command), env=env, preexec_fn=_die_with(os.getpid()) if on_linux else None, **output
    )


def stop_child(process: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds; waits for the child, so none is left a zombie."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def tracker_command(host: str, port: int, home: Path, database_url: str | None) -> list[str]:
    """The command line of a ``plateau serve`` child on the given store."""
    command = [sys.executable, "-m", "plateau_tracker", "serve", "--host", host, "--port", str(port)]
    command += ["--home", str(home)]
    if database_url:
        command += ["--database-url", database_url]
    return command
