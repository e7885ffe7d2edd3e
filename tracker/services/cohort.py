"""The other runs of a run's experiment, as cross-run rules see them (read inside the ingest transaction)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from sqlalchemy import (
    ColumnElement,
    CompoundSelect,
    Select,
    and_,
    bindparam,
    func,
    literal_column,
    select,
    union_all,
)
from sqlalchemy.orm import Session

from plateau_tracker._quantile import interpolate, quantile_ranks
from plateau_tracker.server.db import models
from plateau_tracker.server.db.models import BLOCK_STEPS
from plateau_tracker.server.policy import cut_of
from plateau_tracker.server.services import cohort_view, rung_view
from plateau_tracker.server.services.block_format import decode_floats, decode_steps


class ExperimentCohort:
    """Implements :class:`plateau_tracker.server.policy.Cohort` over the database for one run being judged.

    Semantics match the replay's: a finished run is one that is no longer running and was not pruned;
    a finished run that the policy stopped early counts at later steps with its last value. The finished
    runs' values are read from the experiment's cohort view
    (:mod:`plateau_tracker.server.services.cohort_view`), whose index holds them sorted by step and value: the
    cut at a step costs two index reads, not a decoded block per run.
    """

    def __init__(self, session: Session, run: models.Run, monitor_id: int) -> None:
        self._session = session
        self._run = run
        self._monitor_id = monitor_id
        self._cache: dict[tuple[int, bool], list[float]] = {}
        self._rungs: dict[int, bool] = {}
        self.missing_rungs: set[int] = set()
        """Rung steps judged without a view: :func:`plateau_tracker.server.services.rung_view.build` them
        after commit."""
        self._finished: int | None = None
        self._viewed = False

    def _others(self) -> list[ColumnElement[bool]]:
        r = models.Run
        return [r.experiment_id == self._run.experiment_id, r.id != self._run.id]

    def finished_at_least(self, count: int) -> bool:
        if count <= 0:
            return True
        if self._finished is None or self._finished < count:
            # Counted up to `count` only: past it, the answer cannot change (the experiment's other
            # finished runs are not walked).
            finished: int = self._session.execute(
                _FINISHED_UP_TO, {**self._ids(), "count": count}
            ).scalar_one()
            self._finished = finished
        return self._finished >= count

    def _ids(self) -> dict[str, int]:
        return {"experiment_id": self._run.experiment_id, "run_id": self._run.id, "key_id": self._monitor_id}

    def values_at(self, step: int, *, finished_only: bool) -> list[float]:
        key = (step, finished_only)
        if key not in self._cache:
            if finished_only:
                self._ensure_view()
                viewed = self._session.execute(_VIEWED, {**self._ids(), "step": step})
                self._cache[key] = [value for (value,) in viewed]
            else:
                self._cache[key] = self._load(step)
        return self._cache[key]

    def cut_at(self, step: int, q: float) -> tuple[float, int] | None:
        self._ensure_view()
        ids = {**self._ids(), "step": step}

        def ranked(offset: int, limit: int) -> list[float]:
            return list(
                self._session.execute(_VIEWED_RANKED, {**ids, "offset": offset, "limit": limit}).scalars()
            )

        return _cut(self._session.execute(_VIEWED_COUNT, ids).scalar_one(), ranked, q)

    def _ensure_view(self) -> None:
        if not self._viewed:
            cohort_view.ensure(self._session, self._run.experiment_id, self._monitor_id)
            self._viewed = True

    def cut_from(self, step: int, q: float) -> tuple[float, int] | None:
        if self._rung_viewed(step):
            viewed = rung_view.values(
                self._session, self._run.experiment_id, self._monitor_id, step, without=self._run.id
            )
            return self._ranked_cut(viewed, viewed.order_by(models.RungValue.value), q)
        # No view of this rung yet: judged from the points (exactly as the view would), and the view is
        # built once this transaction has committed (:attr:`missing_rungs`).
        self.missing_rungs.add(step)
        scanned = rung_view.scan(self._session, self._run.experiment_id, self._monitor_id, step)
        found = sorted(
            value for run_id, _, value in scanned if run_id != self._run.id and math.isfinite(value)
        )
        return cut_of(found, q)

    def _ranked_cut(
        self,
        values: Select[float | None] | CompoundSelect[float],
        ordered: Select[float | None] | CompoundSelect[float],
        q: float,
    ) -> tuple[float, int] | None:
        """The ``q`` quantile of ``values`` and their count, from a view's index (``ordered`` reads them in
        value order): see :func:`_cut`."""
        count = self._session.execute(select(func.count()).select_from(values.subquery())).scalar_one()

        def ranked(offset: int, limit: int) -> list[float]:
            return list(self._session.execute(ordered.offset(offset).limit(limit)).scalars())

        return _cut(count, ranked, q)

    def _rung_viewed(self, step: int) -> bool:
        if step not in self._rungs:
            self._rungs[step] = rung_view.exists(
                self._session, self._run.experiment_id, self._monitor_id, step
            )
        return self._rungs[step]

    def _load(self, step: int) -> list[float]:
        """Every other run's value at exactly ``step`` (running, finished or pruned)."""
        mb, r = models.MetricBlock, models.Run
        on_monitor = and_(mb.run_id == r.id, mb.key_id == self._monitor_id, mb.rank == 0)
        exact = self._session.execute(
            select(mb.step_data, mb.value_data)
            .join(r, on_monitor)
            .where(*self._others(), mb.block == step // BLOCK_STEPS)
        )
        values = []
        for step_data, value_data in exact:
            steps = decode_steps(step_data)
            index = int(np.searchsorted(steps, step))
            if index < len(steps) and steps[index] == step:
                values.append(float(decode_floats(value_data)[index]))
        return sorted(v for v in values if math.isfinite(v))


def _cut(count: int, ranked: Callable[[int, int], list[float]], q: float) -> tuple[float, int] | None:
    """The ``q`` quantile of ``count`` values and their count: a walk to the rank inside the database
    (``ranked(offset, limit)`` reads that many in value order), so only the two values the quantile lies
    between come back."""
    if count == 0:
        return None
    low, high, fraction = quantile_ranks(count, q)
    values = ranked(low, high - low + 1)
    return interpolate(values[0], values[-1], fraction), count


# The statements of every judgement, built once with bound parameters and over the tables' columns:
# building them (the comparisons, the union, the subqueries) cost more than the database's work on the
# view's index, and running them through the ORM about as much again.
def _viewed_values() -> CompoundSelect[float]:
    """The finished runs' values at ``:step`` from the experiment's view (``:experiment_id``, ``:key_id``),
    the run being judged (``:run_id``) left out: recorded there, or carried past a stop."""
    value = models.table_of(models.CohortValue).c
    carry = models.table_of(models.CohortCarry).c
    recorded = select(value.value).where(
        value.experiment_id == bindparam("experiment_id"),
        value.key_id == bindparam("key_id"),
        value.step == bindparam("step"),
        value.run_id != bindparam("run_id"),
    )
    carried = select(carry.value).where(
        carry.experiment_id == bindparam("experiment_id"),
        carry.key_id == bindparam("key_id"),
        carry.after_step < bindparam("step"),
        carry.run_id != bindparam("run_id"),
    )
    return union_all(recorded, carried)


def _finished_up_to() -> Select[int]:
    """How many of the experiment's other runs are finished, counted up to ``:count``."""
    r = models.table_of(models.Run).c
    others = [r.experiment_id == bindparam("experiment_id"), r.id != bindparam("run_id")]
    enough = select(r.id).where(*others, *cohort_view.finished_condition(r)).limit(bindparam("count"))
    return select(func.count()).select_from(enough.subquery())


_VIEWED = _viewed_values().order_by(literal_column("value"))
_VIEWED_COUNT = select(func.count()).select_from(_viewed_values().subquery())
_VIEWED_RANKED = _VIEWED.offset(bindparam("offset")).limit(bindparam("limit"))
_FINISHED_UP_TO = _finished_up_to()
