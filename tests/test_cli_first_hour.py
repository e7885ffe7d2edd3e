"""What a newcomer meets in the first hour with the ``plateau`` command: children that end with their
command however it is stopped, the tracker a command talks to being the one its settings name, and one
line (exit 1) for every error of the network, the tracker or the input, never a traceback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from plateau_tracker.server.cli import build_parser
from plateau_tracker.server.config import Settings
from plateau_tracker.server.db.engine import store_identity
from plateau_tracker.server.discovery import health_of, tracker_for
from tests._cli import plateau_cli
from tests._server import TrackerProcess, free_port


def _plateau(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return plateau_cli(*args, env=env, timeout=timeout)


def _children(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found |= {int(p) for p in (task / "children").read_text().split()}
    return found


def _alive(pid: int) -> bool:
    """Running, and not a zombie waiting for a reaper (what PID 1 of a container may never be)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _command(pid: int) -> str:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return f"{pid} ({state}): " + Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")[:200]
    except OSError:
        return f"{pid} (gone)"


def _wait(condition: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads children from /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGKILL])
def test_dashboard_children_end_with_it(tmp_path: Path, signum: int) -> None:
    """``plateau dashboard`` starts a tracker and Streamlit. Signalled alone (not its process group, as
    ``kill <pid>`` or a closed terminal does), it must leave neither behind. SIGKILL runs no code: the
    children learn of it from the kernel (PR_SET_PDEATHSIG)."""
    pytest.importorskip("streamlit")
    port, dashboard_port = free_port(), free_port()
    with (tmp_path / "dashboard.log").open("wb") as log:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "plateau_tracker", "dashboard", "--tracker-port", str(port)),
                *("--port", str(dashboard_port), "--home", str(tmp_path)),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={k: v for k, v in os.environ.items() if not k.startswith("PLATEAU_")},
            # As from a terminal: a suite started in the background by a non-interactive shell inherits
            # SIGINT ignored, and a process that starts with it ignored keeps ignoring it.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    try:
        assert _wait(lambda: len(_children(process.pid)) == 2, 60), "tracker and streamlit did not start"
        children = _children(process.pid)
        assert health_of(f"http://127.0.0.1:{port}", timeout=5) is not None or _wait(
            lambda: health_of(f"http://127.0.0.1:{port}") is not None, 120
        )
        os.kill(process.pid, signum)
        process.wait(timeout=120)  # a bound, not a wait: on a loaded host the children take longer to stop
        assert _wait(lambda: not any(_alive(pid) for pid in children), 60), (
            f"children left running after {signal.Signals(signum).name}: "
            f"{[_command(pid) for pid in children if _alive(pid)]}"
        )
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_health_names_the_store_the_same_for_every_spelling(tmp_path: Path) -> None:
    real = tmp_path / "a" / "plateau.db"
    (tmp_path / "a").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "a")
    linked = tmp_path / "link" / "plateau.db"
    assert store_identity(f"sqlite:///{real}") == store_identity(f"sqlite:///{linked}")
    assert store_identity(f"sqlite:///{real}") == store_identity(f"sqlite:///{tmp_path}/a/../a/plateau.db")
    assert store_identity(f"sqlite:///{real}") != store_identity(f"sqlite:///{tmp_path / 'b.db'}")
    # A server URL's password is not part of the store (nor shown): two passwords, one database.
    assert store_identity("postgresql://u:one@h/db") == store_identity("postgresql+psycopg://u:two@h/db")
    assert store_identity("postgresql://u@h/db") != store_identity("postgresql://u@h/other")


def test_a_command_never_logs_into_another_trackers_database(tmp_path: Path) -> None:
    """Another tracker, on another database, holds the configured port: the command starts its own on a
    free port (and says so), rather than writing where its settings do not point."""
    other = TrackerProcess(tmp_path / "other")
    try:
        mine = Settings(home=tmp_path / "mine", port=other.port)
        with tracker_for(mine, None) as url:
            assert url != other.url
            health = health_of(url)
            assert health is not None
            assert health["store"] == store_identity(mine.resolved_database_url())
        # The same tracker, named by the same settings, is used as it is.
        same = Settings(home=tmp_path / "other", port=other.port)
        with tracker_for(same, None) as url:
            assert url == other.url
    finally:
        other.stop()


