"""The cohort view that ``percentile`` reads (finished runs' values per step, from an index) agrees with the
finished runs' points as the API stored them, whatever happened to those runs and in whatever order: runs
that finish before and after the view is built, runs stopped early (carried past their stop with their
last value), runs pruned (left out), runs that get points or a stop after they finished, NaN and inf.
On SQLite and on PostgreSQL (read committed, where the build and a finish take the experiment's lock)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from plateau_tracker.server.app import create_app
from plateau_tracker.server.config import Settings
from plateau_tracker.server.db import models
from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.db.migrate import upgrade
from plateau_tracker.server.policy import cut_of
from plateau_tracker.server.services.cohort import ExperimentCohort
from tests._server import TrackerProcess

KEY = "val/acc"
STEPS = 12
PATIENCE = {"monitor": KEY, "mode": "max", "rules": [{"rule": "patience", "patience": 3}]}
# Prunes whatever is below the best finished run at a step, from the first evaluation.
PRUNE = {
    "monitor": KEY,
    "mode": "max",
    "rules": [{"rule": "percentile", "percentile": 1.0, "n_startup_runs": 1}],
}
# A policy that stops at a value only a late point reaches (a stop after the run finished).
THRESHOLD = {"monitor": KEY, "mode": "max", "rules": [{"rule": "threshold", "stop_at": 5.0}]}


class _Experiment:
    """Runs made through the API, with what was sent to each (the first value of a step wins)."""

    def __init__(self, client: TestClient | httpx.Client, name: str = "sweep") -> None:
        self.client = client
        self.name = name
        self.sent: dict[int, dict[int, float]] = {}

    def run(self, policy: dict[str, Any] | None) -> int:
        body: dict[str, Any] = {"project": "p", "experiment": self.name}
        if policy is not None:
            body["policy"] = policy
        created = self.client.post("/api/v1/runs", json=body)
        assert created.status_code == 201, created.text
        run_id: int = created.json()["id"]
        self.sent[run_id] = {}
        return run_id

    def log(self, run_id: int, points: dict[int, float]) -> None:
        batch = [{"key": KEY, "step": step, "value": _wire(value)} for step, value in points.items()]
        answer = self.client.post(
            f"/api/v1/runs/{run_id}/metrics", json={"batch_id": f"b{random.random()}", "points": batch}
        )
        assert answer.status_code == 200, answer.text
        for step, value in points.items():
            self.sent[run_id].setdefault(step, value)

    def finish(self, run_id: int, status: str = "finished") -> None:
        answer = self.client.post(f"/api/v1/runs/{run_id}/finish", json={"status": status})
        assert answer.status_code == 200, answer.text

    def finished_runs(self, leaving_out: int) -> int:
        runs = [
            self.client.get(f"/api/v1/runs/{run_id}").json() for run_id in self.sent if run_id != leaving_out
        ]
        return sum(
            run["status"] != "running" and run["stop_rule"] not in ("percentile", "asha") for run in runs
        )

    def expected_at(self, step: int, leaving_out: int) -> list[float]:
        """The finished, unpruned runs' finite values at ``step``, from what was sent and what the API says
        of each run: recorded there, or the last value of a run stopped before ``step``."""
        values = []
        for run_id, points in self.sent.items():
            run = self.client.get(f"/api/v1/runs/{run_id}").json()
            if (
                run_id == leaving_out
                or run["status"] == "running"
                or run["stop_rule"] in ("percentile", "asha")
            ):
                continue
            if step in points:
                values.append(points[step])
            elif points and run["stop_step"] is not None and max(run["stop_step"], max(points)) < step:
                values.append(points[max(points)])
        return sorted(v for v in values if math.isfinite(v))


def _wire(value: float) -> float | str:
    """NaN and +-inf as the API spells them."""
    if math.isnan(value):
        return "NaN"
    return value if math.isfinite(value) else ("Infinity" if value > 0 else "-Infinity")


def _curve(rng: random.Random) -> dict[int, float]:
    top = rng.uniform(0.3, 0.9)
    values = {
        step: round(top * (1 - math.exp(-step / rng.uniform(1, 6))) + rng.gauss(0, 0.02), 3)
        for step in range(rng.randint(3, STEPS))
    }
    for step in rng.sample(sorted(values), k=min(2, len(values))):
        values[step] = rng.choice([math.nan, math.inf, -math.inf, values[step]])
    return values


def _build_and_change(experiment: _Experiment, rng: random.Random, database: Database) -> None:
    """Finished, stopped and pruned runs; the view built midway; then more of each, and late changes."""
    early = []
    for index in range(8):
        run_id = experiment.run(PATIENCE if index % 2 else None)
        experiment.log(run_id, _curve(rng))
        experiment.finish(run_id, rng.choice(["finished", "stopped", "failed"]))
        early.append(run_id)
    _check(experiment, database)  # builds the view from the runs so far
    for policy in (PATIENCE, PRUNE, None, PATIENCE, PRUNE, None):
        run_id = experiment.run(policy)
        curve = _curve(rng)
        if policy is PRUNE:  # below every finished run: pruned at its first evaluation
            curve = {step: value - 10 for step, value in curve.items()}
        experiment.log(run_id, curve)
        if rng.random() < 0.8:
            experiment.finish(run_id)
    # Points after the finish: a step not logged before, and a step logged before (the first value wins).
    experiment.log(early[0], {STEPS + 3: 0.95, 0: 0.0})
    # A stop after the finish: the run is now carried past it.
    late_stopper = experiment.run(THRESHOLD)
    experiment.log(late_stopper, {0: 0.5, 1: 0.6})
    experiment.finish(late_stopper)
    experiment.log(late_stopper, {2: 7.0})
    assert experiment.client.get(f"/api/v1/runs/{late_stopper}").json()["stop_step"] == 2
    runs = experiment.client.get("/api/v1/runs", params={"experiment": experiment.name}).json()["data"]
    stops = [(run["status"], run["stop_rule"]) for run in runs]
    # The cases the view must get right all occurred: pruned, stopped early and finished, still running.
    assert any(rule == "percentile" for _, rule in stops), stops
    assert any(status != "running" and rule == "patience" for status, rule in stops), stops
    assert any(status == "running" for status, _ in stops), stops


def _check(experiment: _Experiment, database: Database) -> None:
    judged = experiment.run(None)  # running: not among the finished, and left out of its own cohort
    with database.session(write=True) as session:
        run = session.get(models.Run, judged)
        assert run is not None
        key_id = session.execute(select(models.MetricKey.id).where(models.MetricKey.name == KEY)).scalar_one()
        cohort = ExperimentCohort(session, run, key_id)
        finished = experiment.finished_runs(leaving_out=judged)
        assert cohort.finished_at_least(finished)
        assert not cohort.finished_at_least(finished + 1)
        for step in range(STEPS + 5):
            expected = experiment.expected_at(step, leaving_out=judged)
            assert cohort.values_at(step, finished_only=True) == expected, step
            for q in (0.0, 0.01, 0.25, 0.5, 0.9, 1.0):
                assert cohort.cut_at(step, q) == cut_of(expected, q), (step, q)
        assert session.get(models.CohortView, (run.experiment_id, key_id)) is not None  # read from the view
    del experiment.sent[judged]


def in_process(settings: Settings, scenario: Callable[[TestClient, Database], None]) -> None:
    """Run ``scenario`` through an in-process app on ``settings``' store, with the store at hand."""
    database = Database(settings.resolved_database_url())
    try:
        with TestClient(
            create_app(settings), base_url="http://localhost", client=("127.0.0.1", 50000)
        ) as client:
            scenario(client, database)
    finally:
        database.dispose()


