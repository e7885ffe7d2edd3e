"""Finding a running tracker for the demo, or starting one on the embedded default."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tracker.config import Settings


def is_up(url: str, timeout: float = 0.5) -> bool:
    """True when a Plateau tracker answers its health check at ``url``."""
    try:
        response = httpx.get(f"{url.rstrip('/')}/api/v1/health", timeout=timeout)
    except httpx.HTTPError:
        return False
    return response.status_code == 200 and response.json().get("status") == "ok"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _port_is_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


@contextlib.contextmanager
def tracker_for_demo(settings: Settings, url: str | None) -> Iterator[str]:
    """Yield the URL of a tracker: ``url`` if given, the one already on the configured port, or a new
    ``plateau serve`` process on the embedded SQLite default (stopped on exit)."""
    if url:
        if not is_up(url, timeout=5.0):
            raise RuntimeError(f"no Plateau tracker answers at {url}")
        yield url
        return
    default_url = f"http://{settings.host}:{settings.port}"
    if is_up(default_url):
        yield default_url
        return
    port = settings.port if _port_is_free(settings.host, settings.port) else free_port(settings.host)
    home = Path(settings.home).expanduser()
    home.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "tracker", "serve", "--host", settings.host, "--port", str(port)]
    command += ["--home", str(home)]
    if settings.database_url:
        command += ["--database-url", settings.database_url]
    log_path = home / "demo-tracker.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    started_url = f"http://{settings.host}:{port}"
    try:
        deadline = time.monotonic() + 30.0
        while not is_up(started_url):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the tracker did not start; see {log_path}")
            time.sleep(0.1)
        yield started_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
