"""``plateau demo`` end to end: real training, a tracker it starts itself, early stops with restores."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from plateau_tracker.server.demo import policy_rules
from tests._server import free_port


def _demo(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLATEAU_")}
    env["PLATEAU_HOME"] = str(home)
    env["PLATEAU_PORT"] = str(free_port())
    return subprocess.run(
        [sys.executable, "-m", "plateau_tracker", "demo", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )


def _rows(out: str) -> list[str]:
    """The table's rows, one per trained model."""
    return [line for line in out.splitlines() if re.search(r"\(#\d+\)", line)]


def _epochs(row: str) -> tuple[int, int, int]:
    """(epochs run, budget, best epoch) of a row."""
    epochs_run, budget = map(int, re.search(r"(\d+)/(\d+)", row).groups())
    return epochs_run, budget, int(row.split()[3])


@pytest.mark.slow
def test_demo_stops_early_under_the_default_policy_and_restores_the_best(tmp_path: Path) -> None:
    """The main job runs Plateau's default policy: each run it stops keeps the epoch the stop names,
    restored from its checkpoint, and says in plain words what stopped it."""
    result = _demo(tmp_path, "--epochs", "60")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "monitor val/loss, policy default" in out
    rows = _rows(out)
    assert len(rows) == 4
    stopped = [r for r in rows if _epochs(r)[0] < _epochs(r)[1]]
    assert stopped, out
    for row in stopped:
        epochs_run, _, best_epoch = _epochs(row)
        assert "(restored best)" in row
        assert best_epoch < epochs_run
        assert f"keeping step {best_epoch}" in row  # the checkpoint restored is the one the stop keeps
        # The default's own headlines (outlook's pace, retreat or chance), not patience's, and not the
        # figures behind them, which stay in the decision's evidence.
        assert "(patience" not in row
        headlines = r"has converged|has left its best behind|is at chance|stopped improving"
        assert re.search(headlines, row), row
        assert "doubling" not in row
    assert (tmp_path / "demo" / "checkpoints").is_dir()
    assert (tmp_path / "plateau.db").exists()


@pytest.mark.slow
def test_demo_under_patience_k_stops_exactly_k_evaluations_after_the_best(tmp_path: Path) -> None:
    result = _demo(tmp_path, "--epochs", "30", "--policy", "patience-5")
    assert result.returncode == 0, result.stderr
    assert "policy patience-5" in result.stdout
    stopped = [r for r in _rows(result.stdout) if "for 5 evaluations (patience 5)" in r]
    assert stopped, result.stdout
    for row in stopped:
        epochs_run, budget, best_epoch = _epochs(row)
        assert epochs_run < budget
        assert "(restored best)" in row
        assert epochs_run - 1 == best_epoch + 5  # stopped exactly patience epochs after the best


@pytest.mark.parametrize("policy", ["patience-0", "patience-x", "median", "patience-", "default-sweep"])
def test_demo_refuses_a_policy_it_cannot_run_before_training(tmp_path: Path, policy: str) -> None:
    with pytest.raises(ValueError, match="default or patience-K"):
        policy_rules(policy)
    result = _demo(tmp_path, "--policy", policy)
    assert result.returncode == 2
    assert "default or patience-K" in result.stderr
    assert not (tmp_path / "plateau.db").exists()  # nothing started, nothing trained


def test_demo_policy_rules() -> None:
    assert policy_rules("default") is None  # the SDK declares no rules: the tracker's default policy
    assert policy_rules("patience-12") == [
        {"rule": "patience", "patience": 12},
        {"rule": "checkpoint"},
        {"rule": "non_finite"},
    ]
