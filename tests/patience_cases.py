"""The patience semantics as a table, run both on the pure rule and through a real tracker.

Values are chosen to be exact in binary floating point where a tie or a margin is at stake.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

NAN = math.nan
INF = math.inf


@dataclass(frozen=True)
class Case:
    id: str
    mode: str
    values: list[float]
    rules: list[dict[str, Any]]
    stop_step: int | None
    best_step: int | None = None
    rule: str = "patience"
    checkpoints: list[int] = field(default_factory=list)


def patience(**params: Any) -> dict[str, Any]:
    return {"rule": "patience", **params}


CASES = [
    # M(n) > max(M(n+1..n+k)) with k=2 first holds at t=3, n=1.
    Case("founding-form", "max", [0.1, 0.5, 0.4, 0.3], [patience(patience=2, ties="improve")], 3, 1),
    Case("founding-form-min", "min", [0.9, 0.5, 0.6, 0.7], [patience(patience=2, ties="improve")], 3, 1),
    # Default ties="wait": equal values do not reset the count; the first best is kept.
    Case("ties-wait", "max", [0.5, 0.5, 0.5], [patience(patience=2)], 2, 0),
    # ties="improve": an equal value resets the count and becomes the best step.
    Case("ties-improve", "max", [0.5, 0.5, 0.5, 0.25, 0.25], [patience(patience=2, ties="improve")], 4, 2),
    # Absolute min_delta 0.25: 0.75 is not better than 1.0 by *more* than 0.25.
    Case("abs-delta-wait", "min", [1.0, 0.75, 0.75], [patience(patience=2, min_delta=0.25)], 2, 0),
    # ... but with ties="improve", a gain of exactly 0.25 counts.
    Case(
        "abs-delta-ties-improve",
        "min",
        [1.0, 0.75, 0.75, 0.5],
        [patience(patience=2, min_delta=0.25, ties="improve")],
        None,
    ),
    # Margins as Lightning computes them: 4.2 + 0.2 < 4.4 is false (4.4 - 4.2 > 0.2 would say true).
    Case("lightning-margin-min", "min", [4.4, 4.2], [patience(patience=1, min_delta=0.2)], 1, 0),
    Case("lightning-margin-max", "max", [0.1, 0.3], [patience(patience=1, min_delta=0.2)], 1, 0),
    # A gain equal to min_delta up to float rounding is a tie: 3.8 - 0.1 is 3.6999999999999997, not 3.7.
    Case(
        "rounded-tie-improves",
        "max",
        [3.7, 3.8, 3.8],
        [
            patience(patience=1, min_delta=0.1, ties="improve"),
            {"rule": "checkpoint", "min_delta": 0.1, "ties": "improve"},
        ],
        2,
        1,
        checkpoints=[0, 1],
    ),
    Case("rounded-tie-waits", "max", [3.7, 3.8], [patience(patience=1, min_delta=0.1)], 1, 0),
    # Relative min_delta 5% of |best|: 104 does not beat 100 by 5, 110 does; 114, 115 do not beat 110 by 5.5.
    Case(
        "rel-delta",
        "max",
        [100, 104, 110, 114, 115],
        [patience(patience=2, min_delta=0.05, relative=True)],
        4,
        2,
    ),
    # The same curve with an absolute min_delta of 3 improves at every step but the last: no stop.
    Case("abs-delta-same-curve", "max", [100, 104, 110, 114, 115], [patience(patience=2, min_delta=3)], None),
    # Warm-up: steps 0-2 are stored but not judged.
    Case(
        "warmup",
        "min",
        [0.1, 0.2, 0.3, 1.0, 0.5, 0.75, 0.75],
        [patience(patience=2, warmup=3)],
        6,
        4,
    ),
    Case("no-warmup", "min", [0.1, 0.2, 0.3, 1.0, 0.5, 0.75, 0.75], [patience(patience=2)], 2, 0),
    # NaN never improves: alone, patience counts it as a non-improving evaluation ...
    Case("nan-patience", "min", [1.0, NAN, NAN], [patience(patience=2)], 2, 0),
    # ... and non_finite stops at once, naming the best finite step.
    Case(
        "nan-non-finite",
        "min",
        [1.0, 0.5, NAN],
        [patience(patience=5), {"rule": "non_finite"}],
        2,
        1,
        rule="non_finite",
    ),
    Case("inf-non-finite", "max", [1.0, INF], [{"rule": "non_finite"}], 1, 0, rule="non_finite"),
    Case("neg-inf-non-finite", "min", [1.0, -INF], [{"rule": "non_finite"}], 1, 0, rule="non_finite"),
    # Still improving: never stops.
    Case("improving", "max", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [patience(patience=1)], None),
    # Checkpoint on each new best, until the stop.
    Case(
        "checkpoints",
        "min",
        [1.0, 0.5, 0.75, 0.25, 0.5, 0.5, 0.5],
        [patience(patience=3), {"rule": "checkpoint"}],
        6,
        3,
        checkpoints=[0, 1, 3],
    ),
]


def founding_stop(values: list[float], k: int) -> int | None:
    """The first t such that M(t-k) > max(M(t-k+1..t)) (mode max), by brute force."""
    for t in range(k, len(values)):
        n = t - k
        if values[n] > max(values[n + 1 : t + 1]):
            return t
    return None
