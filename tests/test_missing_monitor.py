"""A monitor that never arrives (``val/acc`` while the loop logs ``val/accuracy``) is told: an ``alert``
decision naming the monitor and the keys the run did log, closest first; a webhook; a warning in the
training process; a warning on the dashboard's run page. A monitor that is merely sparse is not."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import plateau_tracker as plateau
from plateau_tracker.server.policy._missing_monitor import closest_first, is_like_monitor
from tests._server import TrackerProcess, free_port
from tests.test_webhooks import FAST_RETRIES, Receiver, register_hook, wait_until

RULES = [{"rule": "patience", "patience": 3}, {"rule": "checkpoint"}]


@pytest.fixture
def fast_tracker(tmp_path: Path) -> Iterator[TrackerProcess]:
    server = TrackerProcess(tmp_path / "tracker", env=FAST_RETRIES)
    yield server
    server.stop()


def alerts(url: str, run_id: int) -> list[dict]:
    decisions = httpx.get(f"{url}/api/v1/runs/{run_id}/decisions").json()["data"]
    return [d for d in decisions if d["action"] == "alert"]


@pytest.mark.parametrize(
    ("monitor", "key", "like"),
    [
        ("val/acc", "val/accuracy", True),  # same namespace
        ("val_acc", "val_accuracy", True),  # a close name
        ("val/loss", "validation_loss", True),
        ("val/loss", "train/loss", False),  # the training namespace never stands for the monitor
        ("val/loss", "train_loss", False),
        ("val/loss", "lr", False),
        ("val/loss", "val/loss", False),
    ],
)
def test_which_keys_stand_for_the_monitor(monitor: str, key: str, like: bool) -> None:
    assert is_like_monitor(monitor, key) is like


def test_closest_names_come_first() -> None:
    assert closest_first("val/acc", ["train/loss", "lr", "val/accuracy", "val/loss"])[:2] == [
        "val/accuracy",
        "val/loss",
    ]


def test_a_missing_monitor_is_told_everywhere(
    fast_tracker: TrackerProcess, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.WARNING, logger="plateau")
    receiver = Receiver(free_port())
    try:
        run = plateau.init(project="typo", monitor="val/acc", mode="max", rules=RULES, url=fast_tracker.url)
        with httpx.Client(base_url=fast_tracker.url, timeout=30) as client:
            register_hook(
                client, "typo", f"http://127.0.0.1:{receiver.server.server_address[1]}/", ["missing_monitor"]
            )
        for step in range(8):
            run.log({"train/loss": 1.0 / (step + 1)}, step=step)
            run.log({"val/accuracy": 0.5 + 0.01 * step, "val/loss": 1.0 - 0.01 * step}, step=step)
            assert not run.should_stop()
            assert run.flush(10)  # an epoch longer than the flush interval: each step reaches the tracker
        warnings = [r.getMessage() for r in caplog.records if "'val/acc'" in r.getMessage()]
        assert len(warnings) == 1  # told once, while training
        assert "has not arrived" in warnings[0]
        run.finish()
        assert run.id is not None
        found = alerts(fast_tracker.url, run.id)
        assert len(found) == 1  # once, not at every batch
        alert = found[0]
        assert alert["rule"] == "missing_monitor"
        assert alert["step"] == 2  # at the third step of val/accuracy
        assert alert["evidence"]["logged_keys"] == ["val/accuracy", "val/loss", "train/loss"]
        assert "monitor 'val/acc' has not arrived" in alert["reason"]
        assert "val/accuracy, val/loss, train/loss" in alert["reason"]
        assert len([r for r in caplog.records if "'val/acc'" in r.getMessage()]) == 1  # not again at finish
        assert wait_until(lambda: len(receiver.received) == 1)
        delivered = receiver.received[0]
        assert (delivered["event"], receiver.bad_signatures) == ("missing_monitor", 0)
        assert "val/acc" in str(delivered["body"])
    finally:
        receiver.close()

    pytest.importorskip("streamlit")
    from tests.test_dashboard import page

    app = page("run", fast_tracker, monkeypatch)
    app.query_params["run"] = str(run.id)
    app.run()
    assert not app.exception
    assert any("monitor 'val/acc' has not arrived" in w.value for w in app.warning)


def test_a_sparse_monitor_is_not_missing(tracker: TrackerProcess, caplog: pytest.LogCaptureFixture) -> None:
    # Training keys every step, the monitor every 10 steps: no alert before it comes, none after.
    caplog.set_level(logging.WARNING, logger="plateau")
    with plateau.init(project="sparse", monitor="val/loss", rules=RULES, url=tracker.url) as run:
        for step in range(25):
            run.log({"train/loss": 1.0 / (step + 1), "lr": 0.1}, step=step)
            if step % 10 == 9:
                run.log({"val/loss": 1.0 / (step + 1)}, step=step)
                assert run.should_checkpoint()
    assert run.id is not None
    assert alerts(tracker.url, run.id) == []
    assert "val/loss" not in caplog.text


def test_the_training_process_is_told_at_finish_when_nothing_like_the_monitor_came(
    tracker: TrackerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="plateau")
    with plateau.init(project="typo", monitor="accuracy", rules=RULES, url=tracker.url) as run:
        for step in range(5):
            run.log({"acc": 0.5, "loss": 1.0}, step=step)
    assert "monitor 'accuracy' was never logged, so nothing was judged (this process logged: acc, loss)" in (
        caplog.text
    )
