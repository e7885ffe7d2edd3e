"""Named policies: ``patience-K``, the reference ``median`` pruner, and Plateau's defaults."""

from __future__ import annotations

import re
from typing import Any

from tracker.policy._policy import PolicySpec
from tracker.policy._types import Mode

# Plateau's default single-run policy (see README, "Default policies", for the benchmark behind it).
DEFAULT_RULES: list[dict[str, Any]] = [
    {"rule": "non_finite"},
    {"rule": "checkpoint"},
    {"rule": "patience", "patience": 10},
]

# Plateau's default sweep policy: the single-run rules plus cross-run pruning.
DEFAULT_SWEEP_RULES: list[dict[str, Any]] = [
    *DEFAULT_RULES,
    {"rule": "percentile", "percentile": 50.0, "n_startup_runs": 10, "warmup_evaluations": 5},
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
