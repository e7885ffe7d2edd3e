"""The CLI behaves like its peers: bare ``plateau`` prints its help, a wrong ``mode`` is one clear error,
and ``plateau sync`` honours ``$PLATEAU_URL``."""

from __future__ import annotations

import shlex
import subprocess
import warnings
from pathlib import Path

import httpx
import pytest

import plateau_tracker as plateau
from tests._cli import plateau_cli
from tests._server import TrackerProcess, free_port


def _plateau(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return plateau_cli(*args, env=env)


def test_bare_plateau_prints_its_help() -> None:
    out = _plateau()
    assert out.returncode == 0
    assert out.stdout.startswith("usage: plateau")
    assert "serve" in out.stdout
    assert "dashboard" in out.stdout
    assert out.stderr == ""


def test_a_mode_that_is_not_one_is_one_error_and_no_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # before: a UserWarning that it is "judged as asked", then the error
        with pytest.raises(ValueError, match="mode='minimize' is not one of 'min'"):
            plateau.init(project="x", monitor="val/loss", mode="minimize", url="http://127.0.0.1:1", wait=0)  # type: ignore[arg-type]


@pytest.mark.slow
def test_sync_sends_to_plateau_url(plateau_home: Path, tmp_path: Path) -> None:
    """A run spooled while logging to one address (nothing listens there) goes to ``$PLATEAU_URL``."""
    run = plateau.init(
        project="moved", experiment="sync-env", url=f"http://127.0.0.1:{free_port()}", wait=0.2
    )
    for step in range(20):
        run.log({"loss": 1.0 / (step + 1)}, step=step)
    assert run.finish(timeout=2) == 0
    server = TrackerProcess(tmp_path / "server")
    try:
        out = _plateau("sync", env={"PLATEAU_URL": server.url})
        assert out.returncode == 0, out.stderr
        assert "20 points" in out.stdout
        runs = httpx.get(f"{server.url}/api/v1/runs", params={"experiment": "sync-env"}).json()["data"]
        assert len(runs) == 1
    finally:
        server.stop()


def test_init_reads_what_the_call_leaves_out_from_the_environment(
    tracker: TrackerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As W&B and MLflow users set them: project, experiment, run name, tags and mode."""
    monkeypatch.setenv("PLATEAU_URL", tracker.url)
    monkeypatch.setenv("PLATEAU_PROJECT", "from-env")
    monkeypatch.setenv("PLATEAU_EXPERIMENT", "ci-nightly")
    monkeypatch.setenv("PLATEAU_RUN_NAME", "nightly-42")
    monkeypatch.setenv("PLATEAU_TAGS", "ci, nightly")
    monkeypatch.setenv("PLATEAU_MODE", "max")
    run = plateau.init(monitor="score", rules=[{"rule": "checkpoint"}])
    try:
        assert run.created["project"] == "from-env"
        assert run.created["experiment"] == "ci-nightly"
        assert run.created["name"] == "nightly-42"
        assert run.created["tags"] == ["ci", "nightly"]
        assert run.created["policy"]["mode"] == "max"
        explicit = plateau.init(
            project="given", experiment="e", name="n", tags=["t"], monitor="val_loss", mode="min"
        )
        assert (explicit.created["project"], explicit.created["experiment"]) == ("given", "e")
        assert (explicit.created["name"], explicit.created["tags"]) == ("n", ["t"])
        explicit.finish()
    finally:
        run.finish()
    monkeypatch.delenv("PLATEAU_PROJECT")
    with pytest.raises(TypeError, match=r"needs a project: init\(project=...\) or \$PLATEAU_PROJECT"):
        plateau.init(monitor="score")


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["plateau", "de"], {"decisions", "delete", "demo"}),
        (["plateau", "db", "u"], {"upgrade"}),
        (["plateau", "delete", "run", "--"], {"--help", "--url", "--token", "--json", "--yes"}),
        (["plateau", "--version", "serve", "--ho"], {"--home", "--host"}),
        (["plateau", "export", "tensorboard", "--run", "3", "--lo"], {"--logdir"}),
    ],
)
def test_bash_completes_the_commands_and_options_the_parser_has(words: list[str], expected: set[str]) -> None:
    """The script ``plateau completion bash`` prints, sourced in a real bash and asked as bash asks."""
    script = plateau_cli("completion", "bash")
    assert script.returncode == 0, script.stderr
    quoted = " ".join(shlex.quote(w) for w in words)
    ask = f'COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _plateau; printf "%s\\n" "${{COMPREPLY[@]}}"'
    probe = f"{script.stdout}\n{ask}"
    done = subprocess.run(
        ["bash", "--norc", "-c", probe], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert set(done.stdout.split()) == expected
