"""A real tracker in a subprocess (``python -m tracker serve``) on a free loopback port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


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
    ) -> None:
        self.home = home
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = home / f"tracker-{self.port}.log"
        command = [sys.executable, "-m", "tracker", "serve", "--port", str(self.port), "--home", str(home)]
        command += ["--workers", str(workers)]
        if database_url:
            command += ["--database-url", database_url]
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("PLATEAU_")}, **(env or {})}
        home.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tracker exited: {self.log_path.read_text()}")
            try:
                if httpx.get(f"{self.url}/api/v1/health", timeout=0.5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"tracker did not answer within {timeout}s: {self.log_path.read_text()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
