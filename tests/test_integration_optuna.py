"""PlateauPruner in a real Optuna ``Study``, against a real tracker: each trial a run of the study's
experiment, pruned where Plateau's cross-run rule says, each run ended as its trial ended."""

from __future__ import annotations

import logging
import uuid

import httpx
import pytest

optuna = pytest.importorskip("optuna")

from plateau_tracker.integrations.optuna import PlateauPruner  # noqa: E402
from tests._server import TrackerProcess  # noqa: E402

# Trials whose x is far from 0 are worse at every step: once 3 trials finished, the median of their values
# at a step prunes those worse than it.
XS = [0.1, 0.2, 0.3, 3.0, 0.05, 4.0, 5.0, 0.15]


def test_a_study_prunes_where_plateau_decides(
    tracker: TrackerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="plateau")
    name = f"study-{uuid.uuid4().hex[:6]}"
    pruner = PlateauPruner(
        project="optuna",
        rules=[{"rule": "percentile", "percentile": 50.0, "n_startup_runs": 3}],
        url=tracker.url,
        planned_steps=9,
    )
    study = optuna.create_study(study_name=name, direction="minimize", pruner=pruner)
    for x in XS:
        study.enqueue_trial({"x": x})

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", -10, 10)
        value = 0.0
        for step in range(10):
            value = x * x + 1.0 / (step + 1)
            trial.report(value, step)
            if trial.should_prune():
                raise optuna.TrialPruned
        return value

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study.optimize(objective, n_trials=len(XS), callbacks=[pruner])
    states = {t.number: t.state for t in study.trials}
    pruned = {n for n, s in states.items() if s == optuna.trial.TrialState.PRUNED}
    assert pruned == {3, 5, 6}  # x = 3, 4, 5: worse than the median at their first step
    runs = httpx.get(
        f"{tracker.url}/api/v1/runs", params={"project": "optuna", "experiment": name, "limit": 100}
    ).json()["data"]
    by_trial = {int(r["name"].removeprefix("trial-")): r for r in runs}
    assert sorted(by_trial) == list(range(len(XS)))  # one run per trial, in the study's experiment
    for number, run in by_trial.items():
        if number in pruned:
            assert (run["status"], run["stop_rule"], run["stop_step"]) == ("stopped", "percentile", 0)
        else:
            assert (run["status"], run["stop_step"]) == ("finished", None)
        assert run["config"] == {"x": XS[number], "plateau_context": run["config"]["plateau_context"]}
    assert "trial 3 pruned (percentile)" in caplog.text


def test_one_argument_is_enough_and_the_default_is_default_sweep(tracker: TrackerProcess) -> None:
    """``pruner=PlateauPruner(project=...)`` alone: the runs judge the default-sweep preset (cross-run
    pruning), and each trial's run is finished as its trial ended, without passing the pruner twice."""
    name = f"one-arg-{uuid.uuid4().hex[:6]}"
    pruner = PlateauPruner(project="optuna", url=tracker.url)
    study = optuna.create_study(study_name=name, direction="minimize", pruner=pruner)

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", -10, 10)
        for step in range(3):
            trial.report(x * x + 1.0 / (step + 1), step)
            if trial.should_prune():
                raise optuna.TrialPruned
        return x * x

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study.optimize(objective, n_trials=4)
    pruner.close()  # what the end of the process does: the last trial's run is finished too
    runs = httpx.get(
        f"{tracker.url}/api/v1/runs", params={"project": "optuna", "experiment": name, "limit": 100}
    ).json()["data"]
    assert len(runs) == 4
    assert all(run["status"] in ("finished", "stopped") for run in runs), [r["status"] for r in runs]
    rules = [rule["rule"] for rule in runs[0]["policy"]["rules"]]
    assert {"percentile", "asha"} <= set(rules)  # default-sweep, not the single-run default


def test_an_unknown_preset_is_refused_when_the_pruner_is_made() -> None:
    with pytest.raises(ValueError, match="unknown preset 'defualt-sweep'"):
        PlateauPruner(project="optuna", policy="defualt-sweep")
    rules = PlateauPruner(project="optuna", policy="patience-7").rules
    assert rules is not None
    assert {"rule": "patience", "patience": 7} in rules
