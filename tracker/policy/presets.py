"""Named policies: ``patience-K``, the reference ``median`` pruner, and Plateau's defaults."""

from __future__ import annotations

import re
from typing import Any

from plateau_tracker.server.policy._policy import PolicySpec
from plateau_tracker.server.policy._types import Mode

# Plateau's default single-run policy. Every threshold is relative to the run's own range, noise, plan or
# learning rate, never in the metric's units; tracker/policy/README.md says what each rule does, and
# tracker/policy/HISTORY.md how each parameter was chosen and what it measured.
# - non_finite and divergence stop a run whose values are lost: a NaN, or worse than its best by ten times
#   its own scale at two evaluations in a row (one spike that recovers is not a divergence).
# - checkpoint keeps the best; among evaluations tied at it, the one with the lowest validation loss, since
#   a small validation set sits on its best accuracy while the model still improves.
# - perfect stops a metric at the best score it can take: nothing is left to gain.
# - degenerate stops a run that repeats a few values: collapsed from its best to a constant prediction, or
#   stuck where it started. It waits while a logged rate is at its peak or a validation loss still falls,
#   and longer when no rate is logged, because flat starts do climb.
# - outlook stops a run whose gain over the last doubling, kept up to the planned end, adds too little to
#   the progress it has made, or that has stayed worse than its best by a share of that progress; never
#   before a share of its plan, while its logged rate has yet to decay, while its validation loss still
#   falls, or while its last values climb steadily. A run that logs neither a rate nor a validation loss is
#   judged later, since nothing says whether a schedule is still to anneal.
# The companion series are read under the spellings trainers use (Keras, Transformers, Lightning and hand-
# written loops), the first the run has logged winning.
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
    {
        "rule": "degenerate",
        "window": 8,
        "max_distinct": 4,
        "fine_window": 4,
        "lr_key": LR_NAMES,
        "stuck_progress": 0.4,
        "unscheduled_stuck_progress": 0.6,
        "unscheduled_collapse_progress": 0.3,
        "fine_in_warmup": True,
        "min_held": 2,
        "collapse_to_start": 0.25,
        "loss_key": VAL_LOSS_NAMES,
    },
    {
        "rule": "outlook",
        "relative_delta": 0.015,
        "min_progress": 0.3,
        "learned_spread": 3.0,
        "resolution_share": 0.1,
        "lr_key": LR_NAMES,
        "lr_fraction": 0.3,
        "retreat": 0.05,
        "rising_t": 2.0,
        "early_retreat_t": 5.0,
        "unplanned_evaluations": 16,
        "final_share": 0.1,
        "steady_retreat_t": 5.0,
        "unimproved_share": 0.05,
        "blind_min_progress": 0.8,
        "blind_early_retreat_t": 15.0,
        "blind_headroom": 0.2,
        "blind_mid_headroom": 0.7,
        "blind_mid_progress": 0.65,
        "loss_holds_jitter": True,
        "loss_key": VAL_LOSS_NAMES,
        "train_key": TRAIN_LOSS_NAMES,
    },
]

# Plateau's default sweep policy: the single-run default's degenerate and outlook rules (a run that has
# converged or collapsed is stopped whatever its rank); pruning against the median of finished runs once 5
# have finished (Optuna's MedianPruner defaults); and successive halving from the first evaluation (asha,
# reduction factor 4 as Optuna's SuccessiveHalvingPruner: rungs at steps 1, 4, 16, 64, ..., each judged at
# a run's first checkpoint at or after it, and a run continues only in the top quarter of the runs there).
# The holds that protect a single run's late gain are left out: a sweep's regret is its best run's, and
# holding the others buys none.
_SINGLE_RUN_ONLY: dict[str, dict[str, Any]] = {
    "outlook": {
        "loss_key": None,
        "resolution_share": 0.0,
        "blind_min_progress": None,
        "min_progress": 0.2,
        "final_share": None,
    },
    "degenerate": {
        "unscheduled_stuck_progress": None,
        "unscheduled_collapse_progress": None,
        "fine_in_warmup": False,
        "collapse_to_start": None,
    },
}
DEFAULT_SWEEP_RULES: list[dict[str, Any]] = [
    *({**rule, **_SINGLE_RUN_ONLY.get(rule["rule"], {})} for rule in DEFAULT_RULES),
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