def test_serve_on_a_busy_port_says_so_in_one_line_and_announces_nothing(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = _plateau("serve", "--port", str(port), "--home", str(tmp_path))
    assert result.returncode == 1
    assert "plateau tracker on" not in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"127.0.0.1:{port} is in use" in lines[0]
    assert "--port" in lines[0]


def test_remote_errors_are_one_line_and_exit_1(tracker: TrackerProcess, tmp_path: Path) -> None:
    cases = {
        ("export", "tensorboard", "--run", "999999", "--logdir", str(tmp_path), "--url", tracker.url): (
            "answered HTTP 404",
            "run 999999",
        ),
        ("export", "tensorboard", "--experiment", "nope", "--logdir", str(tmp_path), "--url", tracker.url): (
            "experiment 'nope'",
            "no runs",
        ),
        ("replay", "default", "--experiment", "x", "--url", f"http://127.0.0.1:{free_port()}"): (
            "cannot reach the tracker at http://127.0.0.1:",
            "Connection refused",
        ),
    }
    pytest.importorskip("tensorboard")
    for args, expected in cases.items():
        result = _plateau(*args)
        assert result.returncode == 1, (args, result.stderr)
        assert "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert all(part in result.stderr for part in expected), result.stderr


def test_replay_of_a_missing_policy_file_says_the_file_is_missing(tmp_path: Path) -> None:
    result = _plateau("replay", str(tmp_path / "my-policy.yaml"), "--curves", str(tmp_path / "c.jsonl"))
    assert result.returncode == 1
    assert "no such policy file" in result.stderr
    assert "default-sweep" in result.stderr
    assert "unknown preset" not in result.stderr


def test_every_command_and_option_is_described() -> None:
    """``--help`` of every command lists no option without a description."""

    def walk(parser: object, path: str) -> list[str]:
        bare = []
        for action in parser._actions:  # type: ignore[attr-defined]
            if action.help is None and action.dest not in ("help",) and action.option_strings:
                bare.append(f"{path} {action.option_strings[0]}")
            if action.dest is not None and action.__class__.__name__ == "_SubParsersAction":
                described = {choice.dest for choice in action._choices_actions}
                for name, sub in action.choices.items():
                    if name not in described:
                        bare.append(f"{path} {name}")
                    bare += walk(sub, f"{path} {name}")
            elif not action.option_strings and action.help is None and action.dest != "help":
                bare.append(f"{path} <{action.dest}>")
        return bare

    assert walk(build_parser(), "plateau") == []
    version = _plateau("--version")
    assert version.returncode == 0
    assert version.stdout.startswith("plateau ")


def test_health_answers_its_store(tracker: TrackerProcess) -> None:
    health = httpx.get(f"{tracker.url}/api/v1/health").json()
    assert health["store"] == store_identity(f"sqlite:///{tracker.home / 'plateau.db'}")


def test_dashboard_on_a_busy_port_says_so_in_one_line(tracker: TrackerProcess) -> None:
    pytest.importorskip("streamlit")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = _plateau("dashboard", "--url", tracker.url, "--port", str(port))
    assert result.returncode == 1
    assert "plateau dashboard on" not in result.stdout
    assert result.stderr.strip() == (
        f"plateau dashboard: 127.0.0.1:{port} is in use; is a dashboard already running there? "
        "Choose another with --port"
    )


def test_the_demo_hint_is_a_command_that_works_from_where_the_user_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README installs into .venv without activating it: `plateau` is not on PATH there."""
    from plateau_tracker.server.demo import plateau_command

    program = tmp_path / ".venv" / "bin" / "plateau"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(program), "demo"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert plateau_command("dashboard") == ".venv/bin/plateau dashboard"
    monkeypatch.setenv("PATH", f"{program.parent}:/usr/bin:/bin")  # an activated venv
    assert plateau_command("dashboard") == "plateau dashboard"
    monkeypatch.setattr(sys, "argv", ["-m", "demo"])  # python -m plateau_tracker demo
    assert plateau_command("dashboard").endswith(" -m plateau_tracker dashboard")
