"""Helpers shared by the windowed statistical rules."""

from __future__ import annotations

import math

from tracker.policy._base import State
from tracker.policy._types import Context, Observation


def push(state: State, obs: Observation, window: int, **updates: object) -> State:
    """``state`` with the finite observation appended to its bounded window (``xs``/``ys``), and
    ``updates`` merged in (one copy of the state, not two)."""
    if not math.isfinite(obs.value):
        return {**state, **updates} if updates else state
    xs, ys = state["xs"], state["ys"]
    drop = len(xs) + 1 - window  # slice once, not a full copy then a slice
    if drop > 0:
        xs, ys = xs[drop:], ys[drop:]
    state = {**state, **updates} if updates else {**state}
    state["xs"], state["ys"] = [*xs, obs.step], [*ys, obs.value]
    return state


def lr_warmup_over(state: State, lr: float | None) -> tuple[State, bool]:
    """Track the largest learning rate seen; the warm-up is over once the rate falls below its peak."""
    if lr is None or not math.isfinite(lr):
        return state, True
    if state.get("lr") == lr:  # the rate of last time: neither the peak nor the flag can move, no copy
        return state, bool(state["lr_warm_done"])
    peak = max(state.get("lr_peak") or 0.0, lr)
    over = bool(state.get("lr_warm_done")) or lr < peak
    return {**state, "lr_peak": peak, "lr_warm_done": over, "lr": lr}, over


def warm_up_over(
    state: State, obs: Observation, ctx: Context, *, lr_key: str | None, warmup: int, min_progress: float
) -> tuple[State, bool]:
    """Whether a run is past its warm-up: the learning rate (if logged under ``lr_key``) has started to
    fall, the step is at least ``warmup``, and past ``min_progress`` of the planned length (if declared)."""
    state, lr_over = lr_warmup_over(state, obs.extras.get(lr_key) if lr_key else None)
    planned = ctx.planned_steps
    past_plan = planned is None or obs.step >= min_progress * planned
    return state, lr_over and past_plan and obs.step >= warmup
