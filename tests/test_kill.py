"""A trainer killed with SIGKILL loses nothing it logged more than a flush interval before, in every state
of its link to the tracker: up, down, or replaying a spool of more than 20,000 points. After ``plateau
sync``, every such point is on the tracker, and none twice.

Before: with the tracker down from step ~2,000 to ~14,000 and the trainer killed while it replayed its
spool, 27,384 of 132,846 points were lost, 26,028 of them logged well before the kill: while the spool
replayed, new points waited in memory.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

from plateau_tracker._sender import FLUSH_INTERVAL_S
from tests._server import TrackerProcess, free_port

# End to end: real processes, real training or real failures; kept out of the quick subset.
pytestmark = pytest.mark.slow

SAFE_S = FLUSH_INTERVAL_S  # what was logged longer ago than the flush interval must survive a kill


class SlowProxy:
    """A TCP proxy to ``upstream`` that holds each request's bytes ``delay`` seconds: a tracker slow
    enough that replaying a spool takes seconds, so a kill lands in the middle of it."""

    def __init__(self, port: int, upstream: int, delay: float) -> None:
        self.listener = socket.create_server(("127.0.0.1", port))
        self.upstream, self.delay = upstream, delay
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self._pipe, args=(client, server, self.delay), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, 0.0), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, target: socket.socket, delay: float) -> None:
        try:
            while data := source.recv(1 << 16):
                time.sleep(delay)
                target.sendall(data)
        except OSError:
            pass
        finally:
            source.close()
            target.close()

    def close(self) -> None:
        self.listener.close()


def _progress(path: Path) -> list[tuple[int, float]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            rows.append((int(parts[0]), float(parts[1])))
    return rows


def _wait_steps(path: Path, steps: int, timeout: float = 60.0) -> None:
    """Until the trainer has logged ``steps`` steps, and for longer than the flush interval (so that some of
    what it logged must have been sent or spooled)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = _progress(path)
        if rows and rows[-1][0] >= steps and time.monotonic() - rows[0][1] > SAFE_S + 0.5:
            return
        time.sleep(0.05)
    raise AssertionError(f"the trainer did not reach step {steps}")


def _stored_steps(url: str, project: str, key: str) -> list[int]:
    with httpx.Client(base_url=url, timeout=30) as client:
        runs = client.get("/api/v1/runs", params={"project": project}).json()["data"]
        assert len(runs) == 1, runs
        steps: list[int] = []
        start = 0
        while True:
            page = client.get(
                f"/api/v1/runs/{runs[0]['id']}/history",
                params={"key": key, "start_step": start, "limit": 100_000, "form": "columns"},
            ).json()
            steps += page["steps"]
            if page["next_step"] is None:
                return steps
            start = page["next_step"]


@pytest.mark.parametrize("state", ["up", "down", "replaying"])
def test_a_killed_trainer_loses_nothing_logged_a_flush_interval_before(tmp_path: Path, state: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    project = f"kill-{state}-{uuid.uuid4().hex[:6]}"
    home, progress = tmp_path / "trainer", tmp_path / "progress.txt"
    tracker = TrackerProcess(tmp_path / "tracker", port=port) if state == "up" else None
    proxy: SlowProxy | None = None
    env = {**os.environ, "PLATEAU_HOME": str(home)}
    pause = "0.15" if state == "up" else "0.02"  # offline, reach a spool of 20,000+ points sooner
    trainer = subprocess.Popen(
        [sys.executable, "-m", "tests._kill_trainer", url, project, str(progress), pause],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        if state == "replaying":
            _wait_steps(progress, 12_000)  # 24,000+ points in the spool
            tracker = TrackerProcess(tmp_path / "tracker")
            proxy = SlowProxy(port, tracker.port, delay=0.1)
            with httpx.Client(base_url=tracker.url, timeout=5) as client:
                deadline = time.monotonic() + 60
                while not client.get("/api/v1/runs", params={"project": project}).json()["data"]:
                    assert time.monotonic() < deadline
                    time.sleep(0.005)
            time.sleep(1.5)  # the replay has run for a while, more than a flush interval: kill it now
            url = tracker.url
        else:
            _wait_steps(progress, 6_000)
        killed_at = time.monotonic()
        trainer.send_signal(signal.SIGKILL)
        trainer.wait(10)
        spooled = len(list((home / "spool").rglob("b-*.json")))
        if proxy is not None:
            proxy.close()
        if tracker is None:
            tracker = TrackerProcess(tmp_path / "tracker", port=port)
        synced = subprocess.run(
            [sys.executable, "-m", "plateau_tracker", "sync", "--url", url],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert synced.returncode == 0, synced.stderr
        safe = max(step for step, moment in _progress(progress) if moment <= killed_at - SAFE_S)
        for key in ("loss", "m"):
            steps = _stored_steps(url, project, key)
            assert len(steps) == len(set(steps))  # none twice
            missing = sorted(set(range(safe + 1)) - set(steps))
            print(
                f"kill while {state}: {len(steps)} points of {key} stored, logged up to step "
                f"{_progress(progress)[-1][0]}+, safe up to {safe}, {spooled} spool files at the kill, "
                f"missing {len(missing)}"
            )
            assert missing == []
    finally:
        if trainer.poll() is None:
            trainer.kill()
        if tracker is not None:
            tracker.stop()
