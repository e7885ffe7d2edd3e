"""A run that passes its planned end: the plan stops holding at the first step past it (the engine judges
the run as one with no plan from there), and the tracker says so once, as an alert."""

from __future__ import annotations

import logging
import math

import httpx
import pytest

import plateau_tracker as plateau
import plateau_tracker._init as sdk_init
from plateau_tracker.server.policy import Context, Observation, evaluate, initial_states
from plateau_tracker.server.policy.presets import preset
from tests._server import TrackerProcess, free_port

POLICY = preset("default", monitor="val/acc", mode="max")
# An accuracy on 1,000 validation samples that climbs for 20 epochs of 40 and then creeps.
ACCURACY = [round((0.1 + 0.85 * (1 - math.exp(-epoch / 3))) * 1000) / 1000 for epoch in range(40)]


def stops(observations: list[Observation], planned: int | None, *, batch: int) -> list[tuple[int, str]]:
    states = initial_states(POLICY)
    made = []
    for start in range(0, len(observations), batch):
        evaluation = evaluate(
            POLICY, states, observations[start : start + batch], Context(planned_steps=planned)
        )
        states = evaluation.states
        made += [(v.step, v.rule) for v in evaluation.verdicts if v.action == "stop"]
        if evaluation.stop_step is not None:
            break
    return made


def test_a_plan_given_in_epochs_to_a_run_that_logs_batches_is_not_read_as_no_time_left() -> None:
    """Planned for 39 epochs, logged at batch 100 x epoch: read as it stood, the plan would leave the run no
    doubling from step 100 on. Past its plan the run is judged as one with none, in batches of any size."""
    in_batches = [Observation(100 * epoch, value, 0.0) for epoch, value in enumerate(ACCURACY)]
    unplanned = stops(in_batches, None, batch=40)
    assert stops(in_batches, 39, batch=40) == unplanned
    assert stops(in_batches, 39, batch=1) == unplanned
    assert stops(in_batches, 39, batch=7) == unplanned
    assert not unplanned or unplanned[0][0] >= 100 * 30
    # The plan still holds up to its own step: in epochs, the run is judged against it.
    in_epochs = [Observation(epoch, value, 0.0) for epoch, value in enumerate(ACCURACY)]
    assert stops(in_epochs, 39, batch=40) != stops(in_epochs, None, batch=40)


def test_the_tracker_says_once_that_a_run_passed_its_plan(
    tracker: TrackerProcess, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An alert at the first step past the plan, once; a warning in the training process, once; a warning
    on the dashboard's run page. A run within its plan hears nothing."""
    caplog.set_level(logging.WARNING, logger="plateau")
    rules = [{"rule": "checkpoint"}]
    alerts, runs = {}, {}
    for planned, last in ((5, 9), (20, 9)):
        with plateau.init(
            project="plan", monitor="val/acc", rules=rules, planned_steps=planned, url=tracker.url
        ) as run:
            for step in range(last + 1):
                run.log({"val/acc": 0.5 + step / 100}, step=step)
                run.should_checkpoint()
        runs[planned] = run.id
        decisions = httpx.get(f"{tracker.url}/api/v1/runs/{run.id}/decisions").json()["data"]
        alerts[planned] = [d for d in decisions if d["action"] == "alert"]
    assert [(a["rule"], a["step"]) for a in alerts[5]] == [("plan_passed", 6)]
    assert "past the run's planned end (planned_steps 5)" in alerts[5][0]["reason"]
    assert alerts[5][0]["evidence"] == {"monitor": "val/acc", "step": 6, "planned_steps": 5}
    assert alerts[20] == []
    said = [r.getMessage() for r in caplog.records if "planned end" in r.getMessage()]
    assert said == [f"plateau: {alerts[5][0]['reason']}"]

    pytest.importorskip("streamlit")
    from tests.test_dashboard import page

    app = page("run", tracker, monkeypatch)
    app.query_params["run"] = str(runs[5])
    app.run()
    assert not app.exception
    assert any("The plan no longer holds: val/acc was logged at step 6" in w.value for w in app.warning)


def test_the_default_policy_without_a_plan_is_said_once_a_process(monkeypatch, caplog) -> None:
    """The default rules judge a run against its plan: ``plateau.init`` without ``planned_steps`` warns, once
    a process (a sweep's runs share one reason); with a plan, or with rules of the loop's own, it does not."""
    monkeypatch.setattr(sdk_init, "_said_no_plan", False)
    caplog.set_level(logging.WARNING, logger="plateau")
    url = f"http://127.0.0.1:{free_port()}"  # nothing there: init goes on without waiting for it
    own = [{"rule": "patience", "patience": 5}]
    for options in ({"planned_steps": 80}, {"rules": own}, {}, {}):
        run = plateau.init(project="plan", monitor="val/acc", url=url, wait=0, spool=False, **options)
        run.finish(timeout=0)
    said = [r.getMessage() for r in caplog.records if "no planned_steps given" in r.getMessage()]
    assert len(said) == 1
    assert "pass planned_steps=N" in said[0]
