"""The peers measured beside Plateau: an MLflow tracking server, and TensorBoard's SummaryWriter.

Both are optional (the ``bench`` extra installs them); a missing one is reported and its figures skipped.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from tests._server import free_port, stop_process, wait_until_healthy


def missing(module: str) -> str | None:
    """Why a peer cannot be measured, or None when its package is importable."""
    if importlib.util.find_spec(module) is None:
        return f"{module} is not installed (pip install -e '.[bench]')"
    return None


class MlflowServer:
    """``mlflow server`` with a SQLite backend store on a free loopback port (its default workers: 1)."""

    def __init__(self, home: Path, *, workers: int = 1) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.database = home / "mlflow.db"
        command = [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{self.database}",
            "--default-artifact-root",
            str(home / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            str(workers),
        ]
        log_path = home / "mlflow.log"
        self._log = log_path.open("wb")
        # MLflow 3 also starts a job runner and several huey consumers for its GenAI jobs; they have nothing
        # to do with metrics, and booting them keeps both cores busy for ~30 s after the server answers,
        # which would be charged to whatever is measured next (Plateau's figures included).
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        try:
            wait_until_healthy(self.process, f"{self.url}/health", log_path, 120, poll=0.2)
        except RuntimeError:
            self.stop()
            raise

    def stop(self) -> None:
        stop_process(self.process, timeout=15)
        self._log.close()
