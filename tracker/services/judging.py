"""Judging a batch's new points: which observations the policy sees (per-rank keys on every rank, the
monitored metric's new steps, reduced over ranks when asked; late points), the rules run over them, and
the decisions recorded with their webhook deliveries. Called by ingest inside its transaction."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.orm import Session

from plateau_tracker.server.db import models
from plateau_tracker.server.policy import (
    Context,
    Observation,
    PolicySpec,
    Verdict,
    evaluate,
    evaluate_late,
    evaluate_per_rank,
    initial_states,
)
from plateau_tracker.server.policy._plan import plan_passed_alert
from plateau_tracker.server.schemas._common import json_safe
from plateau_tracker.server.services import _point_store, companions, missing_monitor, webhooks
from plateau_tracker.server.services.cohort import ExperimentCohort
from plateau_tracker.server.services.decisions import has_alert
from plateau_tracker.server.services.run_memory import RunMemory

NewPoints = dict[tuple[int, int], dict[int, tuple[float, float]]]
"""A batch's points not stored before: (key id, rank) -> step -> (value, wall time)."""


@dataclass(frozen=True)
class Judged:
    """What judging a batch did: the decisions made, the webhook deliveries queued for them, how many
    monitored points came late, and the ``(key id, rung step)`` of rungs judged without a view (to build
    once the batch has committed)."""

    decisions: list[models.Decision]
    deliveries: int
    late_points: int
    unviewed_rungs: list[tuple[int, int]]


NOTHING = Judged([], 0, 0, [])
_FRESH: frozenset[str] = frozenset()  # no key read from an earlier step


def judge(
    session: Session,
    run: models.Run,
    policy: PolicySpec | None,
    key_ids: dict[str, int],
    fresh: NewPoints,
    now: float,
    memory: RunMemory | None = None,
) -> Judged:
    """Advance the policy over the new points and record its decisions.

    Per-rank rules (distributed health) see their keys on every rank; the other rules see the monitored
    metric's new steps (rank 0's value, or the reduction over ranks once the step is complete or timed
    out). Monitored points at steps already judged (late) are judged by the rules that judge a point on its
    own, and said to be late. ``memory``: the run as this worker remembers it; the rules' states are read
    from it when it has them, and left in it as written.
    """
    if policy is None:
        if fresh:
            run.judged_step = max(run.judged_step, max(max(points) for points in fresh.values()))
        return NOTHING
    per_rank = _per_rank_observations(policy, key_ids, fresh)
    monitor_id = key_ids.get(policy.monitor)
    ready = _ready_steps(session, run, policy, monitor_id, fresh, now) if monitor_id is not None else []
    late = _late_observations(run, policy, monitor_id, fresh) if monitor_id is not None else []
    verdicts: list[Verdict] = []
    if run.judged_step < 0 and monitor_id is None:
        verdicts += missing_monitor.check(session, run, policy.monitor, key_ids, fresh)
    verdicts += companions.check(session, run, policy, key_ids, fresh, ready[-1].step if ready else None)
    if not per_rank and not ready and not verdicts and not late:
        # Nothing for the rules in this batch (training metrics only): leave their state unread.
        return NOTHING
    if memory is not None and memory.states is not None:
        stored_states = memory.states
    else:
        stored_states = list(session.execute(_STATES, {"run_id": run.id}).scalars())
        if memory is not None and stored_states:
            memory.states = stored_states
    states = stored_states or initial_states(policy)
    if per_rank:
        states, found = evaluate_per_rank(policy, states, per_rank)
        verdicts += found
    if late:
        verdicts += _judge_late(session, run, policy, states, late)
    newest = ready[-1].step if ready else None
    unviewed: list[tuple[int, int]] = []
    if ready and run.stop_step is None:
        assert monitor_id is not None
        planned = run.planned_steps  # passed in this batch: said once, as judged_step only grows
        if planned is not None and run.judged_step <= planned < ready[-1].step:
            past = next(r.step for r in ready if r.step > planned)
            verdicts.append(plan_passed_alert(policy.monitor, past, planned))
        states, found, unviewed = _judge_ready(
            session, run, policy, states, monitor_id, key_ids, fresh, ready
        )
        verdicts += found
    if newest is not None:
        # Once stopped, later steps are judged "stop" without running the rules again.
        run.judged_step = max(run.judged_step, newest)
    if per_rank or ready:
        saved = _save_states(session, run.id, policy, bool(stored_states), states, run.judged_step)
        if memory is not None:
            memory.states = saved
    made, deliveries = record_decisions(session, run, verdicts, now)
    return Judged(made, deliveries, len(late), unviewed)


