"""The Lightning callback: a real Trainer on CPU, stopped by the tracker's patience rule at the expected
epoch, with the best checkpoint saved through Lightning and the decision recorded on the run."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests._server import TrackerProcess

pytest.importorskip("lightning")
import lightning.pytorch as pl
import torch

from plateau_tracker.integrations.lightning import PlateauCallback
from tests._lightning_module import Scripted, cpu_trainer, loaders

# Best at epoch 2; epochs 3, 4, 5 do not improve on it: patience 3 stops at epoch 5 (of a 30-epoch budget).
SCRIPT = [1.0, 0.8, 0.6, 0.65, 0.6, 0.7, *[0.1] * 24]
REPO = Path(__file__).resolve().parents[1]
RULES = [{"rule": "patience", "patience": 3}, {"rule": "checkpoint"}]

pytestmark = [
    pytest.mark.slow,
    # Lightning's advice about dataloader workers and CPU-only machines is not this test's business.
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    # Lightning 2.6 calls torch pytree APIs that torch 2.13 deprecates: theirs to update, not ours.
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]


def history(url: str, run_id: int, key: str, rank: int = 0) -> list[tuple[int, float]]:
    page = httpx.get(f"{url}/api/v1/runs/{run_id}/history", params={"key": key, "rank": rank}).json()
    return [(p["step"], p["value"]) for p in page["points"]]


def scripted_callback(tracker: TrackerProcess, experiment: str, **options: Any) -> PlateauCallback:
    """The callback judging ``val_loss`` (minimised) by ``RULES`` on the test tracker."""
    return PlateauCallback(
        project="lightning",
        experiment=experiment,
        monitor="val_loss",
        mode="min",
        rules=RULES,
        url=tracker.url,
        **options,
    )


def test_trainer_stops_at_the_patience_epoch_with_the_best_checkpoint(
    tracker: TrackerProcess, tmp_path: Path
) -> None:
    callback = scripted_callback(tracker, "cpu", profile=True)
    trainer = cpu_trainer(callback, tmp_path, len(SCRIPT), devices=1)
    train, val = loaders()
    trainer.fit(Scripted(SCRIPT), train, val)

    assert callback.stopped_epoch == 5
    assert trainer.current_epoch == 6  # epoch 5 completed, no epoch 6 trained
    assert callback.stop_decision is not None
    assert callback.stop_decision.rule == "patience"
    assert callback.best_step == 2
    best = Path(callback.best_model_path or "")
    assert callback.run is not None
    assert best == tmp_path / "checkpoints" / f"plateau-best-{callback.run.run_key[:16]}.ckpt"
    saved = torch.load(best, weights_only=False)
    assert saved["epoch"] == 2
    assert not list(best.parent.glob(".*partial"))

    run_id = callback.run.id if callback.run else None
    assert run_id is not None
    run = httpx.get(f"{tracker.url}/api/v1/runs/{run_id}").json()
    assert (run["status"], run["stop_step"], run["stop_rule"]) == ("stopped", 5, "patience")
    assert run["planned_steps"] == len(SCRIPT) - 1  # declared from max_epochs: the last epoch's step
    assert run["decision"]["best_step"] == 2
    assert [step for step, _ in history(tracker.url, run_id, "val_loss")] == [0, 1, 2, 3, 4, 5]
    assert [value for _, value in history(tracker.url, run_id, "val_loss")] == pytest.approx(SCRIPT[:6])
    assert [step for step, _ in history(tracker.url, run_id, "train_loss")] == [0, 1, 2, 3, 4, 5]
    summary = run["summary"]
    assert (summary["stopped_epoch"], summary["stopped_by"]) == (5, "patience")
    assert summary["best_checkpoint"] == str(best)
    assert summary["params"] == 8 + 1  # profiled from example_input_array
    assert summary["steps_timed"] == 6 * 4  # 4 training batches per epoch
    assert run["config"]["script"] == SCRIPT  # the module's hparams


def test_ddp_ranks_stop_at_the_same_epoch(tracker: TrackerProcess, tmp_path: Path) -> None:
    # Rank 1's values are higher but move alike: the policy judges rank 0 (reduce "rank0"); both ranks
    # must leave at the same epoch and both take part in each checkpoint save.
    command = [sys.executable, "-m", "tests._lightning_module", tracker.url, f"ddp-{tmp_path.name}"]
    command += [str(tmp_path), json.dumps(SCRIPT), json.dumps(RULES)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = httpx.get(f"{tracker.url}/api/v1/runs", params={"experiment": "ddp"}).json()["data"]
    assert len(runs) == 1
    run = runs[0]
    assert (run["world_size"], run["status"], run["stop_step"]) == (2, "stopped", 5)
    for rank in (0, 1):
        assert [step for step, _ in history(tracker.url, run["id"], "val_loss", rank)] == [0, 1, 2, 3, 4, 5]
    [best] = (tmp_path / "checkpoints").glob("plateau-best-*.ckpt")  # one file, both ranks' fit
    assert torch.load(best, weights_only=False)["epoch"] == 2


@pytest.mark.parametrize(
    ("options", "step_unit", "planned"),
    [
        ({"max_epochs": 12}, "epoch", 11),
        ({"max_epochs": -1}, "epoch", None),  # no limit
        ({}, "epoch", None),  # Lightning's own 1,000 epochs: not a plan the user made
        ({"max_epochs": 1}, "epoch", None),
        ({"max_steps": 500}, "global_step", 500),
        ({"max_epochs": 12}, "global_step", None),  # no step limit
    ],
)
def test_the_plan_is_declared_from_the_trainers_limits(options, step_unit, planned, tmp_path: Path) -> None:
    import lightning.pytorch as pl

    trainer = pl.Trainer(logger=False, enable_checkpointing=False, default_root_dir=tmp_path, **options)
    if not options:  # what Trainer.fit fills in before the callbacks' setup
        trainer.fit_loop.max_epochs = 1000
    callback = PlateauCallback(step_unit=step_unit)
    assert callback._planned_steps(trainer) == planned


class _EpochMeans(pl.Callback):
    """Lightning's own training mean of each epoch, as it stands at that epoch's end."""

    def __init__(self) -> None:
        self.means: list[float] = []

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.means.append(float(trainer.callback_metrics["train_loss"]))


class _SlowAfterValidation(pl.Callback):
    """Time spent between a validation's end and its epoch's end (a checkpoint save there on a loaded
    host), longer than the SDK's 0.1 s hold of a monitored step."""

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        time.sleep(0.3)


