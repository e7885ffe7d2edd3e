"""Every command that lists or reports takes ``--json`` and prints one strict JSON document on stdout; the
listing commands ``plateau runs`` and ``plateau decisions`` read a real tracker over HTTP."""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from plateau_tracker.server.cli import build_parser, main
from tests._server import TrackerProcess
from tests.conftest import create_run

POLICY = {"monitor": "v", "mode": "min", "rules": [{"rule": "patience", "patience": 2}]}
# Best at step 1, then three worse values: patience-2 stops at step 3.
VALUES = [2.0, 1.0, 1.5, 1.6, 1.7]

# Commands that neither list nor report: a server, a browser app, a script for the shell.
_NOT_REPORTING = {("serve",), ("dashboard",), ("completion",)}


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _leaves(sub, (*path, name))
            return found
    return [(path, parser)]


def test_every_command_that_lists_or_reports_takes_json() -> None:
    leaves = _leaves(build_parser())
    assert len(leaves) > 12
    missing = [
        " ".join(path)
        for path, parser in leaves
        if path not in _NOT_REPORTING and "--json" not in parser._option_string_actions
    ]
    assert missing == []


@dataclass
class _Done:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def plateau(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., _Done]:
    """``plateau ARGS`` in this process (``main``, as the console script runs it), with ``env`` set."""

    def run(*args: str, env: dict[str, str]) -> _Done:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return _Done(code, out, err)

    return run


def _json(plateau: Callable[..., _Done], *args: str, env: dict[str, str], code: int = 0) -> Any:
    done = plateau(*args, "--json", env=env)
    assert done.returncode == code, done.stderr
    return json.loads(done.stdout)  # strict: the whole of stdout is one document


def _stopped_run(client: httpx.Client, project: str, name: str, tags: list[str]) -> int:
    run_id = int(create_run(client, POLICY, project=project, experiment="e", name=name, tags=tags)["id"])
    points = [{"key": "v", "step": step, "value": value} for step, value in enumerate(VALUES)]
    answer = client.post(f"/api/v1/runs/{run_id}/metrics", json={"batch_id": "b", "points": points})
    assert answer.status_code == 200, answer.text
    return run_id


def test_runs_and_decisions_list_what_the_tracker_holds(
    tracker: TrackerProcess, plateau: Callable[..., _Done]
) -> None:
    project = f"listing-{uuid.uuid4().hex[:8]}"
    env = {"PLATEAU_URL": tracker.url}
    with httpx.Client(base_url=tracker.url, timeout=30) as client:
        tagged = _stopped_run(client, project, "tagged", ["lr-sweep", "gpu"])
        plain = _stopped_run(client, project, "plain", ["gpu"])

    listed = _json(plateau, "runs", "--project", project, env=env)
    assert listed["count"] == 2
    assert [run["id"] for run in listed["runs"]] == [plain, tagged]  # newest first
    assert all(run["stop_step"] == 3 for run in listed["runs"])
    only = _json(plateau, "runs", "--project", project, "--tag", "lr-sweep", env=env)
    assert [run["id"] for run in only["runs"]] == [tagged]

    table = plateau("runs", "--project", project, "--limit", "1", env=env)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["id", "status", "project/experiment", "name", "judged", "step", "decision"]
    assert lines[1].split()[:4] == [str(plain), "running", f"{project}/e", "plain"]
    assert "stop at 3 (patience)" in lines[1]
    assert "1 newest of 2 runs" in table.stdout

    decisions = _json(plateau, "decisions", str(tagged), env=env)["decisions"]
    stop = decisions[-1]
    assert (stop["action"], stop["step"], stop["best_step"], stop["rule"]) == ("stop", 3, 1, "patience")
    assert stop["evidence"]  # the numbers behind the reason
    shown = plateau("decisions", str(tagged), env=env)
    assert shown.returncode == 0, shown.stderr
    assert stop["reason"] in shown.stdout  # whole, never cut

    unknown = plateau("decisions", "999999999", env=env)
    assert unknown.returncode == 1
    assert "run 999999999 does not exist" in unknown.stderr

    deleted = _json(plateau, "delete", "run", str(plain), "--yes", env=env)
    assert deleted["not_found"] == 0
    [gone] = deleted["deletions"]
    assert (gone["deleted"], gone["runs"], gone["points"]) == (f"run {plain}", 1, len(VALUES))
    assert _json(plateau, "runs", "--project", project, env=env)["count"] == 1


def test_store_commands_report_as_json(tmp_path: Path, plateau: Callable[..., _Done]) -> None:
    env = {"PLATEAU_HOME": str(tmp_path / "home")}
    current = _json(plateau, "db", "upgrade", env=env)
    assert current["current"] is True
    assert current["revision"] == current["head"]

    made = _json(plateau, "token", "create", "--project", "p", "--scope", "read", "--name", "ci", env=env)
    assert made["scope"] == "read"
    operator = _json(plateau, "token", "create", "--scope", "operator", env=env)
    tokens = _json(plateau, "token", "list", env=env)["tokens"]
    assert [(t["id"], t["project"], t["scope"]) for t in tokens] == [
        (made["id"], "p", "read"),
        (operator["id"], None, "operator"),
    ]
    assert made["token"].startswith(tokens[0]["prefix"])  # the list names the token by its start
    assert all(made["token"] not in json.dumps(t) for t in tokens)  # never the whole secret
    assert _json(plateau, "token", "revoke", str(made["id"]), env=env) == {"id": made["id"], "revoked": True}


def test_sync_reports_as_json(tmp_path: Path, tracker: TrackerProcess, plateau: Callable[..., _Done]) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    report = _json(plateau, "sync", "--spool", str(spool), env={"PLATEAU_URL": tracker.url})
    assert report == {
        "runs": 0,
        "batches": 0,
        "points": 0,
        "rejected": 0,
        "left": 0,
        "finished": 0,
        "dropped": 0,
        "errors": [],
    }


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_tensorboard_export_and_import_report_as_json(
    tmp_path: Path, tracker: TrackerProcess, plateau: Callable[..., _Done]
) -> None:
    pytest.importorskip("tensorboard")
    project = f"tb-json-{uuid.uuid4().hex[:8]}"
    env = {"PLATEAU_URL": tracker.url}
    with httpx.Client(base_url=tracker.url, timeout=30) as client:
        run_id = _stopped_run(client, project, "exported", [])
    export = ["export", "tensorboard", "--run", str(run_id), "--logdir", str(tmp_path)]
    exported = _json(plateau, *export, env=env)
    assert exported["points"] == len(VALUES)
    assert exported["runs"][0]["run_id"] == run_id
    assert Path(exported["runs"][0]["directory"]).is_dir()

    imported = _json(
        plateau, "import", "tensorboard", str(tmp_path), "--experiment", "back", "--project", project, env=env
    )
    assert imported["points"] >= len(VALUES)
    assert imported["runs"][0]["run_id"] != run_id
