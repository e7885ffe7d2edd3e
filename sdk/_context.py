"""What a run was started from, recorded in its config under ``plateau_context`` when it is created: the
git commit and whether the tree had uncommitted changes, the command line, the host, Python and the
versions of the packages that shape a training run. Read once, at ``init``; a part that cannot be read in
time (no git, a slow file system) is left out, never raised."""

from __future__ import annotations

import os
import platform
import re
import socket
import subprocess
import sys
from importlib import metadata
from typing import Any

CONTEXT_KEY = "plateau_context"
# The distributions that decide what a run computes, where installed (import names differ: scikit-learn).
PACKAGES = (
    "plateau-tracker",
    "torch",
    "numpy",
    "lightning",
    "transformers",
    "accelerate",
    "keras",
    "tensorflow",
    "jax",
    "optuna",
    "scikit-learn",
    "xgboost",
    "lightgbm",
)
_GIT_TIMEOUT_S = 2.0
# An option whose value must not be stored: --token, --hf-token=..., --api-key, --password, --secret (its
# last word names a secret: --max-tokens does not).
_SECRET_OPTION = re.compile(
    r"^--?(?:[\w.-]*[-_.])?(token|secret|password|passwd|api[-_]?key|secret[-_]?key|access[-_]?key|credentials?)$",
    re.I,
)
REDACTED = "<redacted>"


def redacted(argv: list[str]) -> list[str]:
    """The command line with the values of options that name a secret replaced (``--token X`` and
    ``--token=X`` alike): a run's config is readable by everyone with the project's read token."""
    shown: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            shown.append(REDACTED)
            hide_next = False
            continue
        name, equals, _ = arg.partition("=")
        if _SECRET_OPTION.match(name):
            shown.append(f"{name}={REDACTED}" if equals else arg)
            hide_next = not equals
        else:
            shown.append(arg)
    return shown


def run_context() -> dict[str, Any]:
    """The context of this process, as :data:`CONTEXT_KEY` holds it."""
    context: dict[str, Any] = {
        "command": redacted(sys.argv),
        "cwd": os.getcwd(),
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "packages": _versions(),
    }
    git = _git()
    if git:
        context["git"] = git
    return context


def _versions() -> dict[str, str]:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def _git() -> dict[str, Any]:
    """The commit checked out where the process runs, its branch, and whether tracked files differ from
    it; empty outside a repository or without git."""
    commit = _git_output("rev-parse", "HEAD")
    if commit is None:
        return {}
    found: dict[str, Any] = {"commit": commit}
    branch = _git_output("rev-parse", "--abbrev-ref", "HEAD")
    if branch is not None and branch != "HEAD":
        found["branch"] = branch
    status = _git_output("status", "--porcelain", "--untracked-files=no")
    if status is not None:
        found["dirty"] = bool(status)
    return found


def _git_output(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=_GIT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
