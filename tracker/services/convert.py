"""ORM rows to API schemas: the store boundary."""

from __future__ import annotations

import math
from typing import Any

from plateau_tracker.server.db import models
from plateau_tracker.server.policy import PolicySpec
from plateau_tracker.server.schemas._common import MAX_JSON_DEPTH, as_utc, json_safe
from plateau_tracker.server.schemas.decisions import DecisionPublic
from plateau_tracker.server.schemas.runs import RunPublic


def decision_public(row: models.Decision) -> DecisionPublic:
    return DecisionPublic(
        seq=row.seq,
        action=row.action,
        step=row.step,
        best_step=row.best_step,
        best_value=math.nan if row.best_value is None and row.best_step is not None else row.best_value,
        rule=row.rule,
        reason=row.reason,
        evidence=row.evidence,
        created_at=as_utc(row.created_at),
    )


def judged_step(run: models.Run) -> int | None:
    """The newest judged step of the monitored metric, or None before the first (stored as -1)."""
    return run.judged_step if run.judged_step >= 0 else None


def no_decision(run: models.Run) -> DecisionPublic:
    """The implicit decision of a run with no stored one: carry on."""
    return DecisionPublic(
        seq=run.decision_seq,
        action="continue",
        step=judged_step(run),
        reason="no decision yet" if run.decision_seq == 0 else "",
    )


def readable(value: Any, depth: int = 0) -> Any:
    """Stored JSON as the API may serialise it: subtrees deeper than the write-time bound are shown as a
    note (rows stored before the bound existed), and NaN/inf are spelled out. Writes are bounded by
    ``stored_json``; this keeps every read working whatever an older version stored."""
    if isinstance(value, dict):
        if depth >= MAX_JSON_DEPTH:
            return f"(nested deeper than {MAX_JSON_DEPTH} levels: not shown)"
        return {str(k): readable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        if depth >= MAX_JSON_DEPTH:
            return f"(nested deeper than {MAX_JSON_DEPTH} levels: not shown)"
        return [readable(v, depth + 1) for v in value]
    return json_safe(value)


def run_public(
    run: models.Run, *, project: str, experiment: str, decision: DecisionPublic, joined: bool = False
) -> RunPublic:
    return RunPublic(
        id=run.id,
        project=project,
        experiment=experiment,
        name=run.name,
        run_key=run.run_key,
        config=readable(run.config),
        tags=run.tags,
        policy=PolicySpec.model_validate(run.policy) if run.policy is not None else None,
        status=run.status,
        world_size=run.world_size,
        started_at=as_utc(run.started_at),
        ended_at=as_utc(run.ended_at) if run.ended_at else None,
        last_heartbeat=as_utc(run.last_heartbeat),
        judged_step=judged_step(run),
        stop_step=run.stop_step,
        stop_rule=run.stop_rule,
        planned_steps=run.planned_steps,
        summary=readable(run.summary),
        decision=decision,
        joined=joined,
    )
