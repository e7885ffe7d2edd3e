"""Hugging Face Transformers: ``PlateauCallback``, a ``TrainerCallback`` that lets Plateau stop and
checkpoint a ``Trainer``.

    from plateau_tracker.integrations.transformers import PlateauCallback

    trainer = Trainer(model, args, train_dataset=train, eval_dataset=val,
                      callbacks=[PlateauCallback(project="nlp", monitor="eval_loss", mode="min")])
    trainer.train()

- **What it logs**: every number ``Trainer`` logs (``on_log``: loss, learning rate as ``lr``, grad norm ...)
  and every evaluation metric (``on_evaluate``), at ``state.global_step``; the plan is ``max_steps``. Each
  evaluation also carries ``lr``, the rate the step's optimizer update used (the Trainer logs its rate only
  every ``logging_steps``, so an evaluation between two logs would be judged with a rate from before).
- **At each evaluation** it asks the tracker for its verdict on exactly that step (the monitor was just
  logged): a checkpoint sets ``control.should_save`` (the Trainer saves ``checkpoint-<step>`` right after
  the evaluation, whatever ``save_strategy`` says), a stop sets ``control.should_training_stop``, and the
  reason is logged. With ``load_best_model_at_end=True`` the Trainer loads Plateau's best checkpoint at the
  end (``state.best_model_checkpoint`` is set to it).
- **Distributed** (torchrun, accelerate): every process runs the callback; rank 0 logs, and the verdict is
  a collective, so all processes save and stop at the same step.
- **At the end** the run's summary records the best checkpoint, the step and rule of the stop, and the
  run is finished (``stopped`` or ``finished``).
- **Resume** (``trainer.train(resume_from_checkpoint=...)``): the run is joined again (its key is kept in
  ``<output_dir>/plateau_run.json``), so a resumed training continues the same run and stops at the step
  the tracker decided.
"""

from __future__ import annotations

import json
import logging
import math
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

import plateau_tracker as plateau
from plateau_tracker._decision import Decision
from plateau_tracker._types import ModeChoice
from plateau_tracker.integrations._arguments import check_run_arguments

logger = logging.getLogger("plateau")

RUN_FILE = "plateau_run.json"
# Trainer's own names for what the SDK's rules read under another key.
_RENAMED = {"learning_rate": "lr"}


