"""The rung views that ``asha`` reads (each run's value at its first point at or after a rung, from an
index) agree with the runs' points as the API stored them: views built by asha judgements through ingest
and directly, runs that reach a rung before and after the build, late points before the one recorded, a
non-finite first point past the rung (outside the top, and not replaced by a later point), runs without a
policy. On SQLite and on PostgreSQL, where a build and the batches of its experiment are ordered by an
advisory lock: 4 workers log while asha judgements build views."""

from __future__ import annotations

import math
import random
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from plateau_tracker.server.config import Settings
from plateau_tracker.server.db import models
from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.db.migrate import upgrade
from plateau_tracker.server.policy import cut_of
from plateau_tracker.server.services import rung_view
from plateau_tracker.server.services.cohort import ExperimentCohort
from tests._server import TrackerProcess
from tests.test_cohort_view import KEY, _Experiment, in_process

# Rungs at 1, 2, 4, 8, 16, 32: a run is judged at its first point at or after each.
ASHA = {"monitor": KEY, "mode": "max", "rules": [{"rule": "asha", "min_step": 1, "reduction_factor": 2}]}
LAST_STEP = 40


def _curve(rng: random.Random) -> dict[int, float]:
    """Points every few steps from a random start, some of them NaN or infinite."""
    every, start = rng.randint(1, 5), rng.randint(0, 6)
    top = rng.uniform(0.3, 0.9)
    values = {
        step: round(top * (1 - math.exp(-step / rng.uniform(2, 10))) + rng.gauss(0, 0.02), 3)
        for step in range(start, rng.randint(start + 1, LAST_STEP), every)
    }
    for step in rng.sample(sorted(values), k=min(2, len(values))):
        values[step] = rng.choice([math.nan, math.inf, -math.inf, values[step]])
    return values


def _expected_from(experiment: _Experiment, step: int, leaving_out: int) -> list[float]:
    """Each other run's first sent value at or after ``step`` (the first value of a step wins), if finite."""
    values = []
    for run_id, points in experiment.sent.items():
        later = [s for s in points if s >= step]
        if run_id != leaving_out and later:
            values.append(points[min(later)])
    return sorted(v for v in values if math.isfinite(v))


def _log_in_parts(experiment: _Experiment, run_id: int, curve: dict[int, float], rng: random.Random) -> None:
    """The curve in two batches, the later steps first now and then: late points before a recorded one."""
    steps = sorted(curve)
    cut = rng.randint(0, len(steps))
    parts = [steps[:cut], steps[cut:]]
    if rng.random() < 0.4:
        parts.reverse()
    for part in parts:
        if part:
            experiment.log(run_id, {step: curve[step] for step in part})


def _check(experiment: _Experiment, database: Database, viewed: set[int]) -> None:
    judged = experiment.run(None)
    with database.session(write=True) as session:
        run = session.get(models.Run, judged)
        assert run is not None
        key_id = session.execute(select(models.MetricKey.id).where(models.MetricKey.name == KEY)).scalar_one()
        views = set(
            session.execute(
                select(models.RungView.rung_step).where(models.RungView.experiment_id == run.experiment_id)
            ).scalars()
        )
        assert views, "no asha judgement built a view"
        assert viewed <= views, (viewed, views)
        cohort = ExperimentCohort(session, run, key_id)
        for step in range(LAST_STEP + 2):
            expected = _expected_from(experiment, step, leaving_out=judged)
            for q in (0.0, 0.01, 0.25, 0.5, 2 / 3, 0.9, 1.0):
                assert cohort.cut_from(step, q) == cut_of(expected, q), (step, q, step in views)
        # Steps without a view were judged from the points, and are named for a build.
        assert cohort.missing_rungs == set(range(LAST_STEP + 2)) - views
    del experiment.sent[judged]


def _scenario(experiment: _Experiment, rng: random.Random, database: Database) -> None:
    for index in range(10):
        run_id = experiment.run(ASHA if index % 3 else None)
        _log_in_parts(experiment, run_id, _curve(rng), rng)
    # The asha runs' judgements built views of the rungs they were judged at (which depends on the curves).
    _check(experiment, database, viewed=set())
    for step in (3, 5, 13):
        rung_view.build(database, experiment.name_id(), experiment.key_id(), step)
    for index in range(8):
        run_id = experiment.run(ASHA if index % 2 else None)
        _log_in_parts(experiment, run_id, _curve(rng), rng)
    # Late points, before the first recorded past a rung, and a NaN first past one.
    first = next(iter(experiment.sent))
    experiment.log(first, {0: 0.42, 3: math.nan, LAST_STEP + 1: 0.5})
    _check(experiment, database, viewed={3, 5, 13})


class _Sweep(_Experiment):
    def __init__(self, client: TestClient | httpx.Client, database: Database, name: str = "rungs") -> None:
        super().__init__(client, name)
        self.database = database

    def name_id(self) -> int:
        with self.database.session() as session:
            return session.execute(
                select(models.Experiment.id).where(models.Experiment.name == self.name)
            ).scalar_one()

    def key_id(self) -> int:
        with self.database.session() as session:
            return session.execute(
                select(models.MetricKey.id).where(models.MetricKey.name == KEY)
            ).scalar_one()


def _agrees(settings: Settings, seed: int) -> None:
    in_process(
        settings, lambda client, database: _scenario(_Sweep(client, database), random.Random(seed), database)
    )


def test_rung_views_agree_with_the_stored_runs_on_sqlite(tmp_path: Path) -> None:
    _agrees(Settings(home=tmp_path), seed=3)


@pytest.mark.postgres
def test_rung_views_agree_with_the_stored_runs_on_postgresql(tmp_path: Path, postgres_url: str) -> None:
    upgrade(postgres_url)
    _agrees(Settings(home=tmp_path, database_url=postgres_url), seed=5)


@pytest.mark.slow
@pytest.mark.postgres
def test_rung_views_stay_exact_while_runs_log_during_their_build(tmp_path: Path, postgres_url: str) -> None:
    """4 workers on PostgreSQL: runs reach rungs while asha judgements build those rungs' views (a build
    that missed a batch committing beside it would show here)."""
    upgrade(postgres_url)
    server = TrackerProcess(tmp_path, database_url=postgres_url, workers=4)
    database = Database(postgres_url)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for round_ in range(3):
                rng = random.Random(round_)
                experiment = _Sweep(client, database, name=f"race-{round_}")
                runs = [experiment.run(ASHA if i % 2 else None) for i in range(24)]
                work = []
                for run_id in runs:
                    curve = _curve(rng)
                    steps = sorted(curve)
                    work += [partial(experiment.log, run_id, {s: curve[s]}) for s in steps]
                rng.shuffle(work)
                with ThreadPoolExecutor(12) as pool:
                    list(pool.map(lambda job: job(), work))
                _check(experiment, database, viewed=set())
    finally:
        database.dispose()
        server.stop()
