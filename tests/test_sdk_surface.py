"""The SDK's public surface: the names its docstring documents, and an import that works everywhere."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

import plateau_tracker as plateau
from tests._server import TrackerProcess

ROOT = Path(__file__).resolve().parents[1]


def test_all_is_exactly_the_documented_api() -> None:
    documented = re.findall(r"^- ``(\w+)``", plateau.__doc__ or "", flags=re.MULTILINE)
    assert sorted(documented) == sorted(plateau.__all__)
    for name in plateau.__all__:
        value = getattr(plateau, name)
        assert isinstance(value, str) or (value.__doc__ or "").strip(), (
            f"plateau_tracker.{name} has no docstring"
        )


def test_import_sdk_needs_no_unix_only_module() -> None:
    """As on native Windows: Unix-only modules are missing. Importing the SDK and reading peak memory
    must not need them."""
    script = textwrap.dedent("""
        import sys
        for name in ("resource", "fcntl", "termios", "pwd", "grp"):
            sys.modules[name] = None  # import raises ImportError, as where the module does not exist
        import plateau_tracker
        import plateau_tracker.complexity, plateau_tracker.distributed, plateau_tracker.staleness
        print(plateau_tracker.complexity.peak_rss_bytes() >= 0)
    """)
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


def test_init_takes_everything_after_project_by_name(tracker, tmp_path: Path) -> None:
    """Keyword-only after ``project``; the positional form of earlier releases still works, warned; a
    transport given to ``init`` is the one the run sends through."""
    from plateau_tracker._transport import Transport

    class Counting(Transport):
        sent = 0

        def send_series(self, *args, **kwargs):
            Counting.sent += 1
            return super().send_series(*args, **kwargs)

    run = plateau.init("surface", experiment="kw", transport=Counting(tracker.url), spool_dir=tmp_path)
    run.log({"loss": 1.0}, step=0)
    run.finish()
    assert Counting.sent >= 1
    with pytest.warns(DeprecationWarning, match="experiment=, name="):
        old = plateau.init("surface", "positional", "named", url=tracker.url, spool_dir=tmp_path)
    assert old.created["id"] == old.id
    assert old.created["name"] == "named"
    with pytest.warns(DeprecationWarning, match="Run.created"):
        assert old.info is old.created
    old.finish()
    body = httpx.get(f"{tracker.url}/api/v1/runs", params={"experiment": "positional"}).json()["data"]
    assert [r["name"] for r in body] == ["named"]
    with pytest.raises(TypeError, match="1 positional argument"):
        plateau.init("surface", *["x"] * 8)


def test_a_run_records_what_it_was_started_from(
    tracker: TrackerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The git commit and whether tracked files changed, the command line (a secret option's value
    replaced), the host, Python and the installed training packages, in the run's config; the user's own
    config beside it, untouched; ``record_context=False`` leaves it out."""
    import platform
    import socket

    from plateau_tracker._context import CONTEXT_KEY

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=repo, check=True)
    (repo / "train.py").write_text("print('v1')\n")
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "v1"], cwd=repo, check=True)
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True
    ).stdout.strip()
    (repo / "train.py").write_text("print('v2')\n")  # a change not committed
    monkeypatch.chdir(repo)
    monkeypatch.setattr(
        sys, "argv", ["train.py", "--lr", "0.1", "--hf-token", "hf_abc", "--max-tokens", "512"]
    )

    run = plateau.init(project="context", url=tracker.url, config={"lr": 0.1}, spool=False)
    bare = plateau.init(
        project="context", url=tracker.url, config={"lr": 0.2}, spool=False, record_context=False
    )
    run.finish()
    bare.finish()

    stored = httpx.get(f"{tracker.url}/api/v1/runs/{run.id}").json()["config"]
    context = stored.pop(CONTEXT_KEY)
    assert stored == {"lr": 0.1}
    assert context["git"] == {"commit": commit, "branch": "main", "dirty": True}
    assert context["command"] == [
        "train.py",
        "--lr",
        "0.1",
        "--hf-token",
        "<redacted>",
        "--max-tokens",
        "512",
    ]
    assert (context["host"], context["python"]) == (socket.gethostname(), platform.python_version())
    assert context["cwd"] == str(repo)
    assert {"plateau-tracker", "torch", "numpy"} <= set(context["packages"])
    assert httpx.get(f"{tracker.url}/api/v1/runs/{bare.id}").json()["config"] == {"lr": 0.2}


def test_system_metrics_are_logged_from_their_own_thread(tracker: TrackerProcess) -> None:
    """``system_metrics=S``: the process's CPU and memory and the host's, as ``system/`` series at the step
    the loop logged last, while the loop itself logs only its metric; nothing once the run is finished."""
    import threading
    import time

    run = plateau.init(project="system", url=tracker.url, system_metrics=0.05, spool=False)
    threads = {t.name for t in threading.enumerate()}
    assert "plateau-system-metrics" in threads
    run.log({"loss": 1.0}, step=0)
    deadline = time.monotonic() + 60
    keys: list[str] = []
    while time.monotonic() < deadline:
        run.log({"loss": 0.5}, step=len(keys) + 1)
        run.flush(10)
        keys = httpx.get(f"{tracker.url}/api/v1/runs/{run.id}/keys").json()["keys"]
        if {"system/cpu_percent", "system/rss_mb"} <= set(keys):
            break
        time.sleep(0.05)
    run.finish()
    assert {"system/cpu_percent", "system/rss_mb", "system/mem_available_mb", "system/load1"} <= set(keys)
    page = httpx.get(f"{tracker.url}/api/v1/runs/{run.id}/history", params={"key": "system/rss_mb"}).json()[
        "points"
    ]
    assert all(10 < p["value"] < 1_000_000 for p in page)  # megabytes of a live Python process
    assert "plateau-system-metrics" not in {t.name for t in threading.enumerate()}
