"""The few-strings values of the SDK's public signatures, as ``Literal`` types a type checker can hold a
call to (the tracker refuses anything else, and ``plateau_tracker.init`` checks them before training)."""

from __future__ import annotations

from typing import Literal

Mode = Literal["min", "max"]
"""The direction the monitored metric improves in: ``min`` for a loss, ``max`` for an accuracy."""

ModeChoice = Literal["min", "max", "auto"]
"""A :data:`Mode`, or ``auto``: read from the monitor's name (``plateau_tracker._mode.infer_mode``:
``val/acc`` is ``max``, ``val_loss`` is ``min``; a name that says neither is judged as a loss, with a
warning)."""

Ties = Literal["wait", "improve"]
"""Whether a value exactly at the improvement threshold improves (``improve``) or not (``wait``, as in
Lightning and Keras)."""

Combine = Literal["any", "all"]
"""``any``: the first rule that says stop stops; ``all``: every convergence rule must."""

Reduce = Literal["rank0", "mean", "min", "max"]
"""Judge rank 0's value of the monitor, or its mean/min/max over ranks."""

FinalStatus = Literal["finished", "stopped", "failed", "crashed"]
"""How a run ended, as ``Run.finish(status)`` reports it."""


def better(a: float, b: float, mode: Mode) -> bool:
    """True when ``a`` is strictly better than ``b`` under ``mode``."""
    return a > b if mode == "max" else a < b
