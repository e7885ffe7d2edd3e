"""Helpers shared by the windowed statistical rules."""

from __future__ import annotations

import math

from plateau_tracker.server.policy._base import State
from plateau_tracker.server.policy._types import Context, Observation


def push(state: State, obs: Observation, window: int) -> State:
    """Append a finite observation to the state's bounded window (``xs``/``ys``), in place."""
    if not math.isfinite(obs.value):
        return state
    xs, ys = state["xs"], state["ys"]
    xs.append(obs.step)
    ys.append(obs.value)
    drop = len(xs) - window
    if drop > 0:
        del xs[:drop], ys[:drop]
    return state


def lr_warmup_over(state: State, lr: float | None) -> tuple[State, bool]:
    """Track the largest learning rate seen (in place); the warm-up is over once the rate stops rising: it
    falls below its peak, or repeats the rate of the last evaluation (a constant schedule, or a warm-up
    that has reached its peak and holds it, as a step schedule does until its first drop). A repeat ends it
    too, or a run on a constant rate would never be judged."""
    if lr is None or not math.isfinite(lr):
        return state, True
    if state.get("lr") == lr:  # flat, so not warming up (a constant schedule, or its peak held)
        state["lr_warm_done"] = True
        return state, True
    peak = max(state.get("lr_peak") or 0.0, lr)
    if lr < peak:
        state["lr_fell"] = True
    over = bool(state.get("lr_warm_done")) or lr < peak
    state["lr_peak"], state["lr_warm_done"], state["lr"] = peak, over, lr
    return state, over


def lr_seen(state: State) -> bool:
    """Whether :func:`lr_warmup_over` has seen a (finite) learning rate."""
    return "lr_peak" in state


def lr_held_at_peak(state: State) -> bool:
    """Whether a learning rate tracked by :func:`lr_warmup_over` has been seen and never fell below its
    peak (a constant schedule so far, or a warm-up still rising or holding)."""
    return lr_seen(state) and not state.get("lr_fell")


def warm_up_over(
    state: State, obs: Observation, ctx: Context, *, lr: float | None, warmup: int, min_progress: float
) -> tuple[State, bool]:
    """Whether a run is past its warm-up: the learning rate ``lr`` (None when none is logged) has stopped
    rising, the step is at least ``warmup``, and past ``min_progress`` of the planned length (if declared)."""
    if lr is not None:  # (lr_warmup_over reads no rate as over, and changes nothing)
        if state.get("lr") == lr:  # lr_warmup_over's first answer, without the call: most points repeat
            state["lr_warm_done"] = True
        elif not lr_warmup_over(state, lr)[1]:
            return state, False
    return state, past_step_floors(obs, ctx, warmup=warmup, min_progress=min_progress)


def past_step_floors(obs: Observation, ctx: Context, *, warmup: int, min_progress: float) -> bool:
    """The warm-up guards of :func:`warm_up_over` other than the rate: the step is at least ``warmup`` and
    past ``min_progress`` of the planned length (if declared)."""
    planned = ctx.planned_steps
    return obs.step >= warmup and (planned is None or obs.step >= min_progress * planned)
