"""The README's Quickstart, as written, against a real ``plateau serve`` that is killed with -9, stopped with
SIGSTOP, or restarted at random epochs: in every run ``best.pt`` holds the best epoch under the policy's
improvement test over the epochs the loop saw, and the loop leaves where the policy stops it, decided by the
tracker or, while it was away, by the SDK.

The rule and the draws are fixed before the runs: seeds 0-49 of ``random_curve`` with an event each
(kill, stop or restart, a seed's own choice) at a random epoch of its first 40, and the tracker back 1-3 s
later, while the loop still trains (an epoch takes 50 ms); the verdict is the Quickstart's patience-5 stop
and best step (``expected``). The suite runs the first ``PLATEAU_CHAOS_RUNS`` seeds (3 by default: each run
starts a tracker or two); CI runs all 50, spread over its workers.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest

from tests._server import TrackerProcess
from tests.test_quickstart import expected, random_curve, run_quickstart

RUNS = min(50, int(os.environ.get("PLATEAU_CHAOS_RUNS", "3")))

pytestmark = pytest.mark.slow

EVENTS = ("kill", "stop", "restart")


class _Chaos:
    """Does one run's event to its tracker at its epoch, from the loop's own thread, and brings the tracker
    back (a new process on the same store and port, or SIGCONT) from another thread after a pause."""

    def __init__(self, tracker: TrackerProcess, event: str, epoch: int, pause: float) -> None:
        self.tracker, self.event, self.epoch, self.pause = tracker, event, epoch, pause
        self._back: threading.Thread | None = None

    def __call__(self, epoch: int) -> None:
        time.sleep(0.05)  # an epoch's work: the tracker comes back while the loop still trains
        if epoch != self.epoch:
            return
        process = self.tracker.process
        if self.event == "stop":
            os.kill(process.pid, signal.SIGSTOP)
        elif self.event == "kill":
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
        else:
            process.terminate()
            process.wait(timeout=60)
        self._back = threading.Thread(target=self._bring_back, daemon=True)
        self._back.start()

    def _bring_back(self) -> None:
        time.sleep(self.pause)  # the outage itself: the tracker is away for this long
        if self.event == "stop":
            os.kill(self.tracker.process.pid, signal.SIGCONT)
        else:
            self.tracker = TrackerProcess(self.tracker.home, port=self.tracker.port)

    def close(self) -> None:
        if self._back is not None:
            self._back.join(timeout=120)
        if self.event == "stop":
            os.kill(self.tracker.process.pid, signal.SIGCONT)
        self.tracker.stop()


@pytest.mark.parametrize("seed", range(RUNS))
def test_the_quickstart_keeps_the_best_and_stops_right_whatever_the_tracker_does(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    values = random_curve(rng)
    chaos = _Chaos(
        TrackerProcess(tmp_path / "tracker"), rng.choice(EVENTS), rng.randrange(40), rng.uniform(1.0, 3.0)
    )
    monkeypatch.setenv("PLATEAU_URL", chaos.tracker.url)
    try:
        outcome = run_quickstart(values, tmp_path, on_epoch=chaos)
    finally:
        chaos.close()
    stop_step, best_step = expected(values)
    seen = 99 if stop_step is None else stop_step
    assert outcome["left_at"] == seen, (chaos.event, chaos.epoch)
    assert outcome["saved"] == best_step, (chaos.event, chaos.epoch, outcome["run"].latest)
