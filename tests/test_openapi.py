"""The OpenAPI document is the HTTP API's reference: stable operation ids, the bearer scheme, and every
status code a route answers."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import create_run

pytestmark = pytest.mark.in_process

# Clients generated from the document name their methods after these: changing one is a breaking change.
OPERATIONS = {
    ("get", "/api/v1/health"): "get_server_health",
    ("post", "/api/v1/runs"): "create_run",
    ("get", "/api/v1/runs"): "list_runs",
    ("get", "/api/v1/projects"): "list_projects",
    ("get", "/api/v1/runs/{run_id}"): "get_run",
    ("delete", "/api/v1/runs/{run_id}"): "delete_run",
    ("delete", "/api/v1/projects/{project}/experiments/{experiment}"): "delete_experiment",
    ("post", "/api/v1/runs/{run_id}/finish"): "finish_run",
    ("post", "/api/v1/runs/{run_id}/heartbeat"): "send_heartbeat",
    ("get", "/api/v1/runs/{run_id}/summary"): "get_summary",
    ("patch", "/api/v1/runs/{run_id}/summary"): "update_summary",
    ("post", "/api/v1/runs/{run_id}/metrics"): "ingest_metrics",
    ("post", "/api/v1/batches"): "ingest_batches",
    ("get", "/api/v1/runs/{run_id}/decision"): "get_decision",
    ("get", "/api/v1/runs/{run_id}/decisions"): "list_decisions",
    ("post", "/api/v1/runs/{run_id}/away-verdicts"): "compare_away_verdicts",
    ("get", "/api/v1/runs/{run_id}/keys"): "list_keys",
    ("get", "/api/v1/runs/{run_id}/history"): "get_history",
    ("get", "/api/v1/runs/{run_id}/health"): "get_distributed_health",
    ("get", "/api/v1/runs/{run_id}/series"): "get_series",
    ("post", "/api/v1/projects/{project}/webhooks"): "create_webhook",
    ("get", "/api/v1/projects/{project}/webhooks"): "list_webhooks",
    ("delete", "/api/v1/projects/{project}/webhooks/{webhook_id}"): "delete_webhook",
    ("get", "/api/v1/projects/{project}/webhooks/{webhook_id}/deliveries"): "list_deliveries",
}


@pytest.fixture
def document(app_client: TestClient) -> dict[str, Any]:
    response = app_client.get("/openapi.json")
    assert response.status_code == 200
    result: dict[str, Any] = response.json()
    return result


def test_operation_ids_are_the_routes_names(document: dict[str, Any]) -> None:
    found = {
        (method, path): operation["operationId"]
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
    }
    assert found == OPERATIONS


def test_the_bearer_scheme_is_declared_on_every_operation_but_health(document: dict[str, Any]) -> None:
    scheme = document["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if path == "/api/v1/health":
                assert operation["security"] == []
            else:
                assert {"bearer": []} in operation["security"], (method, path)


def test_every_error_a_route_answers_is_listed(document: dict[str, Any]) -> None:
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            listed = set(operation["responses"])
            if path != "/api/v1/health":
                assert {"401", "403"} <= listed, (method, path)
            if "{" in path:
                assert "404" in listed, (method, path)
            if method in {"post", "patch"}:
                assert {"413", "422"} <= listed, (method, path)
            for code in listed - {"200", "201", "204", "422"}:
                error = operation["responses"][code]["content"]["application/json"]["schema"]
                assert error == {"$ref": "#/components/schemas/Error"}


def test_the_errors_answered_are_the_ones_listed(app_client: TestClient, document: dict[str, Any]) -> None:
    run = create_run(app_client, run_key="openapi-conflict")
    answers = {
        ("get", "/api/v1/runs/{run_id}"): app_client.get("/api/v1/runs/999999999"),
        ("get", "/api/v1/runs/{run_id}/series"): app_client.get(
            f"/api/v1/runs/{run['id']}/series", params={"key": "absent"}
        ),
        ("post", "/api/v1/runs/{run_id}/metrics"): app_client.post(
            f"/api/v1/runs/{run['id']}/metrics", content=b"x" * (33 * 1024 * 1024)
        ),
        ("post", "/api/v1/runs"): app_client.post(
            "/api/v1/runs", json={"project": "tests", "experiment": "other", "run_key": "openapi-conflict"}
        ),
    }
    for (method, path), response in answers.items():
        assert response.status_code >= 400, (method, path, response.status_code)
        assert str(response.status_code) in document["paths"][path][method]["responses"], (method, path)
        assert "detail" in response.json()
