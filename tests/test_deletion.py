"""Deleting a run or an experiment: every row it held goes, on SQLite and PostgreSQL, and nothing of the
runs beside it; the API answers 404 for it from then on; ``plateau delete`` asks first."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from plateau_tracker.server.app import create_app
from plateau_tracker.server.config import Settings
from plateau_tracker.server.db import models
from plateau_tracker.server.db.engine import Database
from tests._cli import plateau_cli
from tests._server import TrackerProcess
from tests.conftest import create_run

# asha builds the rung view, patience and checkpoint write decisions and rule states.
POLICY = {
    "monitor": "v",
    "rules": [
        {"rule": "patience", "patience": 2},
        {"rule": "checkpoint"},
        {"rule": "asha", "min_step": 1, "reduction_factor": 2},
    ],
}
VALUES = [1.0, 2.0, 1.5, 1.4, 1.3, 1.2]


def _log(client: httpx.Client | TestClient, run_id: int) -> None:
    points = [
        {"key": k, "step": s, "value": v * (2 if k == "t" else 1)} for s, v in enumerate(VALUES) for k in "vt"
    ]
    answer = client.post(f"/api/v1/runs/{run_id}/metrics", json={"batch_id": "b", "points": points})
    assert answer.status_code == 200, answer.text


def _rows_by_table(db: Database, run_id: int) -> dict[str, int]:
    """How many rows of each table that names runs belong to ``run_id``."""
    counts = {}
    with db.session() as session:
        for table in models.Base.metadata.sorted_tables:
            column = table.c.get("run_id") if table.name != "run" else table.c.id
            if column is not None:
                counts[table.name] = session.execute(
                    select(func.count()).select_from(table).where(column == run_id)
                ).scalar_one()
    return counts


def _outbox(db: Database, run_ids: list[int]) -> None:
    """A webhook of project p with one delivery per run in its outbox."""
    now = datetime.now(timezone.utc)
    with db.session(write=True) as session:
        project_id = session.execute(select(models.Project.id).where(models.Project.name == "p")).scalar_one()
        hook = models.Webhook(
            project_id=project_id, url="https://example.org/h", events=["stop"], secret="s", created_at=now
        )
        session.add(hook)
        session.flush()
        for run_id in run_ids:
            session.add(
                models.WebhookDelivery(
                    webhook_id=hook.id,
                    delivery_id=uuid.uuid4().hex,
                    event="stop",
                    run_id=run_id,
                    payload={},
                    status="pending",
                    attempts=0,
                    next_attempt_at=now,
                    created_at=now,
                )
            )


@pytest.fixture
def app(store_url: str, tmp_path: Any) -> Iterator[tuple[TestClient, Database]]:
    application = create_app(Settings(home=tmp_path, database_url=store_url))
    with TestClient(application, base_url="http://localhost", client=("127.0.0.1", 50000)) as client:
        db = Database(store_url)
        yield client, db
        db.dispose()


def test_deleting_a_run_removes_every_row_it_held_and_nothing_of_its_neighbours(
    app: tuple[TestClient, Database],
) -> None:
    client, db = app
    gone, kept, other = (
        create_run(client, POLICY, project="p", experiment=e, name=n)["id"]
        for e, n in (("e", "a"), ("e", "b"), ("f", "c"))
    )
    for run_id in (gone, kept, other):
        _log(client, run_id)
    _outbox(db, [gone, kept])
    before = _rows_by_table(db, gone)
    # The run held points, decisions, rule states, a batch id, rung values and a delivery.
    for table in ("metric_block", "decision", "rule_state", "ingest_batch", "rung_value", "webhook_delivery"):
        assert before[table] > 0, table
    kept_before = _rows_by_table(db, kept)

    answer = client.delete(f"/api/v1/runs/{gone}")

    assert answer.status_code == 200, answer.text
    assert answer.json() == {"runs": 1, "experiments": 0, "points": 2 * len(VALUES), "deliveries": 1}
    assert all(count == 0 for count in _rows_by_table(db, gone).values()), _rows_by_table(db, gone)
    assert _rows_by_table(db, kept) == kept_before
    for path in ("", "/decision", "/decisions", "/keys", "/summary"):
        assert client.get(f"/api/v1/runs/{gone}{path}").status_code == 404, path
    late = client.post(
        f"/api/v1/runs/{gone}/metrics",
        json={"batch_id": "late", "points": [{"key": "v", "step": 9, "value": 1}]},
    )
    assert late.status_code == 404
    assert client.delete(f"/api/v1/runs/{gone}").status_code == 404
    listed = [run["id"] for run in client.get("/api/v1/runs", params={"project": "p"}).json()["data"]]
    assert sorted(listed) == sorted([kept, other])
    # The run beside it is judged on as before.
    assert (
        client.post(
            f"/api/v1/runs/{kept}/metrics",
            json={"batch_id": "more", "points": [{"key": "v", "step": 7, "value": 3.0}]},
        ).status_code
        == 200
    )


def test_deleting_an_experiment_removes_it_with_its_runs(app: tuple[TestClient, Database]) -> None:
    client, db = app
    first, second = (
        create_run(client, POLICY, project="p", experiment="sweep/1", name=n)["id"] for n in "ab"
    )
    other = create_run(client, POLICY, project="p", experiment="f", name="c")["id"]
    for run_id in (first, second, other):
        _log(client, run_id)

    answer = client.delete("/api/v1/projects/p/experiments/sweep%2F1")

    assert answer.status_code == 200, answer.text
    assert answer.json() == {"runs": 2, "experiments": 1, "points": 4 * len(VALUES), "deliveries": 0}
    for run_id in (first, second):
        assert all(count == 0 for count in _rows_by_table(db, run_id).values())
        assert client.get(f"/api/v1/runs/{run_id}").status_code == 404
    experiments = {e["name"] for p in client.get("/api/v1/projects").json()["data"] for e in p["experiments"]}
    assert experiments == {"f"}
    assert client.get(f"/api/v1/runs/{other}").status_code == 200
    missing = client.delete("/api/v1/projects/p/experiments/sweep%2F1")
    assert missing.status_code == 404
    assert "sweep/1" in missing.text


def test_a_run_that_takes_a_deleted_runs_id_is_judged_by_its_own_policy(
    app: tuple[TestClient, Database],
) -> None:
    """SQLite gives the newest run's id, once deleted, to the next run created: that run is judged by its
    own policy, and answered with its own decisions, not the deleted run's remembered ones."""
    client, _ = app
    gone = create_run(client, POLICY, project="p", experiment="e", name="gone")["id"]
    _log(client, gone)  # judged, so its policy and latest decision are remembered
    assert client.delete(f"/api/v1/runs/{gone}").status_code == 200
    other = {"monitor": "loss", "mode": "min", "rules": [{"rule": "patience", "patience": 1}]}
    new = create_run(client, other, project="p", experiment="e", name="new")["id"]
    points = [{"key": "loss", "step": s, "value": v} for s, v in enumerate([1.0, 2.0])]
    answer = client.post(f"/api/v1/runs/{new}/metrics", json={"batch_id": "b", "points": points}).json()
    assert (answer["decision"]["action"], answer["decision"]["rule"]) == ("stop", "patience")
    assert answer["decision"]["step"] == 1


