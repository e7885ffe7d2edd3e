"""Long commands show their progress on a terminal (what is done of how much, the rate, the time left)
and print nothing of it when piped: ``plateau export`` under a pseudo-terminal and through a pipe."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from plateau_tracker._progress import Progress
from tests._server import TrackerProcess, free_port

PLATEAU = [sys.executable, "-m", "plateau_tracker"]

pytest.importorskip("tensorboard")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_line_says_done_of_total_the_rate_and_the_time_left() -> None:
    shown = _Terminal()
    progress = Progress("plateau export", total=1_000_000, stream=shown)
    progress.add(250_000)
    line = progress.line(progress._started + 2.0)
    assert line == "plateau export: 250,000 / 1,000,000 points, 125,000/s, 6 s left"
    progress.close()
    assert shown.getvalue().endswith("\n")
    assert "\r\x1b[K" in shown.getvalue()


def test_nothing_is_drawn_off_a_terminal() -> None:
    piped = io.StringIO()
    progress = Progress("plateau export", total=10, stream=piped)
    for _ in range(10):
        progress.add()
    progress.close()
    assert piped.getvalue() == ""


def _stored_run(url: str, points: int) -> int:
    with httpx.Client(base_url=url, timeout=60) as client:
        run = client.post("/api/v1/runs", json={"project": f"progress-{uuid.uuid4().hex[:6]}"}).json()
        for start in range(0, points, 10_000):
            steps = list(range(start, min(points, start + 10_000)))
            batch = {
                "batch_id": f"b{start}",
                "series": [{"key": "loss", "steps": steps, "values": [1.0] * len(steps)}],
            }
            assert client.post(f"/api/v1/runs/{run['id']}/metrics", json=batch).status_code == 200
        return int(run["id"])


def _on_a_terminal(command: list[str], env: dict[str, str]) -> str:
    """What ``command`` wrote to its standard error, a pseudo-terminal, once it exited 0."""
    parent, child = pty.openpty()
    shown = b""
    with subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=child, env=env
    ) as process:
        os.close(child)
        while select.select([parent], [], [], 120)[0]:
            try:
                chunk = os.read(parent, 4096)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            shown += chunk
        assert process.wait(timeout=120) == 0, shown.decode()
    os.close(parent)
    return shown.decode()


def _piped(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def test_export_then_import_show_progress_on_a_terminal_and_not_in_a_pipe(
    tracker: TrackerProcess, tmp_path: Path
) -> None:
    run_id = _stored_run(tracker.url, 30_000)
    export = [*PLATEAU, "export", "tensorboard", "--run", str(run_id)]
    env = {**os.environ, "PLATEAU_URL": tracker.url}

    text = _on_a_terminal([*export, "--logdir", str(tmp_path / "tty")], env)
    assert "plateau export: 30,000 / 30,000 points" in text, text
    assert "/s" in text
    piped = _piped([*export, "--logdir", str(tmp_path / "pipe")], env)
    assert "/ 30,000 points" not in piped.stderr + piped.stdout
    assert "30000 points" in piped.stdout  # the result line, as before

    importing = [*PLATEAU, "import", "tensorboard", str(tmp_path / "tty"), "--project", "progress"]
    text = _on_a_terminal([*importing, "--experiment", "tty"], env)
    assert "plateau import: 30,000 points sent" in text, text
    piped = _piped([*importing, "--experiment", "pipe"], env)
    assert "points sent" not in piped.stderr
    assert "30000 points" in piped.stdout


def test_sync_and_replay_show_progress_on_a_terminal(tracker: TrackerProcess, tmp_path: Path) -> None:
    env = {**os.environ, "PLATEAU_URL": tracker.url, "PLATEAU_HOME": str(tmp_path / "home")}
    away = f"http://127.0.0.1:{free_port()}"  # nothing listens: the run spools
    spooling = (
        "import plateau_tracker as plateau\n"
        f"run = plateau.init(project='progress', experiment='synced', url={away!r}, wait=0.2)\n"
        "for step in range(50):\n"
        "    run.log({'loss': 1.0 / (step + 1)}, step=step)\n"
        "raise SystemExit(run.finish(timeout=5))\n"
    )
    assert subprocess.run([sys.executable, "-c", spooling], env=env, timeout=120).returncode == 0
    text = _on_a_terminal([*PLATEAU, "sync"], env)
    assert "plateau sync: 1 / 1 batches" in text, text

    replay = [*PLATEAU, "replay", "patience-3", "--experiment", "synced", "--project", "progress"]
    replay += ["--metric", "loss", "--include-incomplete"]
    text = _on_a_terminal(replay, env)
    assert "plateau replay: reading: 1 / 1 runs" in text, text
    assert "plateau replay: 1 / 1 runs" in text, text
    piped = _piped(replay, env)
    assert "/ 1 runs" not in piped.stderr
    assert "1 runs replayed" in piped.stdout
