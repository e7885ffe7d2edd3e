"""Named policies: ``patience-K``, the reference ``median`` pruner, and Plateau's defaults."""

from __future__ import annotations

import re
from typing import Any

from plateau_tracker.server.policy._policy import PolicySpec
from plateau_tracker.server.policy._types import Mode

# Plateau's default single-run policy: the safety rules, the best checkpoint, and ``outlook``.
# tracker/policy/README.md states each rule in one sentence; tracker/policy/HISTORY.md holds the evidence
# for each parameter. Every threshold is relative to the run's own progress, noise, plan or learning rate,
# never in the metric's units. The companion series are read under the spellings trainers use (Keras,
# Transformers, Lightning and hand-written loops), the first the run has logged winning.
LR_NAMES = ["lr", "learning_rate", "train/lr", "train/learning_rate", "train_lr", "train_learning_rate"]
VAL_LOSS_NAMES = [
    *("val_loss", "val/loss", "valid_loss", "valid/loss"),
    *("validation_loss", "validation/loss", "eval_loss", "eval/loss"),
]
TRAIN_LOSS_NAMES = ["train_loss", "train/loss", "training_loss", "train_loss_epoch", "loss"]
DEFAULT_RULES: list[dict[str, Any]] = [
    {"rule": "non_finite"},
    {"rule": "divergence", "run_factor": 10.0, "confirm": 2},
    {"rule": "checkpoint", "tie_loss_key": VAL_LOSS_NAMES},
    {"rule": "perfect"},
    {"rule": "outlook", "lr_key": LR_NAMES, "loss_key": VAL_LOSS_NAMES, "train_key": TRAIN_LOSS_NAMES},
]

# Plateau's default sweep policy: the single-run default (a run that has converged, left its best or sits
# at chance is stopped whatever its rank); pruning against the median of finished runs once 5 have
# finished (Optuna's MedianPruner defaults); and successive halving from the first evaluation (asha,
# reduction factor 4 as Optuna's SuccessiveHalvingPruner: rungs at steps 1, 4, 16, 64, ..., each judged at
# a run's first checkpoint at or after it, and a run continues only in the top quarter of the runs there).
DEFAULT_SWEEP_RULES: list[dict[str, Any]] = [
    *DEFAULT_RULES,
    {"rule": "percentile", "percentile": 50.0, "n_startup_runs": 5},
    {"rule": "asha", "min_step": 1, "reduction_factor": 4.0},
]

MEDIAN_RULES: list[dict[str, Any]] = [
    {"rule": "checkpoint"},
    {"rule": "percentile", "percentile": 50.0, "n_startup_runs": 10, "warmup_evaluations": 5},
]

PRESETS = ("default", "default-sweep", "median", "patience-K")


def patience_rules(patience: int) -> list[dict[str, Any]]:
    """The rules of the ``patience-K`` preset: ``patience``, ``checkpoint``, ``non_finite``."""
    return [{"rule": "patience", "patience": patience}, {"rule": "checkpoint"}, {"rule": "non_finite"}]


def preset(name: str, *, monitor: str, mode: Mode) -> PolicySpec:
    """The named policy watching ``monitor`` in ``mode``; ``ValueError`` naming the presets otherwise."""
    rules: list[dict[str, Any]]
    match = re.fullmatch(r"patience-(\d+)", name)
    if match:
        rules = patience_rules(int(match.group(1)))
    elif name == "default":
        rules = DEFAULT_RULES
    elif name == "default-sweep":
        rules = DEFAULT_SWEEP_RULES
    elif name == "median":
        rules = MEDIAN_RULES
    else:
        raise ValueError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
    return PolicySpec.model_validate({"monitor": monitor, "mode": mode, "rules": rules})