def _numbers(values: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        out[_RENAMED.get(key, key)] = float(value)
    return out


# A key only the Trainer's log at the end of training carries (beside train_loss, total_flos, ...).
_TRAINING_DONE = "train_runtime"


class PlateauCallback(TrainerCallback):
    """Plateau's decisions for a ``transformers.Trainer``. Give an existing ``run``, or the keyword
    arguments of :func:`plateau.init` (``project``, ``experiment``, ``name``, ``rules``, ``url`` ...; the run
    is then created at ``on_train_begin`` and finished at ``on_train_end``; a missing ``project`` is a
    ``TypeError`` here). ``monitor``/``mode`` default to the Trainer's ``metric_for_best_model`` and
    ``greater_is_better`` (else ``eval_loss``), ``name`` to its ``run_name``, and ``config`` to the main
    training arguments."""

    def __init__(
        self,
        run: plateau.Run | None = None,
        *,
        monitor: str | None = None,
        mode: ModeChoice | None = None,
        config: Mapping[str, Any] | None = None,
        finish: bool = True,
        **init_kwargs: Any,
    ) -> None:
        check_run_arguments("PlateauCallback", run, {"monitor": monitor, **init_kwargs})
        self.run = run
        self._owns_run = run is None
        self._init: dict[str, Any] = dict(init_kwargs)
        self._monitor, self._mode = monitor, mode
        self._config = config
        self.monitor = monitor if run is None else run.monitor
        self.finish_run = finish
        self.best_checkpoint: str | None = None
        self.best_step: int | None = None
        self.stop_decision: Decision | None = None
        self._saving_step: int | None = None
        self._rate: float | None = None  # the rate of the latest optimizer update

    # --- the run -------------------------------------------------------------------------------------

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self.run is not None:
            return
        config = dict(self._config) if self._config is not None else _hyperparameters(args)
        monitor, mode = _monitored(self._monitor, self._mode, args)
        if "name" not in self._init and args.run_name and args.run_name != args.output_dir:
            self._init["name"] = args.run_name
        self.run = plateau.init(
            config=config,
            monitor=monitor,
            mode=mode,
            planned_steps=state.max_steps or None,
            run_key=self._init.pop("run_key", None) or _run_key(args, state),
            **self._init,
        )
        self.monitor = self.run.monitor

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        # Evaluation metrics come through on_evaluate, judged there; the rest is logged here.
        if self.run is not None and state.is_world_process_zero and logs:
            values = {k: v for k, v in _numbers(logs).items() if not k.startswith("eval_")}
            if _TRAINING_DONE in values:
                # The Trainer's figures of the whole training (its runtime, its mean training loss): the
                # run's summary, not points of its series. Logged as points, its ``train_loss`` (a mean over
                # every step) came after the last evaluation was judged, and read as a training loss.
                self.run.update_summary({f"transformers_{key}": value for key, value in values.items()})
            elif values:
                self.run.log(values, step=state.global_step)

    def on_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        # After the update and before the scheduler's step: the rate this update used, as the Trainer's own
        # learning_rate log reads it. A dictionary look-up a step.
        optimizer: Any = kwargs.get("optimizer")  # None: caught below
        try:
            self._rate = float(optimizer.param_groups[0]["lr"])
        except (AttributeError, IndexError, KeyError, TypeError, ValueError):
            self._rate = None

    def on_evaluate(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        metrics: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        run = self.run
        if run is None:
            return
        step = state.global_step
        values = _numbers(metrics or {})
        if values and self._rate is not None:
            values.setdefault("lr", self._rate)
        if state.is_world_process_zero and values:
            run.log(values, step=step)
        if self.monitor is not None and self.monitor not in values and state.is_world_process_zero:
            logger.warning("plateau: %r is not among the evaluation metrics %s", self.monitor, sorted(values))
        # Collectives under torch.distributed: every process calls both, in this order, at every evaluation.
        if run.should_checkpoint():
            control.should_save = True
            self._saving_step = step
            self.best_step = step
        if run.should_stop() and self.stop_decision is None:
            self.stop_decision = run.latest
            control.should_training_stop = True
            if state.is_world_process_zero:
                logger.warning(
                    "plateau: training stops at step %d (%s): %s",
                    step,
                    run.latest.rule,
                    run.latest.reason,
                )

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self._saving_step is not None and self._saving_step == state.global_step:
            self.best_checkpoint = os.path.join(args.output_dir or ".", f"checkpoint-{state.global_step}")
        if self.best_checkpoint is not None:
            # What load_best_model_at_end loads at the end, and what checkpoint rotation keeps: Plateau's
            # best, set again at every save, since the Trainer's own pick (its metric, its comparison) is
            # written before this callback runs and would otherwise win.
            state.best_model_checkpoint = self.best_checkpoint
        self._saving_step = None

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        run = self.run
        if run is None:
            return
        if state.is_world_process_zero:
            record: dict[str, Any] = {"transformers_global_step": state.global_step}
            if self.best_checkpoint is not None:
                record["best_checkpoint"] = self.best_checkpoint
                record["best_checkpoint_step"] = self.best_step
            if self.stop_decision is not None:
                record["stopped_step"] = state.global_step
                record["stopped_by"] = self.stop_decision.rule
            run.update_summary(record)
        if self._owns_run and self.finish_run:
            run.finish("stopped" if self.stop_decision is not None else "finished")
            self.run = None


def _monitored(
    monitor: str | None, mode: ModeChoice | None, args: TrainingArguments
) -> tuple[str, ModeChoice]:
    """The key judged and its direction: as given, else the Trainer's own ``metric_for_best_model`` (as
    its evaluation logs it, ``eval_`` first) and ``greater_is_better``, else ``eval_loss``."""
    metric = getattr(args, "metric_for_best_model", None)
    if monitor is None:
        monitor = (metric if metric.startswith("eval_") else f"eval_{metric}") if metric else "eval_loss"
    if mode is None:
        greater = getattr(args, "greater_is_better", None)
        named = metric and monitor in (metric, f"eval_{metric}")
        mode = ("max" if greater else "min") if named and greater is not None else "auto"
    return monitor, mode


def _hyperparameters(args: TrainingArguments) -> dict[str, Any]:
    """The training arguments a comparison of runs needs (all of them would be ~150 keys)."""
    names = (
        "learning_rate",
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "num_train_epochs",
        "max_steps",
        "weight_decay",
        "warmup_steps",
        "lr_scheduler_type",
        "seed",
    )
    config: dict[str, Any] = {}
    for name in names:
        value = getattr(args, name, None)
        value = getattr(value, "value", value)  # enums (the scheduler type) by their value
        if isinstance(value, (int, float, str)) and not (isinstance(value, float) and math.isnan(value)):
            config[name] = value
    return config


def _run_key(args: TrainingArguments, state: TrainerState) -> str | None:
    """The run key: a new one for a training from scratch, the stored one when resuming (the Trainer has
    loaded a checkpoint's state, so ``global_step`` > 0), so a resumed training continues its run. Ranks
    agree: rank 0's new key is broadcast, and a resumed training's file is read by all."""
    path = Path(args.output_dir or ".") / RUN_FILE
    if state.global_step > 0 and path.exists():
        try:
            key = json.loads(path.read_text())["run_key"]
            return str(key)
        except (OSError, ValueError, KeyError):
            logger.warning("plateau: %s is unreadable; the resumed training starts a new run", path)
    key = _from_rank0(f"hf-{uuid.uuid4().hex}")
    if state.is_world_process_zero:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"run_key": key}))
    return key


def _from_rank0(key: str) -> str:
    """Rank 0's key on every process of a torch.distributed job (each made its own)."""
    try:
        import torch.distributed as dist
    except ImportError:
        return key
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return key
    shared = [key]
    dist.broadcast_object_list(shared, src=0)
    return str(shared[0])
