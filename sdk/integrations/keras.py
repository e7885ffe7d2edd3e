"""Keras 3: ``PlateauCallback``, a ``keras.callbacks.Callback`` that lets Plateau stop ``fit`` and keep
the best weights, on any backend (JAX, TensorFlow, PyTorch).

    from plateau_tracker.integrations.keras import PlateauCallback

    model.fit(x, y, validation_split=0.2, epochs=100,
              callbacks=[PlateauCallback(project="tabular", monitor="val_loss", mode="min")])

- **What it logs**: every number in ``logs`` at the end of each epoch (``loss``, ``val_loss``, metrics, and
  the learning rate as ``lr``: the rate the epoch trained at, which Keras's own schedule callbacks write to
  ``logs`` as ``learning_rate``, else the optimizer's at the epoch's end), at step = epoch; the plan is
  ``epochs - 1``.
- **At each epoch's end** it asks the tracker for its verdict on that epoch: a checkpoint keeps the model's
  weights (in memory, and in ``filepath`` when given, a ``.weights.h5`` file); a stop sets
  ``model.stop_training`` and logs why.
- **At the end** (``restore_best_weights=True``, the default) the model gets back the weights of the best
  epoch, as ``EarlyStopping(restore_best_weights=True)`` does; the run's summary records the best epoch,
  the stop and the weights file, and the run is finished.
- **Resume**: give the same ``run_key`` and ``fit(initial_epoch=...)``: the run is joined and judged on.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import keras  # type: ignore[import-untyped]  # keras ships no type information

import plateau_tracker as plateau
from plateau_tracker._decision import Decision
from plateau_tracker._types import ModeChoice
from plateau_tracker.integrations._arguments import check_run_arguments

logger = logging.getLogger("plateau")


class PlateauCallback(keras.callbacks.Callback):  # type: ignore[misc]  # an untyped base
    """Plateau's decisions for ``model.fit``. Give an existing ``run``, or the keyword arguments of
    :func:`plateau.init` (``project``, ``experiment``, ``name``, ``rules``, ``url``, ``run_key`` ...; the run
    is then created when training begins and finished when it ends). ``config`` defaults to the optimizer
    and ``fit``'s parameters."""

    def __init__(
        self,
        run: plateau.Run | None = None,
        *,
        monitor: str = "val_loss",
        mode: ModeChoice = "auto",
        config: Mapping[str, Any] | None = None,
        filepath: str | os.PathLike[str] | None = None,
        restore_best_weights: bool = True,
        finish: bool = True,
        **init_kwargs: Any,
    ) -> None:
        check_run_arguments("PlateauCallback", run, {"monitor": monitor, **init_kwargs})
        super().__init__()
        self.run = run
        self._owns_run = run is None
        self._init: dict[str, Any] = {"monitor": monitor, "mode": mode, **init_kwargs}
        self._config = config
        self.filepath = os.fspath(filepath) if filepath is not None else None
        self.restore_best_weights = restore_best_weights
        self.finish_run = finish
        self.best_epoch: int | None = None
        self.best_weights: list[Any] | None = None
        self.stopped_epoch: int | None = None
        self.stop_decision: Decision | None = None

    def on_train_begin(self, logs: Mapping[str, Any] | None = None) -> None:
        self.best_epoch, self.best_weights = None, None
        self.stopped_epoch, self.stop_decision = None, None
        if self.run is not None:
            return
        epochs = self.params.get("epochs") if self.params else None
        config = dict(self._config) if self._config is not None else self._optimizer_config()
        self.run = plateau.init(
            config=config, planned_steps=(epochs - 1) if epochs and epochs > 1 else None, **self._init
        )

    def on_epoch_end(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        run = self.run
        if run is None:
            return
        values = _numbers(logs or {})
        # The rate the epoch trained at. Keras's ReduceLROnPlateau and LearningRateScheduler write it to the
        # logs as learning_rate before they change it; a ReduceLROnPlateau listed before this callback has
        # already cut the optimizer's rate here, so the optimizer is read only where no callback wrote one.
        rate = values.get("learning_rate")
        if rate is None:
            rate = self._learning_rate()
        if rate is not None:
            values.setdefault("lr", rate)
        run.log(values, step=epoch)
        if run.monitor is not None and run.monitor not in values:
            logger.warning("plateau: %r is not among the epoch's logs %s", run.monitor, sorted(values))
        if run.should_checkpoint():
            self.best_epoch = epoch
            self.best_weights = self.model.get_weights()
            if self.filepath is not None:
                self.model.save_weights(self.filepath, overwrite=True)
        if run.should_stop() and self.stop_decision is None:
            self.stop_decision = run.latest
            self.stopped_epoch = epoch
            self.model.stop_training = True
            logger.warning(
                "plateau: training stops at epoch %d (%s): %s", epoch, run.latest.rule, run.latest.reason
            )

    def on_train_end(self, logs: Mapping[str, Any] | None = None) -> None:
        run = self.run
        if run is None:
            return
        if self.restore_best_weights and self.best_weights is not None:
            self.model.set_weights(self.best_weights)
        record: dict[str, Any] = {"keras_best_epoch": self.best_epoch}
        if self.filepath is not None and self.best_epoch is not None:
            record["best_checkpoint"] = self.filepath
        if self.stop_decision is not None:
            record["stopped_epoch"] = self.stopped_epoch
            record["stopped_by"] = self.stop_decision.rule
        run.update_summary(record)
        if self._owns_run and self.finish_run:
            run.finish("stopped" if self.stop_decision is not None else "finished")
            self.run = None

    def _learning_rate(self) -> float | None:
        optimizer = getattr(self.model, "optimizer", None)
        rate = getattr(optimizer, "learning_rate", None)
        if rate is None:
            return None
        # A keras Variable holds its backend's tensor in .value (float() of it needs no numpy), or a number.
        try:
            return float(getattr(rate, "value", rate))
        except (TypeError, ValueError):
            return None

    def _optimizer_config(self) -> dict[str, Any]:
        optimizer = getattr(self.model, "optimizer", None)
        config: dict[str, Any] = {"optimizer": type(optimizer).__name__} if optimizer is not None else {}
        rate = self._learning_rate()
        if rate is not None:
            config["learning_rate"] = rate
        if self.params:
            config.update({k: v for k, v in self.params.items() if isinstance(v, (int, float, str))})
        return config


def _numbers(values: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in values.items():
        try:
            out[key] = float(value)
        except (TypeError, ValueError):
            continue
    return out
