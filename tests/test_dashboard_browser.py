"""A real headless Chromium loads the dashboard served on loopback and shows a run stopped early."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest

from tests._dashboard import CHROMIUM, dashboard_on
from tests.conftest import create_run

sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_chromium_renders_the_run_and_its_stop_marker(tracker, tmp_path: Path) -> None:
    pytest.importorskip("streamlit")
    with httpx.Client(base_url=tracker.url, timeout=30) as client:
        policy = {
            "monitor": "val/loss",
            "rules": [{"rule": "patience", "patience": 2}, {"rule": "checkpoint"}],
        }
        name = f"browser-{uuid.uuid4().hex[:6]}"
        run = create_run(client, policy, project="browser", name=name)
        points = [{"key": "val/loss", "step": s, "value": v} for s, v in enumerate([1.0, 0.5, 0.7, 0.8, 0.9])]
        client.post(f"/api/v1/runs/{run['id']}/metrics", json={"batch_id": "b", "points": points})
    with dashboard_on(tracker.url) as base:
        ARTIFACTS.mkdir(exist_ok=True)
        screenshot = ARTIFACTS / "dashboard-run.png"
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM,
                args=[
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--no-first-run",
                ],
            )
            page = browser.new_page(viewport={"width": 1400, "height": 1400})
            page.goto(f"{base}/run?run={run['id']}")
            page.get_by_text("Stopped at step 3 by patience").wait_for(timeout=60_000)
            page.locator("canvas, svg").first.wait_for(timeout=60_000)  # the chart, markers included
            text = page.inner_text("body")
            page.screenshot(path=str(screenshot), full_page=True)
            browser.close()
        assert name in text
        assert "has not improved on 0.5 (step 1)" in text
        assert screenshot.stat().st_size > 10_000
        print(f"screenshot: {screenshot}")


PAGES = {"runs": "", "run": "run?run={run}", "compare": "compare", "distributed": "distributed"}
PAGES["complexity"] = "complexity"


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_every_page_reads_at_1280x800(tracker, tmp_path: Path) -> None:
    """Screenshots of every page at 1280x800. The runs table shows how each run ended, why, and the compute
    saved without horizontal scrolling, a long experiment name shortened (whole on hover), and a run's name
    opens its page. The run page opens on its curve, stop and best step above the fold, the stop said as a
    decision (not an error), the decisions' reasons whole; no page offers Streamlit's "Deploy". Among more
    projects than the project list shows at once, the seeded one is found by typing its name."""
    pytest.importorskip("streamlit")
    project = f"glance-{uuid.uuid4().hex[:6]}"
    experiment = f"no-name-{uuid.uuid4()}"  # as an Optuna study without a name calls its experiment
    with httpx.Client(base_url=tracker.url, timeout=30) as client:
        # Projects that sort ahead of the seeded one, more than the list renders at once, so the test sees
        # a long list whatever else the session's tracker holds.
        for i in range(30):
            create_run(client, project=f"a-crowd-{i:02d}-{uuid.uuid4().hex[:4]}", name="crowd")
        policy = {
            "monitor": "val/loss",
            "rules": [{"rule": "patience", "patience": 2}, {"rule": "checkpoint"}],
        }
        run = create_run(
            client,
            policy,
            project=project,
            name="stopped-early",
            experiment=experiment,
            planned_steps=59,
            config={"lr": 0.1, "width": 64, "optimizer": "adam", "dropout": 0.1, "batch": 128},
        )
        curve = [1.0, 0.5, 0.7, 0.8, 0.9]
        points = [{"key": "val/loss", "step": s, "value": v} for s, v in enumerate(curve)]
        client.post(f"/api/v1/runs/{run['id']}/metrics", json={"batch_id": "b", "points": points})
        client.post(f"/api/v1/runs/{run['id']}/finish", json={"status": "stopped"})
        stop_reason = client.get(f"/api/v1/runs/{run['id']}/decision").json()["reason"]
    with dashboard_on(tracker.url) as base:
        ARTIFACTS.mkdir(exist_ok=True)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--no-first-run"]
            )
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            for name, path in PAGES.items():
                page.goto(f"{base}/{path.format(run=run['id'])}")
                page.locator("h1").first.wait_for(timeout=60_000)
                page.wait_for_timeout(1500)  # charts and tables settle
                page.screenshot(path=str(ARTIFACTS / f"dashboard-{name}-1280x800.png"))
                assert page.get_by_text("Deploy", exact=True).count() == 0, name
            # The run page at a glance.
            page.goto(f"{base}/run?run={run['id']}")
            page.get_by_text("Stopped at step 3 by patience").wait_for(timeout=60_000)
            chart = page.locator("[data-testid='stVegaLiteChart']").first
            chart.wait_for(timeout=60_000)
            box = chart.bounding_box()
            assert box is not None
            assert box["y"] + box["height"] <= 800, box  # the whole curve, with its markers, above the fold
            assert (
                page.locator("[data-testid='stAlertContentInfo']", has_text="Stopped at step 3").count() == 1
            )
            assert page.locator("[data-testid='stAlertContentError']").count() == 0
            reason = page.locator("table.plateau-decisions td.reason", has_text="has not improved").first
            assert reason.inner_text() == stop_reason
            assert page.locator("table.plateau-decisions td.best-step").first.inner_text() == "0"
            # The Runs page, at the project of the seeded run.
            page.goto(base)
            page.get_by_text("Project").first.wait_for(timeout=60_000)
            page.locator("[data-testid='stSelectbox']").first.click()
            page.keyboard.type(project)  # the list renders only the options in view; typing filters it
            page.get_by_role("option", name=project).click()
            table = page.locator("table.plateau-runs")
            table.locator("tr", has_text="stopped-early").wait_for(timeout=60_000)
            page.screenshot(path=str(ARTIFACTS / "dashboard-runs-table-1280x800.png"))
            for column in ("why", "compute saved"):
                box = table.locator("th", has_text=column).first.bounding_box()
                assert box is not None
                assert box["x"] >= 0, (column, box)
                assert box["x"] + box["width"] <= 1280, (column, box)
            row = table.locator("tr", has_text="stopped-early")
            why = row.locator("td.why").inner_text()
            assert why == stop_reason  # whole, not cut
            box = row.locator("td.why").bounding_box()
            assert box is not None
            assert box["x"] + box["width"] <= 1280
            assert (
                row.locator("td.compute-saved").inner_text().strip() == f"{100 * 56 / 60:.1f}%"
            )  # stopped at step 3 of 0..59
            shown = row.locator("td.experiment")
            assert shown.inner_text().endswith("…")
            assert len(shown.inner_text()) <= 24
            assert shown.locator("span").get_attribute("title") == experiment
            name_box = shown.locator("span").bounding_box()
            assert name_box is not None
            assert name_box["height"] < 30  # one line, not five
            row.get_by_role("link", name=f"#{run['id']} stopped-early").click()
            page.get_by_text("Stopped at step 3 by patience").wait_for(timeout=60_000)
            assert f"run={run['id']}" in page.url
            browser.close()
