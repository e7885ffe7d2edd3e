"""A storage outage is answered as one: 503 with Retry-After and a JSON body naming the cause, the
connection kept open, /health saying so; the SDK takes it for "away", spools, and every point logged
during the outage is stored once the storage is back.

The full disk is real to the tracker: its process gets a file-size limit (RLIMIT_FSIZE, lifted from
outside with prlimit), so every write SQLite makes past it fails in the kernel, as on a full disk.
"""

from __future__ import annotations

import resource
import signal
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

import plateau_tracker as plateau
from plateau_tracker.server.db.migrate import upgrade
from tests._server import TrackerProcess
from tests._tcp_proxy import TcpProxy

pytestmark = pytest.mark.slow


def _ignore_file_size_signal() -> None:
    # A write past RLIMIT_FSIZE sends SIGXFSZ, which kills by default; ignored, the write fails (EFBIG).
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def _wait_for(condition, timeout: float = 60.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


def test_a_full_disk_answers_503_and_the_sdk_loses_nothing(tmp_path: Path) -> None:
    tracker = TrackerProcess(tmp_path / "tracker", preexec=_ignore_file_size_signal)
    pid = tracker.process.pid
    _, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    run = plateau.init(
        project="disk",
        monitor="loss",
        mode="min",
        rules=[{"rule": "checkpoint"}],
        url=tracker.url,
        spool_dir=tmp_path / "spool",
    )
    try:
        for step in range(20):
            run.log({"loss": 1.0 / (step + 1)}, step=step)
            run.should_stop()
        assert run.flush(30)
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (1, hard))  # the disk is full from here on

        with httpx.Client(base_url=tracker.url, timeout=30) as client:
            batch = {"batch_id": "full", "points": [{"key": "loss", "step": 1000, "value": 0.5}]}
            answer = client.post(f"/api/v1/runs/{run.id}/metrics", json=batch)
            assert answer.status_code == 503, answer.text
            assert answer.headers["retry-after"] == "5"
            assert answer.json()["cause"] in ("disk_full", "disk_error")  # EFBIG reads as an I/O error
            assert "retry later" in answer.json()["detail"]
            assert answer.headers.get("connection") != "close"
            assert client.get(f"/api/v1/runs/{run.id}").status_code == 200  # reads still work
            health = client.get("/api/v1/health")
            assert health.status_code == 200
            assert health.json()["status"] == "degraded"
            assert health.json()["storage"] == answer.json()["cause"]

        for step in range(20, 60):  # logged during the outage
            run.log({"loss": 1.0 / (step + 1)}, step=step)
            run.should_stop()
            time.sleep(0.01)
        assert _wait_for(lambda: run.spooled_points > 0)

        resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard, hard))  # space again
        for step in range(60, 80):
            run.log({"loss": 1.0 / (step + 1)}, step=step)
            run.should_stop()
            time.sleep(0.05)
        assert run.finish(timeout=60) == 0
        page = httpx.get(
            f"{tracker.url}/api/v1/runs/{run.id}/history", params={"key": "loss", "limit": 1000}
        ).json()
        assert [p["step"] for p in page["points"]] == list(range(80))
    finally:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard, hard))
        tracker.stop()


@pytest.mark.postgres
def test_postgresql_down_answers_503_and_health_says_so(postgres_url: str, tmp_path: Path) -> None:
    upgrade(postgres_url)
    url = make_url(postgres_url)
    proxy = TcpProxy(url.port or 5432, url.host or "127.0.0.1")
    through = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    tracker = TrackerProcess(tmp_path / "tracker", database_url=through)
    try:
        with httpx.Client(base_url=tracker.url, timeout=30) as client:
            run = client.post("/api/v1/runs", json={"project": "pg-down"}).json()
            path = f"/api/v1/runs/{run['id']}/metrics"
            point = [{"key": "loss", "step": 0, "value": 1.0}]
            assert client.post(path, json={"batch_id": "before", "points": point}).status_code == 200
            proxy.cut()
            during = [{"key": "loss", "step": 5, "value": 0.7}]
            down = client.post(path, json={"batch_id": "during", "points": during})
            assert down.status_code == 503, down.text
            assert down.json()["cause"] == "unreachable"
            assert down.headers["retry-after"] == "5"
            assert _wait_for(lambda: client.get("/api/v1/health").status_code == 503, timeout=10)
            health = client.get("/api/v1/health")
            assert health.json()["status"] == "unavailable"
            assert health.json()["storage"] == "unreachable"
            proxy.restore()
            assert _wait_for(lambda: client.get("/api/v1/health").status_code == 200, timeout=30)
            later = [{"key": "loss", "step": 1, "value": 0.5}]
            assert _wait_for(
                lambda: client.post(path, json={"batch_id": "after", "points": later}).status_code == 200,
                timeout=30,
            )
            steps = client.get(f"/api/v1/runs/{run['id']}/history", params={"key": "loss"}).json()["points"]
            assert [p["step"] for p in steps] == [0, 1]  # the refused batch stored nothing
    finally:
        tracker.stop()
        proxy.cut()