def _judge_ready(
    session: Session,
    run: models.Run,
    policy: PolicySpec,
    states: list[Any],
    monitor_id: int,
    key_ids: dict[str, int],
    fresh: NewPoints,
    ready: list[ReadyStep],
) -> tuple[list[Any], list[Verdict], list[tuple[int, int]]]:
    """Run the policy over the monitored steps ready to be judged, in order, with the values of the keys
    its rules read at those steps and the experiment's cohort; sets the run's stop. Returns the new
    states, the verdicts, and the rungs judged without a view."""
    extras, stale = _extras(session, run.id, key_ids, fresh, policy.companion_keys(), [r.step for r in ready])
    observations = [
        Observation(r.step, r.value, r.wall_time, extras[r.step], 0, stale.get(r.step, _FRESH)) for r in ready
    ]
    cohort = ExperimentCohort(session, run, monitor_id)
    context = Context(planned_steps=run.planned_steps, cohort=cohort)
    evaluation = evaluate(policy, states, observations, context)
    notes = {r.step: r for r in ready}
    reduced = policy.reduce != "rank0"
    verdicts = [
        _annotated(v, notes.get(v.step) if reduced else None, run.world_size) for v in evaluation.verdicts
    ]
    if evaluation.stop_step is not None:
        run.stop_step = evaluation.stop_step
        run.stop_rule = next(v.rule for v in evaluation.verdicts if v.action == "stop")
    unviewed = [(monitor_id, rung_step) for rung_step in sorted(cohort.missing_rungs)]
    return evaluation.states, verdicts, unviewed


def record_decisions(
    session: Session, run: models.Run, verdicts: list[Verdict], now: float
) -> tuple[list[models.Decision], int]:
    """Add the verdicts as the run's next decisions, in step order, and queue their webhook deliveries;
    returns the decisions and how many deliveries were queued."""
    if not verdicts:
        return [], 0
    created = datetime.fromtimestamp(now, timezone.utc)
    deliveries = 0
    made = []
    hooks: list[webhooks.HookTarget] | None = None  # the project's, read at the first event, if any
    for verdict in sorted(verdicts, key=lambda v: v.step):
        run.decision_seq += 1
        decision = models.Decision(
            run_id=run.id,
            seq=run.decision_seq,
            step=verdict.step,
            action=verdict.action,
            rule=verdict.rule,
            reason=verdict.reason,
            evidence=json_safe(verdict.evidence),
            best_step=verdict.best_step,
            best_value=verdict.best_value,
            created_at=created,
        )
        made.append(decision)
    # Written in Core, before their webhook deliveries (which refer to them) are flushed: the ORM's unit
    # of work cost several times the insert. The rows stay out of the session: nothing reads them back
    # through it in this transaction (ingest answers with ``made`` itself).
    session.execute(_INSERT_DECISION, [_decision_row(decision) for decision in made])
    for decision in made:
        for event in webhooks.events_of(decision):
            if hooks is None:
                hooks = webhooks.project_hooks(session, run.project_id)
            deliveries += webhooks.enqueue(session, run, event, decision, hooks)
    return made, deliveries


def _decision_row(decision: models.Decision) -> dict[str, Any]:
    return {column: getattr(decision, column) for column in _DECISION_COLUMNS}


def _late_observations(
    run: models.Run, policy: PolicySpec, monitor_id: int, fresh: NewPoints
) -> list[Observation]:
    """This batch's new monitored points at steps the policy has already judged, while the run runs: rank
    0's under ``rank0``; under a reduction, the non-finite values of any rank (a NaN makes every
    reduction NaN; one rank's finite value is not the reduced one)."""
    if run.stop_step is not None or run.judged_step < 0:
        return []
    ranks = [0] if policy.reduce == "rank0" else [rank for key_id, rank in fresh if key_id == monitor_id]
    late = []
    for rank in ranks:
        points = fresh.get((monitor_id, rank), {})
        if not points or min(points) > run.judged_step:  # in order, the common case: one C-level pass
            continue
        for step, (value, wall_time) in points.items():
            if step <= run.judged_step and (policy.reduce == "rank0" or not math.isfinite(value)):
                late.append(Observation(step, value, wall_time))
    return late


