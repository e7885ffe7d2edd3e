"""The runs list in a fixed number of statements, whatever the page holds, with each run's latest decision
exactly as the one-run read gives it; pages by key; a name filter."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.schemas.metrics import MetricBatch
from plateau_tracker.server.schemas.runs import RunCreate, RunFinish
from plateau_tracker.server.services import projects, runs
from plateau_tracker.server.services.ingest import ingest
from plateau_tracker.server.services.keys import KeyCache
from tests.conftest import create_run

POLICY = {
    "monitor": "v",
    "rules": [
        {"rule": "patience", "patience": 2},
        {"rule": "checkpoint"},
        {"rule": "threshold", "stop_at": -5},
    ],
}


@pytest.fixture
def database(store_url: str) -> Iterator[Database]:
    db = Database(store_url)
    keys = KeyCache()
    for index in range(40):
        created = runs.create_or_join(
            db,
            RunCreate(
                project="p",
                experiment="e" if index % 2 else "f",
                name=f"run-{index}",
                policy=POLICY,
                tags=[t for t, every in (("even", 2), ("third", 3), ('q"uote%', 5)) if index % every == 0],
            ),
        )
        values = [1.0, 0.5, 0.6, 0.7, 0.8][: 1 + index % 5]
        points = [{"key": "v", "step": step + 1, "value": value} for step, value in enumerate(values)]
        ingest(db, keys, created.id, MetricBatch.model_validate({"batch_id": "b", "points": points}))
        if index % 7 == 3:  # a late point: the newest decision is an alert, and the list shows the one before
            late = [{"key": "v", "step": 0, "value": 2.0}]
            ingest(db, keys, created.id, MetricBatch.model_validate({"batch_id": "late", "points": late}))
    yield db
    db.dispose()


def _statements(db: Database) -> list[str]:
    seen: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if statement.split(None, 1)[0].upper() in ("SELECT", "INSERT", "UPDATE", "DELETE"):  # not BEGIN
            seen.append(statement)

    event.listen(db.engine, "before_cursor_execute", record)
    return seen


def test_a_page_costs_the_same_statements_whatever_it_holds(database: Database) -> None:
    seen = _statements(database)
    small = runs.list_runs(database, project="p", limit=1)
    small_cost = len(seen)
    seen.clear()
    large = runs.list_runs(database, project="p", limit=40)
    assert small_cost == 3, seen  # count, runs with their names, decisions (the newest run has no alert)
    assert len(seen) == 4  # + the newest non-alert decision of the runs whose newest is an alert
    assert [run.id for run in large.data[:1]] == [run.id for run in small.data]
    for listed in large.data:  # each run as the one-run read shows it, latest decision included
        assert listed == runs.get(database, listed.id)
    alerted = [run for run in large.data if run.name in {f"run-{i}" for i in range(3, 40, 7)}]
    assert alerted
    assert all(run.decision.action != "alert" for run in alerted)


def test_pages_by_key_cover_every_run_once_newest_first(database: Database) -> None:
    ids, before = [], None
    while True:
        page = runs.list_runs(database, project="p", experiment="e", limit=7, before=before)
        ids += [run.id for run in page.data]
        if page.next is None:
            break
        before = page.next
    by_offset = runs.list_runs(database, project="p", experiment="e", limit=1000)
    assert ids == [run.id for run in by_offset.data]
    assert len(ids) == by_offset.count == 20


def test_the_name_filter_matches_a_part_of_the_name(database: Database) -> None:
    found = runs.list_runs(database, name="N-1")  # case does not matter
    assert sorted(run.name for run in found.data) == sorted(["run-1", *(f"run-{i}" for i in range(10, 20))])
    assert found.count == 11


def test_a_cursor_past_every_id_reads_the_first_page(database: Database) -> None:
    assert runs.list_runs(database, before=2**40, limit=5).data == runs.list_runs(database, limit=5).data


def test_several_statuses_filter_in_the_database(database: Database) -> None:
    for run in runs.list_runs(database, project="p", limit=3).data:
        runs.finish(database, run.id, RunFinish(status="stopped" if run.id % 2 else "failed"))
    assert runs.list_runs(database, status=["running"]).count == 37
    picked = runs.list_runs(database, status=["stopped", "failed"])
    assert picked.count == 3
    assert {run.status for run in picked.data} == {"stopped", "failed"}
    assert runs.list_runs(database, status=[]).count == 40  # no status named: every run


def test_projects_list_each_experiment_with_its_run_count(database: Database) -> None:
    runs.create_or_join(database, RunCreate(project="a-second", experiment="only"))
    listed = projects.list_projects(database).model_dump()
    assert listed == {
        "data": [
            {"name": "a-second", "runs": 1, "experiments": [{"name": "only", "runs": 1}]},
            {"name": "p", "runs": 40, "experiments": [{"name": "e", "runs": 20}, {"name": "f", "runs": 20}]},
        ]
    }
    assert [p.name for p in projects.list_projects(database, project="p").data] == ["p"]
    assert projects.list_projects(database, project="none").data == []


def test_tags_filter_in_the_database_every_one_named(database: Database) -> None:
    """Before, ``?tag=x`` answered every run: the parameter did not exist, and was ignored."""
    assert runs.list_runs(database, tags=["even"]).count == 20
    assert runs.list_runs(database, tags=["even", "third"]).count == 7  # 0, 6, 12, ..., 36
    assert {run.name for run in runs.list_runs(database, tags=['q"uote%']).data} == {
        f"run-{i}" for i in range(0, 40, 5)
    }
    assert runs.list_runs(database, tags=["quote"]).count == 0  # a tag is matched whole, not in part
    assert runs.list_runs(database, tags=["nowhere"]).count == 0


def test_the_runs_route_filters_by_tag_and_refuses_an_unknown_filter(app_client: TestClient) -> None:
    tagged = create_run(app_client, project="tagged", tags=["baseline", "lr-sweep"])
    create_run(app_client, project="tagged", tags=["lr-sweep"])
    found = app_client.get(
        "/api/v1/runs", params={"project": "tagged", "tag": ["baseline", "lr-sweep"]}
    ).json()
    assert [run["id"] for run in found["data"]] == [tagged["id"]]
    for wrong in ({"tags": "baseline"}, {"project": "tagged", "stauts": "running"}):
        answer = app_client.get("/api/v1/runs", params=wrong)
        assert answer.status_code == 422, answer.text
        [name] = set(wrong) - {"project"}
        assert answer.json()["detail"][0]["loc"] == ["query", name]
