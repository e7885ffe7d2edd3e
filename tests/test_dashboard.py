"""Every dashboard page under Streamlit's AppTest, against a real tracker with seeded runs (no API mocks)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from tests.conftest import create_run

PAGES = Path(__file__).resolve().parents[1] / "dashboard" / "views"


@pytest.fixture(scope="module")
def seeded(tracker) -> dict[str, int]:
    """A sweep of three runs (one stopped early by patience), distributed figures, complexity figures."""
    experiment = f"dash-{uuid.uuid4().hex[:6]}"
    ids = {}
    with httpx.Client(base_url=tracker.url, timeout=30) as client:
        policy = {
            "monitor": "val/loss",
            "mode": "min",
            "rules": [{"rule": "patience", "patience": 3}, {"rule": "checkpoint"}],
        }
        for name, curve, lr in (
            ("early", [1.0, 0.6, 0.5, 0.55, 0.56, 0.57], 0.1),
            ("steady", [1.0, 0.8, 0.6, 0.4, 0.3, 0.2], 0.01),
            ("slow", [1.0, 0.95, 0.9, 0.85, 0.8, 0.75], 0.001),
        ):
            run = create_run(
                client,
                policy,
                project="dash",
                experiment=experiment,
                name=name,
                config={"lr": lr},
                planned_steps=20,
            )
            points = [{"key": "val/loss", "step": s, "value": v} for s, v in enumerate(curve)]
            points += [{"key": "complexity/params", "step": 0, "value": 1000.0 / lr}]
            points += [
                {"key": f"dist/{k}", "step": s, "value": v, "rank": r}
                for s in range(5)
                for r, (k, v) in enumerate([("rel_perf", 1.0), ("rel_perf", 0.4)])
            ]
            client.post(f"/api/v1/runs/{run['id']}/metrics", json={"batch_id": "b", "points": points})
            client.patch(
                f"/api/v1/runs/{run['id']}/summary",
                json={
                    "summary": {
                        "flops_per_sample": 2e6 * len(name),
                        "latency_ms_batch1": 0.5,
                        "device": "cpu",
                    }
                },
            )
            client.post(
                f"/api/v1/runs/{run['id']}/finish",
                json={"status": "stopped" if name == "early" else "finished"},
            )
            ids[name] = run["id"]
    ids["experiment"] = experiment  # type: ignore[assignment]
    return ids


def page(name: str, tracker, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("PLATEAU_URL", tracker.url)
    app = AppTest.from_file(str(PAGES / f"{name}.py"), default_timeout=60)
    return app


def test_runs_page_lists_runs_with_the_decision_that_ended_them(seeded, tracker, monkeypatch) -> None:
    app = page("runs", tracker, monkeypatch)
    app.run()
    assert not app.exception
    app.selectbox[0].select("dash").run()
    table = app.dataframe[0].value
    assert {"early", "steady", "slow"} <= set(table["name"])
    early = table[table["name"] == "early"].iloc[0]
    assert early["ended by"] == "patience"
    assert "has not improved" in early["why"]
    assert early["best step"] == 2
    assert early["compute saved"] == pytest.approx(1 - 5 / 20)  # stopped at step 5 of a planned 20


def test_run_page_draws_curves_with_stop_and_checkpoint_markers(seeded, tracker, monkeypatch) -> None:
    app = page("run", tracker, monkeypatch)
    app.query_params["run"] = str(seeded["early"])
    app.run()
    assert not app.exception
    assert any("Stopped at step 5 by patience" in e.value for e in app.error)
    charts = app.get("vega_lite_chart")
    assert charts
    spec = json.dumps(json.loads(charts[0].proto.spec))
    assert "checkpoint" in spec
    assert "stop" in spec
    assert list(app.dataframe[0].value["action"]) == ["checkpoint", "checkpoint", "checkpoint", "stop"]


def test_compare_page_tabulates_hyperparameters_and_sensitivity(seeded, tracker, monkeypatch) -> None:
    app = page("compare", tracker, monkeypatch)
    app.run()
    assert not app.exception
    app.selectbox[0].set_value(("dash", seeded["experiment"])).run()
    assert not app.exception
    table = app.dataframe[0].value
    assert "config.lr" in table.columns
    assert app.dataframe[1].value["hyperparameter"].tolist() == ["lr"]


def test_distributed_page_names_the_straggler(seeded, tracker, monkeypatch) -> None:
    app = page("distributed", tracker, monkeypatch)
    app.run()
    target = next(o for o in app.selectbox[0].options if o.startswith(f"#{seeded['steady']} "))
    app.selectbox[0].select(target).run()
    assert not app.exception
    assert any("rank 1 is the straggler" in w.value for w in app.warning)


def test_complexity_page_plots_runs_against_their_best(seeded, tracker, monkeypatch) -> None:
    app = page("complexity", tracker, monkeypatch)
    app.run()
    app.selectbox[0].set_value(("dash", seeded["experiment"])).run()
    assert not app.exception
    table = app.dataframe[0].value.set_index("run")
    assert len(table) == 3
    early = table.loc[f"#{seeded['early']} early"]
    # Reported by the trainer (summary), logged as a metric (complexity/params), derived (time to best).
    assert early["flops_per_sample"] == 2e6 * len("early")
    assert early["params"] == 1000.0 / 0.1
    assert early["best"] == 0.5
    assert early["time_to_best_s"] >= 0
    assert "device" not in table.columns  # not a number
    assert app.selectbox[1].value == "params"
    assert app.get("vega_lite_chart")


def test_pages_say_clearly_when_the_tracker_is_away(monkeypatch) -> None:
    monkeypatch.setenv("PLATEAU_URL", "http://127.0.0.1:9")
    app = AppTest.from_file(str(PAGES / "runs.py"), default_timeout=30)
    app.run()
    assert not app.exception
    assert "Cannot reach the tracker" in app.error[0].value
