"""Issue 22's big experiment: the runs list and a cross-run rule's cost as an experiment grows to 10,000
finished runs (section 10 of the suite)."""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests._dashboard import CHROMIUM, dashboard_on
from tests.benchmarks._report import median_of

MONITOR = "val/acc"
STEPS = 10  # monitored evaluations per finished run


def _finished_run(url: str, experiment: str, index: int) -> None:
    with httpx.Client(base_url=url, timeout=60) as http:
        created = http.post("/api/v1/runs", json={"project": "scale", "experiment": experiment})
        assert created.status_code == 201, created.text
        run_id = created.json()["id"]
        points = [
            {"key": MONITOR, "step": step, "value": 0.5 + 0.4 * (index % 97) / 97 * step / STEPS}
            for step in range(STEPS)
        ]
        stored = http.post(f"/api/v1/runs/{run_id}/metrics", json={"batch_id": "b", "points": points})
        assert stored.status_code == 200, stored.text
        finished = http.post(f"/api/v1/runs/{run_id}/finish", json={"status": "finished"})
        assert finished.status_code == 200, finished.text


def add_finished_runs(url: str, experiment: str, start: int, count: int, workers: int = 4) -> None:
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda i: _finished_run(url, experiment, i), range(start, start + count)))


def runs_list_ms(url: str, experiment: str) -> float:
    """Median ms of the runs list's first page (50 runs) of the experiment."""
    with httpx.Client(base_url=url, timeout=60) as http:

        def one() -> float:
            started = time.perf_counter()
            page = http.get("/api/v1/runs", params={"experiment": experiment, "limit": 50})
            assert page.status_code == 200
            assert len(page.json()["data"]) == 50
            return time.perf_counter() - started

        return 1000 * median_of(one, 9)[0]


def monitored_evaluation_ms(url: str, experiment: str, rule: dict[str, object]) -> float:
    """Median ms of a new live run's first monitored batch (steps 0 and 1) in the experiment, judged by
    ``rule``: a cross-run rule reads the finished runs' values at those steps. The answer must carry the
    rule's judgement (no stop: 0.99 is above every finished run), not an error."""
    policy = {"monitor": MONITOR, "mode": "max", "rules": [rule]}
    points = [{"key": MONITOR, "step": step, "value": 0.99} for step in (0, 1)]
    with httpx.Client(base_url=url, timeout=60) as http:

        def one() -> float:
            run = http.post(
                "/api/v1/runs", json={"project": "scale", "experiment": experiment, "policy": policy}
            ).json()
            started = time.perf_counter()
            answer = http.post(f"/api/v1/runs/{run['id']}/metrics", json={"batch_id": "b", "points": points})
            elapsed = time.perf_counter() - started
            assert answer.status_code == 200, answer.text
            return elapsed  # the run is left running: a finished run would join the peers measured

        return 1000 * median_of(one, 9)[0]


def rung_view_build_ms(url: str, experiment: str, rung: int) -> float:
    """Ms of the batch that first judges an ``asha`` rung nobody was judged at before in the experiment:
    the judgement reads the points of every run, and the rung's view is built (one scan) before the answer.
    Once per rung and experiment; one sample."""
    policy = {"monitor": MONITOR, "mode": "max", "rules": [{"rule": "asha", "min_step": rung}]}
    with httpx.Client(base_url=url, timeout=60) as http:
        run = http.post("/api/v1/runs", json={"project": "scale", "experiment": experiment, "policy": policy})
        points = [{"key": MONITOR, "step": rung, "value": 0.99}]
        started = time.perf_counter()
        answer = http.post(
            f"/api/v1/runs/{run.json()['id']}/metrics", json={"batch_id": "b", "points": points}
        )
        elapsed = time.perf_counter() - started
        assert answer.status_code == 200, answer.text
        return 1000 * elapsed


def dashboard_runs_page_s(tracker_url: str, loads: int = 3) -> float | None:
    """Median seconds from opening the dashboard's Runs page in headless Chromium to its runs table
    showing (the first page of the tracker's first project); None where Chromium, Playwright or Streamlit is
    missing. The dashboard is served afresh, so the first load fills its caches: that load is counted."""
    try:
        import streamlit  # noqa: F401  (served by `python -m streamlit`)
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if CHROMIUM is None:
        return None
    seconds = []
    with dashboard_on(tracker_url) as base, sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--no-first-run"]
        )
        for _ in range(loads):
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            started = time.perf_counter()
            page.goto(base)
            page.locator("table.plateau-runs tr").nth(1).wait_for(timeout=120_000)
            seconds.append(time.perf_counter() - started)
            page.close()
        browser.close()
    return statistics.median(seconds)
