"""The dashboard served by Streamlit for a real browser (the Chromium tests and the suite's section 10)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator

import httpx

from plateau_tracker.dashboard.launch import streamlit_command
from tests._server import free_port

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@contextlib.contextmanager
def dashboard_on(tracker_url: str) -> Iterator[str]:
    """The dashboard served by Streamlit on a free loopback port, reading ``tracker_url``; yields its URL."""
    port = free_port()
    server = subprocess.Popen(
        streamlit_command(port),
        env={**os.environ, "PLATEAU_URL": tracker_url},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/_stcore/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=20)
