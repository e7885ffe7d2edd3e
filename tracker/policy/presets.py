"""Named policies: ``patience-K``, the reference ``median`` pruner, and Plateau's defaults."""

from __future__ import annotations

import re
from typing import Any

from tracker.policy._policy import PolicySpec
from tracker.policy._types import Mode

# Plateau's default single-run policy (see README, "Default policies", for the benchmark behind it).
# - degenerate: a model whose metric keeps returning to exactly the same few values (a constant predictor)
#   after its learning-rate warm-up is not going to learn: stop it (zero regret on OPDA).
# - forecast: stop when even the optimistic trend cannot beat the best by 0.005 by the planned end, once
#   the learning rate has decayed to 70% of its peak (a decaying schedule lifts plateaus before that).
DEFAULT_RULES: list[dict[str, Any]] = [
    {"rule": "non_finite"},
    {"rule": "checkpoint"},
    {"rule": "degenerate", "window": 8, "max_distinct": 4, "lr_key": "lr", "stuck_progress": 0.5},
    {"rule": "outlook", "relative_delta": 0.02, "min_progress": 0.2, "lr_key": "lr", "lr_fraction": 0.7},
]

# Plateau's default sweep policy: stop degenerate runs, and prune against the median of finished runs
# from the third evaluation on. (The forecast rule is left out: on OPDA it stops a sweep's eventual
# winner too early more often than it saves.)
DEFAULT_SWEEP_RULES: list[dict[str, Any]] = [
    {"rule": "non_finite"},
    {"rule": "checkpoint"},
    {"rule": "degenerate", "window": 8, "max_distinct": 4, "lr_key": "lr"},
    {"rule": "percentile", "percentile": 50.0, "n_startup_runs": 10, "warmup_evaluations": 3},
]

MEDIAN_RULES: list[dict[str, Any]] = [
    {"rule": "checkpoint"},
    {"rule": "percentile", "percentile": 50.0, "n_startup_runs": 10, "warmup_evaluations": 5},
]

PRESETS = ("default", "default-sweep", "median", "patience-K")


def preset(name: str, *, monitor: str, mode: Mode) -> PolicySpec:
    """The named policy watching ``monitor`` in ``mode``; ``ValueError`` naming the presets otherwise."""
    rules: list[dict[str, Any]]
    match = re.fullmatch(r"patience-(\d+)", name)
    if match:
        rules = [
            {"rule": "patience", "patience": int(match.group(1))},
            {"rule": "checkpoint"},
            {"rule": "non_finite"},
        ]
    elif name == "default":
        rules = DEFAULT_RULES
    elif name == "default-sweep":
        rules = DEFAULT_SWEEP_RULES
    elif name == "median":
        rules = MEDIAN_RULES
    else:
        raise ValueError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
    return PolicySpec.model_validate({"monitor": monitor, "mode": mode, "rules": rules})
