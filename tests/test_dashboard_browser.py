"""A real headless Chromium loads the dashboard served on loopback and shows a run stopped early."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests._server import free_port
from tests.conftest import create_run

sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
APP = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"


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
    port = free_port()
    env = {**os.environ, "PLATEAU_URL": tracker.url}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            str(APP),
            "--server.port",
            str(port),
            "--server.headless",
            "true",
            "--browser.gatherUsageStats",
            "false",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/_stcore/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
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
            page.goto(f"http://127.0.0.1:{port}/run?run={run['id']}")
            page.get_by_text("Stopped at step 3 by patience").wait_for(timeout=60_000)
            page.locator("canvas, svg").first.wait_for(timeout=60_000)  # the chart, markers included
            text = page.inner_text("body")
            page.screenshot(path=str(screenshot), full_page=True)
            browser.close()
        assert name in text
        assert "has not improved on 0.5 (step 1)" in text
        assert screenshot.stat().st_size > 10_000
        print(f"screenshot: {screenshot}")
    finally:
        server.terminate()
        server.wait(timeout=20)
