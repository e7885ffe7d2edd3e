"""The other runs of a run's experiment, as cross-run rules see them (read inside the ingest transaction)."""

from __future__ import annotations

import math

import numpy as np
from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.orm import Session

from tracker.db import models
from tracker.db.models import BLOCK_STEPS
from tracker.policy import PRUNING_RULES
from tracker.services._point_store import decode_floats, decode_steps


class ExperimentCohort:
    """Implements :class:`tracker.policy.Cohort` over the database for one run being judged.

    Semantics match the replay's: a finished run is one that is no longer running and was not pruned;
    a finished run that the policy stopped early counts at later steps with its last value.
    """

    def __init__(self, session: Session, run: models.Run, monitor_id: int) -> None:
        self._session = session
        self._run = run
        self._monitor_id = monitor_id
        self._cache: dict[tuple[int, bool], list[float]] = {}
        self._from_cache: dict[tuple[int, bool], list[float]] = {}
        self._finished: int | None = None

    def _others(self, *, finished_only: bool) -> list[ColumnElement[bool]]:
        r = models.Run
        conditions: list[ColumnElement[bool]] = [
            r.experiment_id == self._run.experiment_id,
            r.id != self._run.id,
        ]
        if finished_only:
            conditions.append(r.status != "running")
            conditions.append(or_(r.stop_rule.is_(None), r.stop_rule.not_in(PRUNING_RULES)))
        return conditions

    def finished_runs(self) -> int:
        if self._finished is None:
            self._finished = self._session.execute(
                select(func.count()).select_from(models.Run).where(*self._others(finished_only=True))
            ).scalar_one()
        return self._finished

    def values_at(self, step: int, *, finished_only: bool) -> list[float]:
        key = (step, finished_only)
        if key not in self._cache:
            self._cache[key] = self._load(step, finished_only=finished_only)
        return self._cache[key]

    def values_from(self, step: int, *, finished_only: bool) -> list[float]:
        key = (step, finished_only)
        if key not in self._from_cache:
            self._from_cache[key] = self._load_from(step, finished_only=finished_only)
        return self._from_cache[key]

    def _load_from(self, step: int, *, finished_only: bool) -> list[float]:
        """Each other run's value at its first step at or after ``step``: in its first block that reaches
        ``step`` (blocks hold consecutive step ranges, so that block holds the point)."""
        mb, r = models.MetricBlock, models.Run
        on_monitor = and_(mb.run_id == r.id, mb.key_id == self._monitor_id, mb.rank == 0)
        first_block = (
            select(mb.run_id, func.min(mb.block).label("first"))
            .join(r, on_monitor)
            .where(*self._others(finished_only=finished_only), mb.last_step >= step)
            .group_by(mb.run_id)
            .subquery()
        )
        rows = self._session.execute(
            select(mb.step_data, mb.value_data)
            .join(first_block, and_(mb.run_id == first_block.c.run_id, mb.block == first_block.c.first))
            .where(mb.key_id == self._monitor_id, mb.rank == 0)
        )
        values = []
        for step_data, value_data in rows:
            index = int(np.searchsorted(decode_steps(step_data), step))
            values.append(float(decode_floats(value_data)[index]))
        return sorted(v for v in values if math.isfinite(v))

    def _load(self, step: int, *, finished_only: bool) -> list[float]:
        mb, r = models.MetricBlock, models.Run
        on_monitor = and_(mb.run_id == r.id, mb.key_id == self._monitor_id, mb.rank == 0)
        exact = self._session.execute(
            select(mb.step_data, mb.value_data)
            .join(r, on_monitor)
            .where(*self._others(finished_only=finished_only), mb.block == step // BLOCK_STEPS)
        )
        values = []
        for step_data, value_data in exact:
            steps = decode_steps(step_data)
            index = int(np.searchsorted(steps, step))
            if index < len(steps) and steps[index] == step:
                values.append(float(decode_floats(value_data)[index]))
        if finished_only:
            # Runs stopped early (not pruned) before `step` count with their last value.
            last_block = (
                select(mb.run_id, func.max(mb.block).label("last"))
                .join(r, on_monitor)
                .where(*self._others(finished_only=True), r.stop_step.is_not(None), r.stop_step < step)
                .group_by(mb.run_id)
                .subquery()
            )
            carried = self._session.execute(
                select(mb.value_data)
                .join(last_block, and_(mb.run_id == last_block.c.run_id, mb.block == last_block.c.last))
                .where(mb.key_id == self._monitor_id, mb.rank == 0, mb.last_step < step)
            ).scalars()
            values += [float(decode_floats(data)[-1]) for data in carried]
        return sorted(v for v in values if math.isfinite(v))
