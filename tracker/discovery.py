"""Finding the tracker a command should talk to, or starting one on its store: what ``plateau demo``,
``plateau dashboard`` and ``plateau sync`` share."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from plateau_tracker._http import HttpClient, TransportErrors
from plateau_tracker.client import TrackerClient, TrackerError
from plateau_tracker.server.config import Settings
from plateau_tracker.server.db.engine import store_identity
from plateau_tracker.server.processes import exit_on_signals, start_child, stop_child, tracker_command


class TrackerUnavailableError(RuntimeError):
    """No usable tracker: the one named does not answer, or one could not be started (one line to show)."""


def health_of(url: str, timeout: float = 0.5) -> dict[str, Any] | None:
    """The answer of a Plateau tracker's health check at ``url``, None when no tracker answers there."""
    try:
        with TrackerClient(url, timeout=timeout) as client:
            body = client.health()
    except (TrackerError, ValueError):  # no answer, a refusal, or a URL that cannot be one
        return None
    if not isinstance(body, dict) or body.get("status") not in ("ok", "degraded"):
        return None
    return body


def is_up(url: str, timeout: float = 0.5) -> bool:
    """True when a Plateau tracker answers its health check at ``url``."""
    return health_of(url, timeout) is not None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for_http(url: str, process: subprocess.Popen[Any], timeout: float) -> bool:
    """Wait until ``url`` answers 200; False if ``process`` exits first or ``timeout`` passes."""
    parts = urllib.parse.urlsplit(url)
    base, path = f"{parts.scheme}://{parts.netloc}", parts.path
    deadline = time.monotonic() + timeout
    with HttpClient(base, timeout=1.0, connect_timeout=1.0, headers={}) as client:
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if client.request("GET", path).status == 200:
                    return True
            except TransportErrors:
                pass
            time.sleep(0.2)
    return False


def port_is_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


@contextlib.contextmanager
def tracker_for(settings: Settings, url: str | None) -> Iterator[str]:
    """Yield the URL of a tracker: ``url`` if given; else the one on the configured port when it keeps
    the configured store; else a new ``plateau serve`` child on that store (the configured port, or a
    free one when the port is taken), stopped on exit, SIGTERM and SIGHUP included."""
    if url:
        if not is_up(url, timeout=5.0):
            raise TrackerUnavailableError(f"no Plateau tracker answers at {url}")
        yield url
        return
    store = settings.resolved_database_url()
    default_url = f"http://{settings.host}:{settings.port}"
    health = health_of(default_url)
    if health is not None and health.get("store") == store_identity(store):
        yield default_url
        return
    if health is not None:
        # Another tracker, on another database, holds the port: logging into it would put this command's
        # runs where its settings do not say (and where the user will not look for them).
        print(
            f"plateau: the tracker on {default_url} keeps another database, not {store}; "
            "starting one for it on a free port",
            file=sys.stderr,
            flush=True,
        )
    port = settings.port if port_is_free(settings.host, settings.port) else free_port(settings.host)
    home = Path(settings.home).expanduser()
    home.mkdir(parents=True, exist_ok=True)
    command = tracker_command(settings.host, port, home, settings.database_url)
    log_path = home / "demo-tracker.log"
    with exit_on_signals():
        with log_path.open("ab") as log:
            process = start_child(command, env=dict(os.environ), log=log)
        started_url = f"http://{settings.host}:{port}"
        try:
            deadline = time.monotonic() + 60.0
            while not is_up(started_url):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise TrackerUnavailableError(f"the tracker did not start; see {log_path}")
                time.sleep(0.1)
            yield started_url
        finally:
            stop_child(process)
