"""The loop acts on the step it just logged: a checkpoint verdict about an earlier step never makes
``should_checkpoint()`` true, and a tracker that comes back while the loop logs is noticed within about a
second, not after a backoff of tens of seconds."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import plateau_tracker as plateau
from plateau_tracker._decision import Decision
from tests._server import TrackerProcess, free_port


def _checkpoint(seq: int, step: int) -> Decision:
    return Decision(seq=seq, action="checkpoint", step=step, best_step=step, rule="checkpoint")


def test_a_late_checkpoint_verdict_about_an_earlier_step_is_not_acted_on(tmp_path: Path) -> None:
    """No tracker answers: verdicts can only be late. One about step 3, received while the loop is at step
    5, shows in ``run.latest`` and leaves ``should_checkpoint()`` false; one about the step just logged
    makes it true, once, and the SDK's own judgement does not make it true again."""
    url = f"http://127.0.0.1:{free_port()}"
    run = plateau.init(project="right-step", monitor="m", mode="min", url=url, spool_dir=tmp_path, wait=0.1)
    for step in range(6):
        run.log({"m": 1.0}, step=step)  # no new best after step 0: the SDK's own test says no checkpoint
        if step == 0:
            assert run.should_checkpoint()
    run._verdicts.record(_checkpoint(1, 3))
    assert run.latest.step == 3
    assert not run.should_checkpoint()
    run.log({"m": 1.0}, step=6)
    run._verdicts.record(_checkpoint(2, 6))  # late, but about the step just logged
    assert run.should_checkpoint()
    assert not run.should_checkpoint()
    run.finish(timeout=1)


@pytest.mark.slow
def test_a_tracker_that_comes_back_is_noticed_within_seconds(tmp_path: Path) -> None:
    """The loop logs for 12 s with the tracker away (a backoff left alone would reach its 30 s cap); the
    tracker then starts on that port, and the run reaches it within a few seconds."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    run = plateau.init(project="right-step", monitor="m", mode="min", url=url, spool_dir=tmp_path / "spool")
    step = 0
    away_until = time.monotonic() + 12
    while time.monotonic() < away_until:
        run.log({"m": 1.0 / (step + 1)}, step=step)
        step += 1
        time.sleep(0.05)
    assert run._sender.link.failures >= 5
    tracker = TrackerProcess(tmp_path / "tracker", port=port)
    try:
        back = time.monotonic()
        deadline = back + 30
        while run.id is None and time.monotonic() < deadline:
            run.log({"m": 1.0 / (step + 1)}, step=step)
            step += 1
            time.sleep(0.05)
        noticed = time.monotonic() - back
        assert run.id is not None
        assert noticed < 5.0, f"noticed {noticed:.1f} s after the tracker was back"
        assert run.finish(timeout=30) == 0
    finally:
        tracker.stop()
