"""The ``plateau`` command as the tests run it: ``python -m plateau_tracker`` in a child process of this
interpreter, its output captured as text."""

from __future__ import annotations

import os
import subprocess
import sys


def plateau_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120, clean: bool = False
) -> subprocess.CompletedProcess[str]:
    """``plateau ARGS``. ``env`` is added to this process's environment; ``clean`` first drops every
    ``PLATEAU_`` variable from it (a command that must not find the caller's tracker or home)."""
    base = {k: v for k, v in os.environ.items() if not (clean and k.startswith("PLATEAU_"))}
    return subprocess.run(
        [sys.executable, "-m", "plateau_tracker", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**base, **(env or {})},
    )
