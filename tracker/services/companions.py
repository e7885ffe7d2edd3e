"""Finding the companion keys a batch brings too late or in another step unit (the alerts themselves are
pure: see :mod:`plateau_tracker.server.policy._companions`); inside the ingest transaction, at a dict look-up
a key of the policy's in the common case, a query only when one is found."""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.orm import Session

from plateau_tracker.server.db import models
from plateau_tracker.server.policy import PolicySpec, Verdict
from plateau_tracker.server.policy._companions import (
    COMPANION_LATE,
    COMPANION_STEPS,
    companion_late_alert,
    companion_steps_alert,
    in_other_steps,
    late_value_matters,
)
from plateau_tracker.server.services import _point_store
from plateau_tracker.server.services.decisions import has_alert

if TYPE_CHECKING:  # judging calls this module: its alias for annotations only
    from plateau_tracker.server.services.judging import NewPoints


def check(
    session: Session,
    run: models.Run,
    policy: PolicySpec,
    key_ids: dict[str, int],
    fresh: NewPoints,
    monitored_step: int | None,
) -> list[Verdict]:
    """The alerts this batch earns: ``companion_late`` (a key at the step judged last, before this batch's
    judging), ``companion_steps`` (a key only far past ``monitored_step``, the newest monitored step this
    batch brings to be judged, if any); each once a run."""
    brought = _companions_in(policy, key_ids, fresh)
    if not brought:  # most batches: nothing here to say
        return []
    alerts = []
    late = _at_step_judged_last(run, brought)
    if late is not None:
        alerts += _late(session, run, policy, fresh, *late)
    if monitored_step is not None:
        alerts += _other_steps(session, run, policy, brought, monitored_step)
    elif run.judged_step >= 1 and run.stop_step is None:
        alerts += _between_evaluations(session, run, policy, brought)
    return alerts


_Brought = list[tuple[str, int, dict[int, tuple[float, float]]]]


def _companions_in(policy: PolicySpec, key_ids: dict[str, int], fresh: NewPoints) -> _Brought:
    """The keys the rules read beside the monitored metric that this batch brings on rank 0: each with its
    id and its new points (step -> value, wall time), in the policy's order."""
    # The batch's keys against the policy's: a batch brings a few keys, the default names tens of spellings.
    companions = policy.companion_key_set()
    brought = [
        (key, key_id, points)
        for key, key_id in key_ids.items()
        if key in companions and (points := fresh.get((key_id, 0)))
    ]
    return sorted(brought, key=itemgetter(0)) if len(brought) > 1 else brought


def _at_step_judged_last(run: models.Run, brought: _Brought) -> tuple[str, int] | None:
    """A companion key, and its id, that this batch brings at the step judged last, of a running run: the
    rules judged that step with the key's value before it."""
    step = run.judged_step
    if step < 0 or run.stop_step is not None:
        return None
    for key, key_id, points in brought:
        if step in points:
            return key, key_id
    return None


def _late(
    session: Session, run: models.Run, policy: PolicySpec, fresh: NewPoints, key: str, key_id: int
) -> list[Verdict]:
    step = run.judged_step
    if has_alert(session, run.id, COMPANION_LATE):
        return []
    arrived = fresh[(key_id, 0)][step][0]
    before = _point_store.newest(session, run.id, key_id, 0, 1, at_or_before=step - 1).values.tolist()
    read_instead = before[-1] if before else None
    if not late_value_matters(arrived, read_instead):
        return []
    return [companion_late_alert(key, step, policy.monitor, arrived, read_instead)]


def _other_steps(
    session: Session, run: models.Run, policy: PolicySpec, brought: _Brought, step: int
) -> list[Verdict]:
    """``companion_steps`` for a batch that brings the monitored metric at ``step`` to be judged."""
    found = _in_other_steps(_firsts(brought), step)
    if found is None or has_alert(session, run.id, COMPANION_STEPS):
        return []
    return [companion_steps_alert(found[0], found[1], policy.monitor, step, same_batch=True)]


def _between_evaluations(
    session: Session, run: models.Run, policy: PolicySpec, brought: _Brought
) -> list[Verdict]:
    """``companion_steps`` for a batch without the monitored metric. A key logged on its own, at every
    training step, goes in batches between two evaluations: the batch that brings the monitored value
    rarely holds any of it. Compared with the step judged last (not step 0, after which a loop evaluating
    at global steps 0, N, 2N logs 1..N), past twice it and past it by twice the spacing of the last two
    evaluations, so said only once two have been judged: a loop evaluating at the end of epoch 0 and then
    every k epochs (``if epoch % k == 0``) logs k epochs of training steps after its first evaluation, in
    the same unit."""
    step = run.judged_step
    firsts = _firsts(brought)
    # Cheapest first: most batches end at the test against twice the step, and a run already told at the
    # query for its alert, before the two that read the spacing.
    if _in_other_steps(firsts, step) is None or has_alert(session, run.id, COMPANION_STEPS):
        return []
    spacing = _last_spacing(session, run, policy.monitor)
    found = None if spacing is None else _in_other_steps(firsts, step, spacing)
    if found is None:
        return []
    return [companion_steps_alert(found[0], found[1], policy.monitor, step, same_batch=False)]


def _firsts(brought: _Brought) -> list[tuple[str, int]]:
    """Each companion key the batch brings, with its first step in the batch."""
    return [(key, min(points)) for key, _, points in brought]


def _in_other_steps(
    firsts: list[tuple[str, int]], step: int, spacing: int | None = None
) -> tuple[str, int] | None:
    """The first key, with its first step, that :func:`in_other_steps` finds in another unit, or None."""
    return next(((key, first) for key, first in firsts if in_other_steps(first, step, spacing)), None)


def _last_spacing(session: Session, run: models.Run, monitor: str) -> int | None:
    """The steps between the monitored metric's last two points at or before the step judged last, or None
    while fewer than two are stored."""
    key = models.MetricKey
    monitor_id = session.execute(select(key.id).where(key.name == monitor)).scalar()
    if monitor_id is None:
        return None
    steps = _point_store.newest(session, run.id, monitor_id, 0, 2, at_or_before=run.judged_step).steps
    return int(steps[-1] - steps[0]) if len(steps) == 2 else None
