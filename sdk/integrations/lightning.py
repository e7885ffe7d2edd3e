"""Plateau for Lightning: ``trainer = Trainer(callbacks=[PlateauCallback(monitor="val_loss")])``.

The callback logs what Lightning logs (``trainer.callback_metrics``, at the epoch or the global step: each
key at the end of the loop that produced it), asks the tracker for its verdict on each judged step (a
validation after the epoch's last batch at the epoch's end, with the epoch's training means), and obeys it
on every rank alike (the strategy reduces the verdict, so all ranks stop at the same epoch and all take part
in a checkpoint):

- ``stop``: sets ``trainer.should_stop``; Lightning ends the fit after the current epoch.
- ``checkpoint`` (a new best): saves through ``trainer.save_checkpoint`` to ``dirpath/filename.ckpt``
  (``plateau-best-<the run's key>.ckpt`` unless ``filename`` is given: one file per fit, the same one
  when a fit resumes), replaced atomically on each new best, so the file always holds the best network.
- **Resume** (``trainer.fit(..., ckpt_path=...)``): the checkpoint names the run, and the fit continues it.
- **No monitor**: a warning at the fit's start, and one naming the keys the module logs.

At the end it records on the run (its summary) where the best checkpoint is, the epoch it stopped at and
the rule that stopped it, and finishes the run. With ``profile=True`` and the module's
``example_input_array`` set, the model's complexity is profiled at fit start; time per training batch is
recorded by default.

Lightning is imported only here (``pip install 'plateau-tracker[lightning]'``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import lightning.pytorch as pl
from lightning.fabric.utilities.apply_func import move_data_to_device
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

import plateau_tracker as plateau
from plateau_tracker._decision import Decision
from plateau_tracker._types import FinalStatus, ModeChoice

logger = logging.getLogger("plateau")

# The epochs Lightning trains when it is given neither max_epochs nor max_steps.
_LIGHTNING_DEFAULT_EPOCHS = 1000


def _number(value: Any) -> float | None:
    try:
        if hasattr(value, "numel") and value.numel() != 1:
            return None
        return float(value)
    except (TypeError, ValueError):
        return None


def _fresh_keys(trainer: pl.Trainer) -> set[str] | None:
    """The keys the loop that has just ended logged (``trainer._results``: validation's at a validation's
    end, the training epoch's at its end), under every name Lightning gives them (``train_loss``,
    ``train_loss_step``, ``train_loss_epoch``); None where this Lightning does not say, and every key then
    counts. ``callback_metrics`` also holds the other loop's last values: at a validation's end the
    previous epoch's training means, at the end of an epoch without a validation the last validation's.
    Logged at the step at hand, those would be wrong: a training loss logged ``on_epoch`` would be stored
    one epoch late (epoch 3 holding epoch 2's mean), and with ``check_val_every_n_epoch=2`` every epoch
    without a validation would repeat the last validation's values, for the rules to judge again."""
    try:
        results = trainer._results
        if results is None:
            return None
        keys: set[str] = set()
        for result in results.values():
            meta = result.meta
            keys.update((meta.name, meta.forked_name(True), meta.forked_name(False)))
        return keys
    except Exception:  # another Lightning's internals: log what callback_metrics holds, as before
        return None


# The names Plateau's default reads a learning rate under: one the module logs itself is left as it is.
_RATE_NAMES = frozenset({"lr", "learning_rate"})


def _learning_rate(trainer: pl.Trainer) -> float | None:
    """The first optimizer's rate now (its first parameter group's), logged as ``lr`` with the step (as the
    Keras integration logs its optimizer's): Lightning's ``LearningRateMonitor`` writes to loggers, not to
    ``callback_metrics``, so without this the default's rate guards would have no rate under Lightning
    unless the module logged one."""
    try:
        optimizers = trainer.optimizers
        return float(optimizers[0].param_groups[0]["lr"]) if optimizers else None
    except Exception:  # an optimizer without param_groups (not torch's): no rate, as before
        return None


def _at_epoch_end(trainer: pl.Trainer) -> bool:
    """Whether the validation that has just ended ran after the training epoch's last batch (Lightning's
    default, ``val_check_interval=1.0``), not inside the epoch; False where this Lightning does not say."""
    try:
        return bool(trainer.fit_loop.epoch_loop.batch_progress.is_last_batch)
    except Exception:
        return False


class PlateauCallback(Callback):
    """Log Lightning's metrics to Plateau and obey its stop and checkpoint decisions.

    Pass a ``run`` made with :func:`plateau.init`, or the arguments to make one at setup (``project``,
    ``experiment``, ``name``, ``monitor``, ``mode``, ``rules``, ``url`` and any other keyword of
    :func:`plateau.init`); the module's ``hparams`` become the run's config unless ``config`` is given.

    ``step_unit``: ``"epoch"`` (the step of a point is the epoch) or ``"global_step"``.
    ``decision_timeout``: seconds to wait for the tracker's verdict on a step; when the tracker is slow or
    away the verdict is "continue" and training goes on.
    """

    def __init__(
        self,
        run: plateau.Run | None = None,
        *,
        project: str = "default",
        experiment: str = "default",
        name: str | None = None,
        monitor: str | None = None,
        mode: ModeChoice = "auto",
        rules: Sequence[Mapping[str, Any]] | None = None,
        config: Mapping[str, Any] | None = None,
        url: str | None = None,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str | None = None,
        step_unit: str = "epoch",
        decision_timeout: float = 10.0,
        profile: bool = False,
        time_steps: bool = True,
        finish: bool = True,
        **init_kwargs: Any,
    ) -> None:
        if step_unit not in ("epoch", "global_step"):
            raise ValueError("step_unit must be 'epoch' or 'global_step'")
        self.run = run
        self._owns_run = run is None
        self._init = {
            "project": project,
            "experiment": experiment,
            "name": name,
            "monitor": monitor,
            "mode": mode,
            "rules": rules,
            "url": url,
            **init_kwargs,
        }
        self._config = config
        self.monitor = monitor if run is None else run.monitor
        self.dirpath = os.fspath(dirpath) if dirpath is not None else None
        self.filename = filename  # None: plateau-best-<the run's key>, one file per fit
        self._resumed_key: str | None = None  # a resumed fit's run, from its checkpoint
        self._said_no_monitor = False
        self.step_unit = step_unit
        self.decision_timeout = decision_timeout
        self.profile = profile
        self.time_steps = time_steps
        self.finish_run = finish
        self.best_model_path: str | None = None
        self.best_step: int | None = None
        self.stopped_epoch: int | None = None
        self.stop_decision: Decision | None = None
        self._logged: dict[int, set[str]] = {}
        self._judged: set[int] = set()
        self._batch_started: float | None = None
        self._last_rate: float | None = None
        self._pending: dict[int, dict[str, float]] = {}  # an epoch-end validation's metrics, by step

    # --- set-up and tear-down -----------------------------------------------------------------------

    def _start_run(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Create the run, or join the one a resumed fit's checkpoint names: at fit start, once Lightning
        has restored the callbacks' state (``ckpt_path=``), so a resumed fit continues its run."""
        if self.run is not None:
            return
        config = self._config if self._config is not None else dict(getattr(pl_module, "hparams", {}) or {})
        init = dict(self._init)
        if init.get("planned_steps") is None:
            init["planned_steps"] = self._planned_steps(trainer)
        if self._resumed_key is not None and init.get("run_key") is None:
            init["run_key"] = self._resumed_key
        self.run = plateau.init(
            config=config, rank=trainer.global_rank, world_size=trainer.world_size, **init
        )
        self.monitor = self.run.monitor
        if self.monitor is None and trainer.is_global_zero:
            rank_zero_warn(
                "plateau: PlateauCallback has no monitor, so Plateau judges nothing: it never stops nor "
                "checkpoints this fit; pass monitor= (the keys this module logs are named at the first "
                "epoch's end)"
            )

    def _planned_steps(self, trainer: pl.Trainer) -> int | None:
        """The last step the trainer plans to log at, in the callback's step unit, for the rules that judge
        a run against its plan (Plateau's ``default``); None when the trainer sets no limit of its own.
        Lightning fills in 1,000 epochs when neither ``max_epochs`` nor ``max_steps`` is given: that is
        not a plan the user made (it would hold ``default``'s ``outlook`` until epoch 300), so it is not
        declared; an explicit ``max_epochs=1000`` cannot be told from it and is not declared either."""
        if self.step_unit == "global_step":
            steps = trainer.max_steps
            return steps if steps is not None and steps > 0 else None
        epochs = trainer.max_epochs
        if epochs is None or epochs <= 1 or (epochs == _LIGHTNING_DEFAULT_EPOCHS and trainer.max_steps == -1):
            return None
        return epochs - 1

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start_run(trainer, pl_module)
        example = getattr(pl_module, "example_input_array", None)
        if self.profile and self.run is not None and example is not None and trainer.is_global_zero:
            self.run.profile_model(pl_module, move_data_to_device(example, pl_module.device))

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._close(trainer, None)

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._close(trainer, "failed")

    def _close(self, trainer: pl.Trainer, status: FinalStatus | None) -> None:
        run = self.run
        if run is None:
            return
        for step, metrics in sorted(self._pending.items()):  # a validation whose epoch end never came
            if metrics:
                run.log(metrics, step=step)
        self._pending.clear()
        if trainer.is_global_zero:
            record: dict[str, Any] = {"lightning_epochs": trainer.current_epoch + 1}
            if self.best_model_path is not None:
                record["best_checkpoint"] = self.best_model_path
                record["best_checkpoint_step"] = self.best_step
            if self.stop_decision is not None:
                record["stopped_epoch"] = self.stopped_epoch
                record["stopped_by"] = self.stop_decision.rule
            run.update_summary(record)
        if self._owns_run and self.finish_run:
            run.finish(status or ("stopped" if self.stop_decision is not None else "finished"))

    # --- timing -------------------------------------------------------------------------------------

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self.time_steps:
            self._batch_started = time.perf_counter()
        # The rate this batch trains at: Lightning steps the schedulers once it is done (an epoch's before
        # that epoch's validation and before on_train_batch_end), so the optimizer's rate afterwards is the
        # next batch's, or the next epoch's.
        self._last_rate = _learning_rate(trainer)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.time_steps and self._batch_started is not None and self.run is not None:
            self.run.record_step_time(time.perf_counter() - self._batch_started)
            self._batch_started = None

    # --- logging and decisions ----------------------------------------------------------------------

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            # A validation at the end of a training epoch is judged at that epoch's end, with the training
            # means Lightning reduces only then (a rule that reads the training loss reads this epoch's).
            self._log_and_obey(trainer, judge=not _at_epoch_end(trainer))

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._log_and_obey(trainer, judge=True)

    def _step(self, trainer: pl.Trainer) -> int:
        return trainer.current_epoch if self.step_unit == "epoch" else trainer.global_step

    def _log_and_obey(self, trainer: pl.Trainer, *, judge: bool) -> None:
        run = self.run
        if run is None:
            return
        step = self._step(trainer)
        logged = self._logged.setdefault(step, set())
        fresh = _fresh_keys(trainer)
        metrics = {}
        for key, value in trainer.callback_metrics.items():
            number = _number(value)
            if key not in logged and number is not None and (fresh is None or key in fresh):
                metrics[key] = number
        rate = self._last_rate
        if rate is not None and not logged.intersection(_RATE_NAMES) and not metrics.keys() & _RATE_NAMES:
            metrics["lr"] = rate
        if metrics:
            logged.update(metrics)
        if not judge:
            # A validation at the epoch's end: held until the epoch's training means join it, in one call.
            # Logged apart, the monitored value went out once the SDK's step hold (0.1 s) had passed, and
            # a first epoch's checkpoint save between the two hooks made the training loss arrive after
            # the step was judged (a companion_late alert on a loaded host).
            self._pending.setdefault(step, {}).update(metrics)
            return
        metrics = {**self._pending.pop(step, {}), **metrics}
        if metrics:
            run.log(metrics, step=step)
        if self.monitor is None and metrics and not self._said_no_monitor and trainer.is_global_zero:
            self._said_no_monitor = True
            keys = ", ".join(sorted(metrics))
            rank_zero_warn(
                f"plateau: no monitor: Plateau judges nothing; this module logs {keys}: pass one as "
                "PlateauCallback(monitor=...)"
            )
        if self.monitor is None or self.monitor not in logged or step in self._judged:
            return
        self._judged.add(step)
        decision = run.decision(step, timeout=self.decision_timeout)
        strategy = trainer.strategy
        # Any rank's stop or checkpoint is every rank's: the same epoch ends the fit on all of them, and
        # trainer.save_checkpoint is entered by all (it synchronises them).
        stop = strategy.reduce_boolean_decision(decision.stop, all=False)
        checkpoint = strategy.reduce_boolean_decision(decision.action == "checkpoint", all=False)
        if checkpoint:
            self._save_best(trainer, step)
        if stop and not trainer.should_stop:
            trainer.should_stop = True
            self.stopped_epoch = trainer.current_epoch
            self.stop_decision = decision if decision.stop else run.latest
            # Where Lightning's own callbacks say why they stop (EarlyStopping's "Signaling Trainer to
            # stop"): its console, on rank 0.
            rank_zero_info(
                f"Plateau ({self.stop_decision.rule}) stops the fit at epoch {trainer.current_epoch}: "
                f"{self.stop_decision.reason}. Signaling Trainer to stop."
            )

    def _save_best(self, trainer: pl.Trainer, step: int) -> None:
        dirpath = self.dirpath or os.path.join(trainer.default_root_dir, "checkpoints")
        name = self.filename or f"plateau-best-{self.run.run_key[:16] if self.run is not None else 'run'}"
        final = os.path.join(dirpath, f"{name}.ckpt")
        partial = os.path.join(dirpath, f".{name}.ckpt.partial")
        trainer.save_checkpoint(partial)
        if trainer.is_global_zero:
            # Replaced only once written: a crash mid-save leaves the previous best intact.
            os.replace(partial, final)
        trainer.strategy.barrier("plateau.save_best")
        self.best_model_path = final
        self.best_step = step

    # --- resuming -----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "best_model_path": self.best_model_path,
            "best_step": self.best_step,
            "judged": sorted(self._judged),
            "run_key": self.run.run_key if self.run is not None else self._resumed_key,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._resumed_key = state_dict.get("run_key")
        self.best_model_path = state_dict.get("best_model_path")
        self.best_step = state_dict.get("best_step")
        self._judged = set(state_dict.get("judged", []))


__all__ = ["PlateauCallback"]