def _judge_late(
    session: Session, run: models.Run, policy: PolicySpec, states: list[Any], late: list[Observation]
) -> list[Verdict]:
    """The stop the late points earn, if any; else, the first time a run has late points, an alert that
    says which rules did not see them (later ones are counted in each answer's ``late_points``)."""
    stop = evaluate_late(policy, states, late, judged_step=run.judged_step)
    if stop is not None:
        run.stop_step, run.stop_rule = stop.step, stop.rule
        return [stop]
    if has_alert(session, run.id, "late"):
        return []
    steps = sorted(obs.step for obs in late)
    judges = [rule.name for rule in policy.build() if rule.judges_late]
    return [
        Verdict(
            action="alert",
            rule="late",
            step=steps[-1],
            reason=(
                f"{policy.monitor} at step{'s' if len(steps) > 1 else ''} {steps[0]}"
                + (f"-{steps[-1]}" if len(steps) > 1 else "")
                + f" arrived after step {run.judged_step} had been judged: judged by "
                + (", ".join(judges) if judges else "no rule")
                + " (the rules that judge a point on its own); the others judge each step in order and "
                "do not see them. Later late points are counted in each answer's late_points."
            ),
            evidence={
                "late_steps": len(steps),
                "first": steps[0],
                "last": steps[-1],
                "judged_step": run.judged_step,
            },
        )
    ]


def _per_rank_observations(
    policy: PolicySpec, key_ids: dict[str, int], fresh: NewPoints
) -> dict[str, list[Observation]]:
    wanted = {key_ids[k]: k for k in policy.per_rank_keys() if k in key_ids}
    found: dict[str, list[Observation]] = {}
    for (key_id, rank), points in fresh.items():
        if key_id in wanted:
            found.setdefault(wanted[key_id], []).extend(
                Observation(step, value, wall_time, {}, rank) for step, (value, wall_time) in points.items()
            )
    return found


@dataclass(frozen=True)
class ReadyStep:
    """A step of the monitored metric ready to be judged, with how its value was formed."""

    step: int
    value: float
    wall_time: float
    ranks: int
    timed_out: bool


def _reduce(values: list[float], op: str) -> float:
    if any(math.isnan(v) for v in values):
        return math.nan
    if op == "mean":
        return math.fsum(values) / len(values)
    return min(values) if op == "min" else max(values)


def _ready_steps(
    session: Session,
    run: models.Run,
    policy: PolicySpec,
    monitor_id: int,
    fresh: NewPoints,
    now: float,
) -> list[ReadyStep]:
    """The monitored metric's steps after ``judged_step`` that can be judged now, in order."""
    if policy.reduce == "rank0":
        return sorted(
            (
                ReadyStep(step, value, wall_time, 1, False)
                for step, (value, wall_time) in fresh.get((monitor_id, 0), {}).items()
                if step > run.judged_step
            ),
            key=lambda r: r.step,
        )
    if not any(key_id == monitor_id for key_id, _ in fresh):
        return []
    by_step: dict[int, list[tuple[float, float]]] = {}
    for stored in _point_store.read_ranks(session, run.id, monitor_id, first=run.judged_step + 1).values():
        for step, value, wall_time in zip(
            stored.steps.tolist(), stored.values.tolist(), stored.wall_times.tolist(), strict=True
        ):
            by_step.setdefault(step, []).append((value, wall_time))
    ready = []
    for step in sorted(by_step):
        points = by_step[step]
        first = min(wall for _, wall in points)
        complete = len(points) >= run.world_size
        timed_out = not complete and now - first >= policy.reduce_timeout_s
        if not (complete or timed_out):
            break  # steps are judged in order: wait for this one
        values = [value for value, _ in points]
        ready.append(
            ReadyStep(step, _reduce(values, policy.reduce), max(w for _, w in points), len(points), timed_out)
        )
    return ready


def _annotated(verdict: Verdict, ready: ReadyStep | None, world_size: int) -> Verdict:
    """Say in the decision how a reduced value was formed, and when it was judged without every rank."""
    if ready is None:
        return verdict
    evidence = {
        **verdict.evidence,
        "ranks_reported": ready.ranks,
        "world_size": world_size,
        "timed_out": ready.timed_out,
    }
    reason = verdict.reason
    if ready.timed_out:
        reason += f" (judged on {ready.ranks} of {world_size} ranks after the reduce timeout)"
    return replace(verdict, evidence=evidence, reason=reason)