def test_a_training_mean_is_stored_at_its_own_epoch_and_judged_with_it(
    tracker: TrackerProcess, tmp_path: Path
) -> None:
    """``train_loss`` logged ``on_epoch`` is reduced at the epoch's end, after the validation. Until
    2026-11-26 the callback logged, at each validation's end, the previous epoch's mean still held in
    ``callback_metrics``, at the current epoch (every stored value one epoch late), and the default's
    rules, which read the training loss, got it after the step was judged (a ``companion_late`` alert).
    Until 2026-11-27 an epoch-end validation's values went out alone, so when more than the SDK's 0.1 s hold
    passed before the epoch's end (a first epoch's checkpoint save, in a CI run on a loaded host) the step
    was judged without its training mean; now they go out with it, in one call."""
    callback = PlateauCallback(project="lightning", experiment="means", monitor="val_loss", url=tracker.url)
    means = _EpochMeans()
    trainer = cpu_trainer(callback, tmp_path, 8, devices=1)
    trainer.callbacks += [_SlowAfterValidation(), means]
    train, val = loaders()
    trainer.fit(Scripted([1.0 / (e + 1) for e in range(8)]), train, val)
    assert callback.run is not None
    stored = history(tracker.url, callback.run.id, "train_loss")
    assert [step for step, _ in stored] == list(range(8))
    assert [value for _, value in stored] == pytest.approx(means.means)
    decisions = httpx.get(f"{tracker.url}/api/v1/runs/{callback.run.id}/decisions").json()["data"]
    assert "companion_late" not in {d["rule"] for d in decisions}