def test_plateau_delete_asks_first_then_deletes_over_http(tracker: TrackerProcess) -> None:
    project = f"delete-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=tracker.url, timeout=30) as client:
        one, two = (create_run(client, POLICY, project=project, experiment="e", name=n)["id"] for n in "ab")
        three = create_run(client, POLICY, project=project, experiment="sweep", name="c")["id"]
        for run_id in (one, two, three):
            _log(client, run_id)
        env = {"PLATEAU_URL": tracker.url}

        refused = plateau_cli("delete", "run", str(one), env=env)  # stdin is not a terminal here
        assert refused.returncode == 1
        assert "--yes" in refused.stderr
        assert client.get(f"/api/v1/runs/{one}").status_code == 200

        done = plateau_cli("delete", "run", str(one), str(two), "999999999", "--yes", env=env)
        assert done.returncode == 1  # one of the three did not exist
        assert f"deleted run {one}: 1 run(s), {2 * len(VALUES)} points" in done.stdout
        assert f"deleted run {two}" in done.stdout
        assert "run 999999999 does not exist" in done.stderr
        assert "Traceback" not in done.stderr
        assert client.get(f"/api/v1/runs/{two}").status_code == 404

        whole = plateau_cli("delete", "experiment", "sweep", "--project", project, "-y", env=env)
        assert whole.returncode == 0, whole.stderr
        assert f"deleted experiment 'sweep' of project '{project}': 1 run(s)" in whole.stdout
        assert client.get(f"/api/v1/runs/{three}").status_code == 404