def _extras(
    session: Session,
    run_id: int,
    key_ids: dict[str, int],
    fresh: NewPoints,
    keys: tuple[str, ...],
    steps: list[int],
) -> tuple[dict[int, dict[str, float]], dict[int, frozenset[str]]]:
    """For each judged step, the rank-0 values of ``keys`` at that step: from this batch, else the latest
    stored value at or before the step (a key logged less often than the monitored one); and, per step,
    the keys whose value was read from an earlier step (steps with none are left out)."""
    extras: dict[int, dict[str, float]] = {step: {} for step in steps}
    stale: dict[int, frozenset[str]] = {}
    if not keys:
        return extras, stale
    by_key = {key_ids[k]: k for k in keys if k in key_ids}
    for key_id, key in by_key.items():
        points = fresh.get((key_id, 0), {})
        for step in steps:
            if step in points:
                extras[step][key] = points[step][0]
    # A key this batch does not carry is missing at every step (a policy names several spellings of one
    # series, and a run logs one of them, or none): no per-step look-up for it.
    absent = {
        key: [step for step in steps if key not in extras[step]] if key in key_ids else steps for key in keys
    }
    absent = {key: missing for key, missing in absent.items() if missing}
    if not absent:
        return extras, stale
    # One lookup for the ids of the absent keys this run has stored on rank 0: a policy names several
    # spellings of each series (tens of names), and a shared tracker holds many of them for other runs.
    rows = session.execute(_STORED_KEY_IDS, {"names": sorted(absent), "run_id": run_id})
    stored_ids = {name: key_id for name, key_id in rows}
    for key, missing in absent.items():
        stored_id = stored_ids.get(key)
        if stored_id is None:
            continue
        stored = _point_store.newest(
            session, run_id, stored_id, 0, len(missing) + 1, at_or_before=max(missing)
        )
        known = list(zip(stored.steps.tolist(), stored.values.tolist(), strict=True))
        for step in missing:
            earlier = [(s, value) for s, value in known if s <= step]
            if earlier:
                at, extras[step][key] = earlier[-1]
                if at < step:
                    stale[step] = stale.get(step, _FRESH) | {key}
    return extras, stale


def _save_states(
    session: Session,
    run_id: int,
    policy: PolicySpec,
    stored: bool,
    states: list[dict[str, Any]],
    last_step: int,
) -> list[Any]:
    """Write the rules' states (``stored``: the run has rows for them already), in Core: one statement for
    all of them, where the ORM's unit of work cost several times the database's work. Returns them as
    they read back."""
    saved = [as_stored(state) for state in states]
    if stored:
        session.execute(
            _UPDATE_STATE,
            [
                {"run": run_id, "index": index, "state": state, "last": last_step}
                for index, state in enumerate(saved)
            ],
        )
        return saved
    session.execute(
        _INSERT_STATE,
        [
            {
                "run_id": run_id,
                "rule_index": index,
                "rule": params.rule,
                "state": state,
                "last_step": last_step,
            }
            for index, (params, state) in enumerate(zip(policy.rules, saved, strict=True))
        ],
    )
    return saved


def as_stored(value: Any) -> Any:
    """``value`` as a JSON column gives it back: non-finite floats spelled out (:func:`json_safe`), tuples
    as lists, and keys as strings (as JSON writes them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else json_safe(value)
    if isinstance(value, dict):
        return {k if isinstance(k, str) else json.dumps(k): as_stored(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_stored(v) for v in value]
    return value


# Built once: building a statement costs more than running it on this path (every judged batch).
_decision = models.table_of(models.Decision)
_DECISION_COLUMNS = tuple(column.name for column in _decision.columns)
_INSERT_DECISION = insert(_decision)
_rule_state = models.table_of(models.RuleState)
_INSERT_STATE = insert(_rule_state)
_STATES = (
    select(_rule_state.c.state)
    .where(_rule_state.c.run_id == bindparam("run_id"))
    .order_by(_rule_state.c.rule_index)
)
_metric_key = models.table_of(models.MetricKey)
_metric_block = models.table_of(models.MetricBlock)
_STORED_KEY_IDS = select(_metric_key.c.name, _metric_key.c.id).where(
    _metric_key.c.name.in_(bindparam("names", expanding=True)),
    select(_metric_block.c.block)
    .where(
        _metric_block.c.run_id == bindparam("run_id"),
        _metric_block.c.key_id == _metric_key.c.id,
        _metric_block.c.rank == 0,
    )
    .exists(),
)
_UPDATE_STATE = (
    update(_rule_state)
    .where(_rule_state.c.run_id == bindparam("run"), _rule_state.c.rule_index == bindparam("index"))
    .values(
        state=bindparam("state", type_=_rule_state.c.state.type),
        last_step=bindparam("last", type_=_rule_state.c.last_step.type),
    )
)
