"""Every dashboard page under Streamlit's AppTest, against a real tracker with seeded runs (no API mocks)."""

from __future__ import annotations

import html
import json
import uuid
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pandas as pd
import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from plateau_tracker.dashboard import _api
from plateau_tracker.dashboard._views import LINE_COLOURS, MARKER_COLOURS, compute_saved, run_row
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
                config={"lr": lr, "tag": f"{name}-{lr}"},  # tag: unique per run, not a hyperparameter
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
    _api.st.cache_data.clear()  # the 2-second cache outlives an AppTest: what a test seeded just now shows
    app = AppTest.from_file(str(PAGES / f"{name}.py"), default_timeout=60)
    return app


def test_runs_page_lists_runs_with_the_decision_that_ended_them(seeded, tracker, monkeypatch) -> None:
    app = page("runs", tracker, monkeypatch)
    app.run()
    assert not app.exception
    app.selectbox[0].select("dash").run()
    app.selectbox[1].select(seeded["experiment"]).run()
    (table,) = app.get("html")
    header, *body = _cells(table.proto.body)
    assert header[:5] == ["run", "status", "ended by", "why", "compute saved"]
    rows = pd.DataFrame(body, columns=header).set_index("run")
    early = rows.loc[f"#{seeded['early']} early"]
    assert early["ended by"] == "patience"
    assert "has not improved" in early["why"]
    assert early["best step"] == "2"
    # Stopped at step 5 of a plan ending at step 20: 15 of 21 steps saved.
    assert early["compute saved"] == f"{100 * 15 / 21:.1f}%"
    steady = rows.loc[f"#{seeded['steady']} steady"]
    assert steady["ended by"] == "trainer"
    assert steady["why"] == "the trainer ended it (finished) at step 5"
    # Every run's name links to its page.
    assert (
        f'href="./run?run={seeded["early"]}" target="_self">#{seeded["early"]} early</a>' in table.proto.body
    )


