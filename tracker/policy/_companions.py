"""A key the rules read beside the monitored metric (a learning rate, a validation or training loss) that
reaches the tracker too late, or in another step unit, is judged as something else: the rules read its
value at or before each monitored step. These say so, as ``alert`` decisions, once a run each (the I/O that
finds them: :mod:`plateau_tracker.server.services.companions`).

- ``companion_late``: the key arrives at the step judged last, after that step was judged (a loop that logs
  the rate in a call after the monitored value's, slower than the SDK's step hold, or another client).
- ``companion_steps``: the key arrives only at steps far past the monitored one, in the same batch (the rate
  at the global step, the validation at the epoch), or in a batch of its own far past the step judged last
  (the rate logged at every training step, sent between two evaluations): read at or before each epoch's
  step, it is read from the start of training.
"""

from __future__ import annotations

import math

from plateau_tracker.server.policy._types import Verdict, fmt

COMPANION_LATE = "companion_late"
COMPANION_STEPS = "companion_steps"

SAME_COMPANION = 0.01
"""How close (relative) a late value may be to the one the rules read instead and not be said: a rate logged
every batch changes nothing by arriving a step late."""

OTHER_STEPS_SLACK = 10
"""Steps past twice the monitored one before a key's steps are taken for another unit: a loop logs the next
few training steps before its validation's batch goes."""


def late_value_matters(arrived: float, read_instead: float | None) -> bool:
    """Whether the rules read something other than the late value: none, or a value more than
    :data:`SAME_COMPANION` from it (a NaN on either side differs)."""
    return read_instead is None or not math.isclose(read_instead, arrived, rel_tol=SAME_COMPANION)


def in_other_steps(first_step: int, monitored_step: int, spacing: int | None = None) -> bool:
    """Whether a key whose first step in a batch is ``first_step`` is logged in another unit than the
    monitored metric brought at ``monitored_step`` in the same batch, or judged last at it: past that step
    by more than twice ``spacing``, the steps between its last two evaluations (taken as the step itself
    when not given: a loop evaluating every N steps first evaluates at about N), and the slack."""
    spacing = monitored_step if spacing is None else spacing
    return first_step > monitored_step + 2 * spacing + OTHER_STEPS_SLACK


def companion_late_alert(
    key: str, step: int, monitor: str, arrived: float, read_instead: float | None
) -> Verdict:
    """The ``companion_late`` alert: ``key`` at ``step`` arrived after that step of ``monitor`` was judged,
    with ``read_instead`` (its value before the step, or None) read in its place."""
    read = "no value of it" if read_instead is None else f"{fmt(read_instead)}, its value before that step"
    return Verdict(
        action="alert",
        rule=COMPANION_LATE,
        step=step,
        reason=(
            f"{key} at step {step} ({fmt(arrived)}) arrived after step {step} of {monitor} had "
            f"been judged, so the rules read {read}; log it in the same call as {monitor} "
            "or before it (the SDK's batch for a monitored step waits for the rest of the step until the "
            "loop calls should_stop() or should_checkpoint(), logs another step, or 0.1 s have passed)"
        ),
        evidence={
            "key": key,
            "step": step,
            "monitor": monitor,
            "value": arrived,
            "read_instead": read_instead,
        },
    )


def companion_steps_alert(key: str, first_step: int, monitor: str, step: int, *, same_batch: bool) -> Verdict:
    """The ``companion_steps`` alert: ``key`` comes from ``first_step`` in the batch that brings ``monitor``
    at ``step`` (``same_batch``), or in a batch of its own after ``step`` of ``monitor`` was judged."""
    where = (
        f"in the batch that brings {monitor} at step {step}"
        if same_batch
        else f"after step {step} of {monitor} was judged"
    )
    return Verdict(
        action="alert",
        rule=COMPANION_STEPS,
        step=step,
        reason=(
            f"{key} comes at steps from {first_step} {where}: they seem to be logged in different step "
            "units (a global step and an epoch), "
            f"and the rules read {key} at or before each step of {monitor}, so from the start "
            f"of training; log both with the same step= (or {monitor} at the global step)"
        ),
        evidence={"key": key, "key_step": first_step, "monitor": monitor, "monitor_step": step},
    )
