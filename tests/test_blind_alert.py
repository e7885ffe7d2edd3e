"""A run under the default policy that logs neither a learning rate nor a validation loss is held to half
its plan instead of a quarter while it shows evidence of learning (``outlook``'s blind hold): the tracker
says so once, where that hold first holds the run back, and the training process and the dashboard say it
too."""

from __future__ import annotations

import logging

import httpx
import pytest

import plateau_tracker as plateau
from tests._server import TrackerProcess

# An accuracy on 30 samples that climbs to 20/30 and stays there.
FROZEN = [k / 30 for k in [10, 14, 17, 19] + [20] * 26]


def test_a_blind_run_is_told_in_the_training_process_and_on_the_dashboard(
    tracker: TrackerProcess, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="plateau")
    alerts, runs = {}, {}
    for logs_rate in (False, True):
        with plateau.init(project="blind", monitor="val/acc", planned_steps=59, url=tracker.url) as run:
            for step, value in enumerate(FROZEN):
                run.log({"val/acc": value, **({"lr": 0.1} if logs_rate else {})}, step=step)
                run.should_stop()
        runs[logs_rate] = run.id
        decisions = httpx.get(f"{tracker.url}/api/v1/runs/{run.id}/decisions").json()["data"]
        alerts[logs_rate] = [d for d in decisions if d["action"] == "alert"]
    assert [(a["rule"], a["step"]) for a in alerts[False]] == [("blind", 15)]
    reason = alerts[False][0]["reason"]
    assert (
        "outlook judges this run from 0.5 of its plan (step 30) while it still learns, "
        "not from 0.25 (step 15)"
    ) in reason
    assert alerts[True] == []  # a rate logged: judged from a quarter, nothing to say
    said = [r.getMessage() for r in caplog.records if "neither a learning rate" in r.getMessage()]
    assert said == [f"plateau: {reason}"]

    pytest.importorskip("streamlit")
    from tests.test_dashboard import page

    app = page("run", tracker, monkeypatch)
    app.query_params["run"] = str(runs[False])
    app.run()
    assert not app.exception
    assert any(
        w.value.startswith(
            "Judged late: no learning rate or validation loss is logged: neither a learning rate"
        )
        for w in app.warning
    ), [w.value for w in app.warning]
