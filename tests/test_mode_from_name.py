"""``mode="auto"``, the default: the direction a monitored metric improves in, read from its name, so a loop
that watches ``val/acc`` and leaves ``mode`` out is judged as an accuracy, not as a loss."""

from __future__ import annotations

import warnings

import httpx
import pytest

import plateau_tracker as plateau
from plateau_tracker._mode import infer_mode, names_a_share, resolve_mode
from plateau_tracker.server.policy import PolicySpec
from tests._server import TrackerProcess

NAMES = [
    # (monitor, the direction its name says)
    ("val/acc", "max"),
    ("val_accuracy", "max"),
    ("valAcc", "max"),
    ("eval_f1", "max"),
    ("val/top1", "max"),
    ("val/mAP", "max"),
    ("ndcg@10", "max"),
    ("auc", "max"),
    ("rougeL", "max"),
    ("episode/reward", "max"),
    ("val/loss", "min"),
    ("val_loss", "min"),
    ("valLoss", "min"),
    ("eval_loss", "min"),
    ("eval_perplexity", "min"),
    ("val_error", "min"),
    ("binary_logloss", "min"),
    ("test/wer", "min"),
    ("val/rmse", "min"),
    ("val/ce", "min"),  # cross-entropy, as research loops name it
    ("val_bce", "min"),
    # a loss or error word wins over a score word: the loss of a score is minimised
    ("dice_loss", "min"),
    ("val/top1_error", "min"),
    # neither: the name does not say
    ("val", None),
    ("score", None),
    ("accumulated", None),
]


@pytest.mark.parametrize(("monitor", "direction"), NAMES)
def test_the_direction_is_read_from_the_names_words(monitor: str, direction: str | None) -> None:
    assert infer_mode(monitor) == direction


@pytest.mark.parametrize(
    ("monitor", "share"),
    [
        *(("val/acc", True), ("eval_top1", True), ("val/mAP", True), ("valAccuracy", True), ("f1", True)),
        *(("top1_error", False), ("val/acc_loss", False), ("episode/reward", False), ("val/psnr", False)),
        *(("rougeL", False), ("val", False), ("val_loss", False)),
    ],
)
def test_a_share_is_told_by_its_name_for_reading_percent(monitor: str, share: bool) -> None:
    """Only a share's name lets ``perfect`` read 100 as a perfect score: a return passes through 100."""
    assert names_a_share(monitor) is share


def test_a_mode_given_is_kept_and_a_name_that_says_nothing_is_a_loss_with_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a mode that agrees with the name, or the name's own: no warning
        assert resolve_mode("val/acc", "max") == "max"
        assert resolve_mode("val/loss", "min") == "min"
        assert resolve_mode("score", "min") == "min"  # the name says nothing: the mode given is the word
        assert resolve_mode("val/acc", "auto") == "max"
    with pytest.warns(UserWarning, match=r"cannot tell from the name 'val'.*mode='max'"):
        assert resolve_mode("val", "auto") == "min"


@pytest.mark.parametrize(
    ("monitor", "mode", "says"), [("val/acc", "min", "upwards"), ("val/loss", "max", "downwards")]
)
def test_a_mode_given_against_the_name_is_kept_and_said(monitor: str, mode: str, says: str) -> None:
    """The quickstart watches ``val/loss`` in mode ``min``; a loop that swaps in ``val/acc`` and keeps the
    mode would keep its worst epoch and stop while it improves. Judged as asked (added 2026-11-26: silent
    before), with a warning that names the direction the name says."""
    with pytest.warns(
        UserWarning, match=rf"mode='{mode}' for '{monitor}', whose name says it improves {says}"
    ):
        assert resolve_mode(monitor, mode) == mode


def test_the_tracker_reads_a_policy_without_a_mode_as_its_monitor_names_it() -> None:
    assert PolicySpec.model_validate({"monitor": "val_accuracy"}).mode == "max"
    assert PolicySpec.model_validate({"monitor": "val_accuracy", "mode": "auto"}).mode == "max"
    assert PolicySpec.model_validate({"monitor": "val_loss"}).mode == "min"
    assert PolicySpec.model_validate({"monitor": "val"}).mode == "min"  # as before "auto" existed
    assert PolicySpec.model_validate({"monitor": "val_accuracy", "mode": "min"}).mode == "min"
    with pytest.raises(ValueError, match="mode"):
        PolicySpec.model_validate({"monitor": "val_accuracy", "mode": "up"})


def test_a_loop_that_watches_an_accuracy_without_a_mode_keeps_its_best_epoch(tracker: TrackerProcess) -> None:
    """The README's loop with ``monitor="val/acc"`` and no ``mode``: the checkpoint lands on the highest
    accuracy and the stop three evaluations after it. Judged as a loss (the default before ``auto``), the
    first epoch was the best and the run stopped at the fourth."""
    accuracy = [0.30, 0.45, 0.60, 0.70, 0.76, 0.80, 0.83, 0.82, 0.81, 0.80, 0.79, 0.78]
    rules = [{"rule": "patience", "patience": 3}, {"rule": "checkpoint"}]
    checkpoints = []
    with plateau.init(project="auto-mode", monitor="val/acc", rules=rules, url=tracker.url) as run:
        for epoch, value in enumerate(accuracy):
            run.log({"val/acc": value}, step=epoch)
            if run.should_checkpoint():
                checkpoints.append(epoch)
            if run.should_stop():
                break
    assert checkpoints == [0, 1, 2, 3, 4, 5, 6]
    assert epoch == 9
    assert run.latest is not None
    assert run.latest.best_step == 6
    stored = httpx.get(f"{tracker.url}/api/v1/runs/{run.id}").json()
    assert stored["policy"]["mode"] == "max"
