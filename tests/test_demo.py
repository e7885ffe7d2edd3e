"""``plateau demo`` end to end: real training, a tracker it starts itself, early stops with restores."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests._server import free_port


@pytest.mark.slow
def test_demo_stops_early_and_restores_the_best(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLATEAU_")}
    env["PLATEAU_HOME"] = str(tmp_path)
    env["PLATEAU_PORT"] = str(free_port())
    result = subprocess.run(
        [sys.executable, "-m", "tracker", "demo", "--epochs", "60"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    rows = [line for line in out.splitlines() if re.search(r"\(#\d+\)", line)]
    assert len(rows) == 4
    stopped = [r for r in rows if "for 5 evaluations (patience 5)" in r]
    assert stopped, out
    for row in stopped:
        epochs_run, budget = map(int, re.search(r"(\d+)/(\d+)", row).groups())
        assert epochs_run < budget
        assert "(restored best)" in row
        best_epoch = int(row.split()[3])
        assert epochs_run - 1 == best_epoch + 5  # stopped exactly patience epochs after the best
    assert (tmp_path / "demo" / "checkpoints").is_dir()
    assert (tmp_path / "plateau.db").exists()
