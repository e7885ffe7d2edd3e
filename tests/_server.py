"""A real tracker in a subprocess (``python -m plateau_tracker serve``) on a free loopback port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from plateau_tracker.server.processes import stop_child


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class TrackerProcess:
    """Starts ``plateau serve`` and waits for its health check; ``stop()`` terminates it."""

    def __init__(
        self,
        home: Path,
        *,
        workers: int = 1,
        database_url: str | None = None,
        port: int | None = None,
        env: dict[str, str] | None = None,
        max_files: int | None = None,
        preexec: Callable[[], None] | None = None,
        python: str | None = None,
    ) -> None:
        """``python``: the interpreter to serve with (another install of Plateau, for a benchmark's
        baseline); this one's when None."""
        self.home, self.workers = home, workers
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = home / f"tracker-{self.port}.log"
        command = [
            python or sys.executable,
            "-m",
            "plateau_tracker",
            "serve",
            "--port",
            str(self.port),
            "--home",
            str(home),
        ]
        command += ["--workers", str(workers)]
        if database_url:
            command += ["--database-url", database_url]
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("PLATEAU_")}, **(env or {})}
        home.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=(lambda: _limit_files(max_files)) if max_files else preexec,
            )
        self._wait_ready()

    def _wait_ready(self, timeout: float = 120.0) -> None:
        try:
            wait_until_healthy(self.process, f"{self.url}/api/v1/health", self.log_path, timeout, poll=0.05)
        except RuntimeError:
            self.stop()
            raise

    def stop(self) -> None:
        stop_process(self.process, timeout=10)


def wait_until_healthy(
    process: subprocess.Popen[bytes], health_url: str, log_path: Path, timeout: float, *, poll: float
) -> None:
    """Return once ``health_url`` answers 200; RuntimeError (with the log) if the process exits or
    ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args} exited: {log_path.read_text()[-2000:]}")
        try:
            if httpx.get(health_url, timeout=max(0.5, poll)).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(poll)
    raise RuntimeError(f"no answer from {health_url} within {timeout}s: {log_path.read_text()[-2000:]}")


def stop_process(process: subprocess.Popen[bytes], *, timeout: float) -> None:
    """Terminate ``process`` and wait; kill it if it is still there after ``timeout`` seconds."""
    stop_child(process, grace=timeout)


def _limit_files(count: int) -> None:
    """In the child before it runs: at most ``count`` open files, soft and hard (it cannot lift them)."""
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))