def _agrees(settings: Settings, seed: int) -> None:
    """The scenario, then the view checked against it."""

    def scenario(client: TestClient, database: Database) -> None:
        experiment = _Experiment(client)
        _build_and_change(experiment, random.Random(seed), database)
        _check(experiment, database)

    in_process(settings, scenario)


def test_the_view_agrees_with_the_stored_runs_on_sqlite(tmp_path: Path) -> None:
    _agrees(Settings(home=tmp_path), seed=7)


@pytest.mark.postgres
def test_the_view_agrees_with_the_stored_runs_on_postgresql(tmp_path: Path, postgres_url: str) -> None:
    upgrade(postgres_url)
    _agrees(Settings(home=tmp_path, database_url=postgres_url), seed=11)


@pytest.mark.slow
@pytest.mark.postgres
def test_the_view_stays_exact_while_runs_finish_during_its_build(tmp_path: Path, postgres_url: str) -> None:
    """4 workers on PostgreSQL: runs finish while judged runs build the view and read it, concurrently
    (a build that missed a finishing run, or two that both built, would show here)."""
    upgrade(postgres_url)
    server = TrackerProcess(tmp_path, database_url=postgres_url, workers=4)
    judging = {**PRUNE, "rules": [{"rule": "percentile", "percentile": 50.0, "n_startup_runs": 0}]}
    database = Database(postgres_url)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for round_ in range(3):
                rng = random.Random(round_)
                experiment = _Experiment(client, name=f"race-{round_}")
                finishing = [experiment.run(PATIENCE if i % 2 else None) for i in range(16)]
                for run_id in finishing:
                    experiment.log(run_id, _curve(rng))
                judges = [experiment.run(judging) for _ in range(8)]
                high = {step: 2.0 for step in range(STEPS)}
                work = [partial(experiment.finish, r) for r in finishing]
                work += [partial(experiment.log, r, high) for r in judges]
                rng.shuffle(work)
                with ThreadPoolExecutor(12) as pool:
                    list(pool.map(lambda job: job(), work))
                for run_id in judges:
                    del experiment.sent[run_id]  # running: not in anyone's cohort
                _check(experiment, database)
    finally:
        database.dispose()
        server.stop()