def _cells(markup: str) -> list[list[str]]:
    """The text of every table row's cells, with the standard library's HTML parser."""

    class Rows(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.rows: list[list[str]] = []
            self.cell: list[str] | None = None

        def handle_starttag(self, tag: str, attrs: object) -> None:
            if tag == "tr":
                self.rows.append([])
            elif tag in ("td", "th"):
                self.cell = []

        def handle_endtag(self, tag: str) -> None:
            if tag in ("td", "th") and self.cell is not None:
                self.rows[-1].append("".join(self.cell).strip())
                self.cell = None

        def handle_data(self, data: str) -> None:
            if self.cell is not None:
                self.cell.append(data)

    parser = Rows()
    parser.feed(markup)
    return parser.rows


def test_run_rows_say_how_each_run_ended() -> None:
    base = {"id": 1, "name": "r", "experiment": "e", "decision": {}, "stop_step": None}
    budget = run_row({**base, "status": "finished", "judged_step": 59, "planned_steps": 59}, None)
    assert (budget["ended by"], budget["why"]) == ("budget", "ran its budget of 60 steps (to step 59)")
    assert budget["compute saved"] is None
    stop = {
        "action": "stop",
        "step": 19,
        "rule": "patience",
        "reason": "r",
        "best_step": 14,
        "best_value": 0.1,
    }
    stopped = run_row({**base, "status": "stopped", "judged_step": 19, "planned_steps": 59}, stop)
    assert stopped["compute saved"] == pytest.approx(40 / 60)  # the demo: 40 of 60 epochs saved
    assert (stopped["best step"], stopped["best value"]) == (14, 0.1)
    failed = run_row({**base, "status": "failed", "judged_step": 3, "planned_steps": None}, None)
    assert (failed["ended by"], failed["why"]) == ("failed", "the trainer reported it failed at step 3")
    running = run_row({**base, "status": "running", "judged_step": 3, "planned_steps": 9}, None)
    assert (running["ended by"], running["why"]) == ("", "running, step 3 of 9")
    assert compute_saved(5, 20) == pytest.approx(15 / 21)


def test_runs_page_asks_for_no_decisions_of_runs_stopped_last(seeded, tracker, monkeypatch) -> None:
    """The runs list carries each run's latest decision: a refresh is one request, not one per run."""
    calls: list[int] = []
    original = _api.decisions
    monkeypatch.setattr(_api, "decisions", lambda run_id: calls.append(run_id) or original(run_id))
    app = page("runs", tracker, monkeypatch)
    app.run()
    app.selectbox[0].select("dash").run()
    assert not app.exception
    assert calls == []


def test_runs_page_shows_a_page_at_a_time_filtered_by_the_tracker(tracker, monkeypatch) -> None:
    """A hundred runs a page, newest first, with Older/Newer by key; status and name filter in the
    tracker."""
    experiment = f"paged-{uuid.uuid4().hex[:6]}"
    with httpx.Client(base_url=tracker.url, timeout=30) as client:
        made = [
            client.post(
                "/api/v1/runs", json={"project": "paged", "experiment": experiment, "name": f"r{i}"}
            ).json()["id"]
            for i in range(105)
        ]
        for run_id in made[:3]:
            client.post(f"/api/v1/runs/{run_id}/finish", json={"status": "failed"})
    app = page("runs", tracker, monkeypatch)
    app.run()
    app.selectbox[0].select("paged").run()
    app.selectbox[1].select(experiment).run()
    assert not app.exception

    def shown() -> list[str]:
        (table,) = app.get("html")
        return [row[0] for row in _cells(table.proto.body)[1:]]

    newest = [f"#{made[i]} r{i}" for i in range(104, 4, -1)]
    assert shown() == newest
    assert "runs 1-100 of 105, newest first" in app.caption[-1].value
    app.button[1].click().run()  # Older
    assert shown() == [f"#{made[i]} r{i}" for i in range(4, -1, -1)]
    assert "runs 101-105 of 105" in app.caption[-1].value
    assert app.button[1].disabled
    app.button[0].click().run()  # Newer
    assert shown() == newest
    app.multiselect[0].select("failed").run()
    assert shown() == [f"#{made[i]} r{i}" for i in (2, 1, 0)]
    app.text_input[0].input("R1").run()  # a part of the name, any case
    assert shown() == [f"#{made[1]} r1"]


def test_run_page_draws_curves_with_stop_and_checkpoint_markers(seeded, tracker, monkeypatch) -> None:
    app = page("run", tracker, monkeypatch)
    app.query_params["run"] = str(seeded["early"])
    app.run()
    assert not app.exception
    # A stop is a decision the run asked for, said plainly: not an error.
    assert any("Stopped at step 5 by patience" in e.value for e in app.info)
    assert not app.error
    charts = app.get("vega_lite_chart")
    assert charts
    spec = json.dumps(json.loads(charts[0].proto.spec))
    assert "checkpoint" in spec
    assert "stop" in spec
    # The decisions, each reason whole (an HTML table wraps it; a data grid cut it).
    [table] = [h.proto.body for h in app.get("html") if "plateau-decisions" in h.proto.body]
    assert [row.count("<td") for row in table.split("<tr>")[2:]] == [6] * 4
    for action in ("checkpoint", "stop"):
        assert f'<td class="action">{action}</td>' in table
    stop_reason = httpx.get(f"{tracker.url}/api/v1/runs/{seeded['early']}/decision").json()["reason"]
    assert html.escape(stop_reason) in table
    layers = json.loads(charts[0].proto.spec)["layer"]
    assert layers[0]["mark"]["type"] == "line"
    markers = layers[1]["layer"]
    assert [m["mark"]["type"] for m in markers] == ["rule", "tick"]  # checkpoints: ticks on the axis
    # One legend: the decisions', shared by the stop rule and the checkpoint ticks; one curve has none.
    assert layers[0]["encoding"]["color"]["legend"] is None
    assert {json.dumps(m["encoding"]["color"], sort_keys=True) for m in markers} == {
        json.dumps(markers[0]["encoding"]["color"], sort_keys=True)
    }
    assert layers[0]["encoding"]["color"]["scale"]["range"] == LINE_COLOURS
    assert not set(LINE_COLOURS) & set(MARKER_COLOURS.values())


def test_run_page_opens_a_run_older_than_the_newest_hundred(tracker, monkeypatch) -> None:
    with httpx.Client(base_url=tracker.url, timeout=30) as client:
        oldest = client.post("/api/v1/runs", json={"project": "many", "name": "oldest"}).json()["id"]
        for index in range(100):
            client.post("/api/v1/runs", json={"project": "many", "name": f"later-{index}"})
    app = page("run", tracker, monkeypatch)
    app.query_params["run"] = str(oldest)
    app.run()
    assert not app.exception
    assert app.selectbox[0].value == f"#{oldest} oldest (many/default)"
    assert any(f"Run #{oldest} · oldest" in caption.value for caption in app.caption)
    assert len(app.selectbox[0].options) == 101  # the run asked for, and the newest 100


def test_run_page_says_when_the_run_asked_for_does_not_exist(seeded, tracker, monkeypatch) -> None:
    app = page("run", tracker, monkeypatch)
    app.query_params["run"] = "999999"
    app.run()
    assert not app.exception
    assert any("There is no run '999999'" in e.value for e in app.error)
    assert app.selectbox[0].value is None  # no other run shown in its place
    assert not app.get("vega_lite_chart")


def test_compare_page_tabulates_hyperparameters_and_sensitivity(seeded, tracker, monkeypatch) -> None:
    app = page("compare", tracker, monkeypatch)
    app.run()
    assert not app.exception
    app.selectbox[0].set_value(("dash", seeded["experiment"])).run()
    assert not app.exception
    table = app.dataframe[0].value
    assert list(table.columns[:2]) == ["run", "best"]  # the best value is never pushed off-screen
    assert "config.lr" in table.columns
    assert "config.tag" in table.columns
    # `tag` is unique per run: not ranked as a hyperparameter.
    assert app.dataframe[1].value["hyperparameter"].tolist() == ["lr"]


def test_distributed_page_names_the_straggler(seeded, tracker, monkeypatch) -> None:
    app = page("distributed", tracker, monkeypatch)
    app.run()
    app.selectbox[0].set_value(("dash", seeded["experiment"])).run()
    target = next(o for o in app.selectbox[1].options if o.startswith(f"#{seeded['steady']} "))
    app.selectbox[1].select(target).run()
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
    assert 0 <= early["time_to_first_best_s"] <= early["time_to_best_s"]
    assert "device" not in table.columns  # not a number
    assert app.selectbox[1].value == "params"
    (chart,) = app.get("vega_lite_chart")
    spec = json.loads(chart.proto.spec)
    assert app.title[0].value == "Complexity vs best value"
    assert spec["layer"][0]["encoding"]["y"]["title"] == "best val/loss (lower is better)"
    assert spec["layer"][1]["mark"]["type"] == "text"  # each point carries its run's label
    assert spec["layer"][1]["encoding"]["text"]["field"] == "run"


def test_pages_say_clearly_when_the_tracker_is_away(monkeypatch) -> None:
    monkeypatch.setenv("PLATEAU_URL", "http://127.0.0.1:9")
    app = AppTest.from_file(str(PAGES / "runs.py"), default_timeout=30)
    app.run()
    assert not app.exception
    assert "Cannot reach the tracker" in app.error[0].value


def test_run_page_says_each_alert_about_what_the_trainer_sent(tracker, monkeypatch) -> None:
    """The alerts the tracker makes once a run about what a loop sends (the SDK warns of the same) are said
    above the curves, each with its sentence: a rate at the global step beside an epoch's accuracy, a rate
    sent after its step was judged, and an accuracy sent after a later step was judged. Until 2026-11-26
    only ``missing_monitor`` and ``plan_passed`` were."""
    with httpx.Client(base_url=tracker.url, timeout=30) as client:
        run = create_run(
            client, {"monitor": "val/acc", "mode": "max"}, project="dash-alerts", planned_steps=50
        )

        def post(points: list[tuple[str, int, float]]) -> None:
            body = {
                "batch_id": uuid.uuid4().hex,
                "points": [{"key": k, "step": s, "value": v} for k, s, v in points],
            }
            assert client.post(f"/api/v1/runs/{run['id']}/metrics", json=body).status_code == 200

        post([("val/acc", 0, 0.1), ("lr", 0, 0.1)])
        post([("val/acc", 1, 0.2), *(("lr", s, 0.1) for s in range(100, 110))])  # companion_steps
        post([("val/acc", 2, 0.3)])
        post([("lr", 2, 0.01)])  # companion_late: step 2 was judged with the rate before it
        post([("val/acc", 4, 0.4)])
        post([("val/acc", 3, 0.35)])  # late: step 4 was judged
    app = page("run", tracker, monkeypatch)
    app.query_params["run"] = str(run["id"])
    app.run()
    assert not app.exception
    warnings = [w.value for w in app.warning]
    assert any(
        w.startswith("A key the rules read is logged in another step unit: lr comes at steps from 100")
        for w in warnings
    ), warnings
    assert any(
        w.startswith("A key the rules read arrived after its step was judged: lr at step 2") for w in warnings
    ), warnings
    assert any(
        w.startswith("Points arrived after their step was judged: val/acc at step 3") for w in warnings
    ), warnings
