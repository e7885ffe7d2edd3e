"""How Streamlit serves the dashboard: one command line for ``plateau dashboard`` and its tests, so what
the tests see is what users get."""

from __future__ import annotations

import sys
from pathlib import Path

APP = Path(__file__).resolve().parent / "app.py"


def streamlit_command(port: int, host: str | None = None) -> list[str]:
    """``streamlit run`` of the dashboard on ``port``: headless, no usage statistics, and the toolbar of a
    viewer (no "Deploy" button: a dashboard served to a team is not an app its viewers deploy)."""
    command = [sys.executable, "-m", "streamlit", "run", str(APP), "--server.port", str(port)]
    if host is not None:
        command += ["--server.address", host]
    return [
        *command,
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "viewer",
    ]
