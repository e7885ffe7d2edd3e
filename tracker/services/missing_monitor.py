"""Telling a run that its monitored metric never arrives (the rule itself is pure: see
:mod:`plateau_tracker.server.policy._missing_monitor`); read inside the ingest transaction, only while nothing
has been judged and the batch carries keys like the monitor."""

from __future__ import annotations

from sqlalchemy import exists, func, select
from sqlalchemy.orm import Session

from plateau_tracker.server.db import models
from plateau_tracker.server.policy import Verdict
from plateau_tracker.server.policy._missing_monitor import (
    RULE,
    STEPS_BEFORE_ALERT,
    is_like_monitor,
    missing_monitor_alert,
)

_block = models.MetricBlock


def check(
    session: Session,
    run: models.Run,
    monitor: str,
    key_ids: dict[str, int],
    fresh: dict[tuple[int, int], dict[int, tuple[float, float]]],
) -> list[Verdict]:
    """The ``missing_monitor`` alert, once per run, when a key like the monitor has points at
    ``STEPS_BEFORE_ALERT`` steps (rank 0) and the monitor has none; else nothing."""
    like = {key_ids[key]: key for key in key_ids if is_like_monitor(monitor, key)}
    if not any(key_id in like and rank == 0 for key_id, rank in fresh):
        return []
    counts = {
        key_id: int(steps)
        for key_id, steps in session.execute(
            select(_block.key_id, func.sum(_block.points))
            .where(_block.run_id == run.id, _block.rank == 0, _block.key_id.in_(like))
            .group_by(_block.key_id)
        )
    }
    key_id, steps = max(counts.items(), key=lambda item: (item[1], -item[0]), default=(0, 0))
    if steps < STEPS_BEFORE_ALERT or _has_monitor_or_alert(session, run.id, monitor):
        return []
    logged = session.execute(
        select(models.MetricKey.name)
        .join(_block, _block.key_id == models.MetricKey.id)
        .where(_block.run_id == run.id)
        .distinct()
    ).scalars()
    step = max(max(points) for points in fresh.values())
    return [missing_monitor_alert(monitor, logged, like[key_id], steps, step)]


def _has_monitor_or_alert(session: Session, run_id: int, monitor: str) -> bool:
    """Whether the monitor has points on any rank (a reduced metric judged later), or the alert was given."""
    monitored = exists().where(
        _block.run_id == run_id,
        _block.key_id
        == select(models.MetricKey.id).where(models.MetricKey.name == monitor).scalar_subquery(),
    )
    alerted = exists().where(models.Decision.run_id == run_id, models.Decision.rule == RULE)
    return bool(session.execute(select(monitored | alerted)).scalar())
