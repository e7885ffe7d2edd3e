"""Run summaries: merge what the trainer reports, derive convergence times from decisions and timestamps."""

from __future__ import annotations

import statistics
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from plateau_tracker.server.db import models
from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.schemas._common import as_utc, json_safe
from plateau_tracker.server.schemas.summary import (
    Convergence,
    RunSummaryPublic,
    SummaryUpdate,
    finite_or_none,
)
from plateau_tracker.server.services import _point_store
from plateau_tracker.server.services.convert import readable
from plateau_tracker.server.services.run_rows import get_run_row

# Timestamps of the newest points inferred time per step is taken from: enough for a stable median,
# bounded so a million-point run costs the same as a small one.
_INFER_FROM_LAST = 1_000


def update(db: Database, run_id: int, request: SummaryUpdate) -> RunSummaryPublic:
    """Merge ``request.summary`` into the stored summary (``null`` removes a key) and return the result."""
    with db.session(write=True) as session:
        run = get_run_row(session, run_id, lock=True)
        merged = dict(run.summary or {})
        for key, value in request.summary.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = json_safe(value)
        run.summary = merged
        session.flush()
        return RunSummaryPublic(run_id=run.id, summary=merged, convergence=convergence(session, run))


def read(db: Database, run_id: int) -> RunSummaryPublic:
    with db.session() as session:
        run = get_run_row(session, run_id)
        return RunSummaryPublic(
            run_id=run.id, summary=readable(run.summary or {}), convergence=convergence(session, run)
        )


def _key_id(session: Session, name: str) -> int | None:
    return session.execute(select(models.MetricKey.id).where(models.MetricKey.name == name)).scalar()


def _wall_time_at(session: Session, run_id: int, key_id: int, step: int) -> float | None:
    """The earliest wall time of the key's point at ``step`` over the ranks that logged it."""
    walls = [
        float(points.wall_times[0])
        for points in _point_store.read_ranks(session, run_id, key_id, first=step, last=step).values()
        if len(points)
    ]
    return min(walls) if walls else None


def _inferred_step_time(
    session: Session, run_id: int, last_steps: dict[int, int]
) -> tuple[float, str] | None:
    """Median of (wall-time gap / step gap) over the newest points of the key logged furthest (rank 0):
    the key logged every step, when there is one."""
    if not last_steps:
        return None
    key_id = max(last_steps, key=lambda k: (last_steps[k], -k))
    newest = _point_store.newest(session, run_id, key_id, 0, _INFER_FROM_LAST + 1)
    steps, walls = newest.steps.tolist(), newest.wall_times.tolist()
    rates = [
        (walls[i + 1] - walls[i]) / (steps[i + 1] - steps[i])
        for i in range(len(steps) - 1)
        if steps[i + 1] > steps[i]
    ]
    if not rates:
        return None
    name = session.get(models.MetricKey, key_id)
    return statistics.median(rates), name.name if name is not None else str(key_id)


def _first_at(session: Session, run_id: int, best_value: float) -> int | None:
    """The earliest step a decision named as best at ``best_value``: the new best that set it, before any
    tie at that value moved the checkpoint to keep."""
    first: int | None = session.execute(
        select(func.min(models.Decision.best_step)).where(
            models.Decision.run_id == run_id, models.Decision.best_value == best_value
        )
    ).scalar_one_or_none()
    return first


def convergence(session: Session, run: models.Run) -> Convergence:
    """Time to the best step and to the stop, the run's duration, and time per step."""
    start = as_utc(run.started_at).timestamp()
    monitor: str | None = (run.policy or {}).get("monitor")
    result: dict[str, Any] = {"monitor": monitor, "stop_step": run.stop_step}
    best = session.execute(
        select(models.Decision.best_step, models.Decision.best_value)
        .where(models.Decision.run_id == run.id, models.Decision.best_step.is_not(None))
        .order_by(models.Decision.seq.desc())
        .limit(1)
    ).first()
    key_id = _key_id(session, monitor) if monitor else None
    if best is not None:
        result["best_step"] = best.best_step
        result["best_value"] = finite_or_none(best.best_value)
        first = _first_at(session, run.id, best.best_value) if result["best_value"] is not None else None
        result["first_best_step"] = min(first, best.best_step) if first is not None else best.best_step
        if key_id is not None:
            at_best = _wall_time_at(session, run.id, key_id, best.best_step)
            result["time_to_best_s"] = at_best - start if at_best is not None else None
            first_step = result["first_best_step"]
            # Read again only where a tie moved the checkpoint kept past the first best (most runs: the same)
            at_first = (
                at_best
                if first_step == best.best_step
                else _wall_time_at(session, run.id, key_id, first_step)
            )
            result["time_to_first_best_s"] = at_first - start if at_first is not None else None
    if run.stop_step is not None and key_id is not None:
        at_stop = _wall_time_at(session, run.id, key_id, run.stop_step)
        result["time_to_stop_s"] = at_stop - start if at_stop is not None else None
    if run.ended_at is not None:
        result["duration_s"] = as_utc(run.ended_at).timestamp() - start
    last_steps: dict[int, int] | None = None  # looked up only when a figure below needs it
    if run.ended_at is None:
        last_steps = _point_store.last_steps(session, run.id, rank=0)
        ends = [_wall_time_at(session, run.id, key_id, step) for key_id, step in last_steps.items()]
        latest = max((end for end in ends if end is not None), default=None)
        result["duration_s"] = latest - start if latest is not None else None
    measured = (run.summary or {}).get("step_time_s")
    if isinstance(measured, (int, float)) and not isinstance(measured, bool):
        result["time_per_step_s"] = float(measured)
        result["time_per_step_source"] = "step_timer"
    else:
        if last_steps is None:
            last_steps = _point_store.last_steps(session, run.id, rank=0)
        inferred = _inferred_step_time(session, run.id, last_steps)
        if inferred is not None:
            result["time_per_step_s"], result["time_per_step_source"] = inferred
    return Convergence(**result)