def test_an_epoch_without_a_validation_logs_no_validation_values(
    tracker: TrackerProcess, tmp_path: Path
) -> None:
    """With ``check_val_every_n_epoch=2`` the epochs between validations used to log the last validation's
    values again (``callback_metrics`` keeps them), and the rules judged each twice: patience counted a
    repeat as an evaluation without improvement."""
    callback = PlateauCallback(
        project="lightning",
        experiment="every-2",
        monitor="val_loss",
        mode="min",
        rules=RULES,
        url=tracker.url,
    )
    trainer = cpu_trainer(callback, tmp_path, 8, devices=1, check_val_every_n_epoch=2)
    train, val = loaders()
    trainer.fit(Scripted([1.0 - 0.1 * e for e in range(8)]), train, val)
    assert callback.run is not None
    assert [step for step, _ in history(tracker.url, callback.run.id, "val_loss")] == [1, 3, 5, 7]
    assert [step for step, _ in history(tracker.url, callback.run.id, "train_loss")] == list(range(8))
    assert callback.stop_decision is None  # a new best at every validation


class _Halving(Scripted):
    """The scripted module with its rate halved every 2 epochs (an epoch-interval ``StepLR``)."""

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 2, 0.5)}


def test_the_optimizers_rate_is_logged_at_each_epoch(tracker: TrackerProcess, tmp_path: Path) -> None:
    """Lightning's ``LearningRateMonitor`` writes to loggers, not to ``callback_metrics``: the callback logs
    the optimizer's rate itself (as ``lr``, the rate of the epoch it ends), as the Keras integration does,
    so the default's rate guards see the schedule. Until 2026-11-26 no rate reached the tracker."""
    callback = PlateauCallback(project="lightning", experiment="rate", monitor="val_loss", url=tracker.url)
    trainer = cpu_trainer(callback, tmp_path, 6, devices=1)
    train, val = loaders()
    trainer.fit(_Halving([1.0 / (e + 1) for e in range(6)]), train, val)
    assert callback.run is not None
    assert history(tracker.url, callback.run.id, "lr") == [
        (e, pytest.approx(0.05 * 0.5 ** (e // 2))) for e in range(6)
    ]


def test_a_resumed_fit_continues_its_run_and_two_fits_keep_two_files(
    tracker: TrackerProcess, tmp_path: Path
) -> None:
    """Before, ``ckpt_path=`` started a new run holding the rest of the curve, and every fit in a folder
    wrote the same ``plateau-best.ckpt``."""

    def callback() -> PlateauCallback:
        return scripted_callback(tracker, "resume")

    train, val = loaders()
    first = callback()
    cut = cpu_trainer(first, tmp_path, 3, devices=1)  # epochs 0-2: the best is epoch 2
    cut.fit(Scripted(SCRIPT), train, val)
    assert first.run is not None
    run_id, key = first.run.id, first.run.run_key
    resumed = callback()
    trainer = cpu_trainer(resumed, tmp_path, len(SCRIPT), devices=1)
    trainer.fit(Scripted(SCRIPT), train, val, ckpt_path=str(first.best_model_path))
    assert resumed.run is not None
    assert (resumed.run.id, resumed.run.run_key) == (run_id, key)  # the same run, continued
    run = httpx.get(f"{tracker.url}/api/v1/runs/{run_id}").json()
    assert (run["status"], run["stop_step"]) == ("stopped", 5)
    assert [step for step, _ in history(tracker.url, run_id, "val_loss")] == [0, 1, 2, 3, 4, 5]
    another = callback()
    cpu_trainer(another, tmp_path, 3, devices=1).fit(Scripted(SCRIPT), train, val)
    files = sorted(p.name for p in (tmp_path / "checkpoints").glob("plateau-best-*.ckpt"))
    assert len(files) == 2  # this fit's and the first (resumed) run's


def test_a_fit_without_a_monitor_says_so_and_names_the_keys(tracker: TrackerProcess, tmp_path: Path) -> None:
    callback = PlateauCallback(project="lightning", experiment="no-monitor", url=tracker.url)
    train, val = loaders()
    with pytest.warns(UserWarning, match="plateau") as said:
        cpu_trainer(callback, tmp_path, 2, devices=1).fit(Scripted(SCRIPT), train, val)
    messages = [str(w.message) for w in said if "plateau" in str(w.message)]
    assert any("has no monitor" in m for m in messages)
    [keys] = [m for m in messages if "pass one as" in m]  # said once
    assert "this module logs lr, train_loss, val_loss" in keys
