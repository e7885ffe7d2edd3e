"""The OpenAPI document as clients read it: operation ids that are the routes' own names, the bearer scheme
the tracker checks, and every status code a route answers with its error body."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from plateau_tracker.server.schemas.metrics import RunBatch

BEARER = "bearer"

_ERROR = {
    "title": "Error",
    "type": "object",
    "properties": {
        "detail": {"type": "string", "description": "what went wrong, naming the thing"},
        "cause": {
            "type": "string",
            "enum": ["disk_full", "disk_error", "busy", "unreachable"],
            "description": "503 only: why the storage is unavailable",
        },
    },
    "required": ["detail"],
}
_ANSWERS: dict[int, str] = {
    400: "The Host header names a host the tracker does not answer to, or Authorization is sent twice.",
    401: "No token, or one the tracker does not know (tokens are configured).",
    403: "The token belongs to another project, or is read-only and the request writes.",
    404: "The run, project, webhook or key does not exist (another project's run answers the same).",
    409: "The run key belongs to a run of another experiment, or a write conflicted.",
    413: "The body is over the tracker's limit (max_body_bytes), or a batch holds too many points.",
    415: "A write whose Content-Type is not application/json (application/x-ndjson on /api/v1/batches).",
    422: "The body holds no batch, or more than the tracker takes in one request.",
    503: "The storage is unavailable (a full disk, the database down or busy): retry after Retry-After.",
}


def operation_id(route: APIRoute) -> str:
    """A route's operation id: its function's name (``create_run``), which only a rename changes."""
    return route.name


def _answers(path: str, method: str) -> list[int]:
    """The error statuses an operation can answer besides validation's 422."""
    if path.endswith("/health") and "{" not in path:
        return [400, 503]
    codes = [400, 401, 403, 503]
    if "{" in path:
        codes.append(404)
    if method in {"post", "patch"}:
        codes += [413, 415]
    if path.endswith("/runs") and method == "post":
        codes.append(409)
    if path.endswith("/batches"):  # FastAPI reads no body of the route: its 422 is declared here
        codes.append(422)
    return codes


def describe(app: FastAPI) -> None:
    """Make ``app.openapi()`` the document described above (built once, then cached by FastAPI)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        components = document.setdefault("components", {})
        schemas = components.setdefault("schemas", {})
        schemas["Error"] = _ERROR
        # The lines of POST /api/v1/batches: NDJSON, which FastAPI does not read into a model itself.
        line = RunBatch.model_json_schema(ref_template="#/components/schemas/{model}", mode="validation")
        schemas.update(line.pop("$defs", {}))
        schemas.setdefault("RunBatch", line)
        components["securitySchemes"] = {
            BEARER: {
                "type": "http",
                "scheme": "bearer",
                "description": (
                    "A project's API token (`plateau token create`). With no token configured, the tracker "
                    "serves loopback clients without one."
                ),
            }
        }
        error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
        for path, operations in document["paths"].items():
            for method, operation in operations.items():
                codes = _answers(path, method)
                # A token is asked for where tokens are configured; none where they are not.
                operation["security"] = [{BEARER: []}, {}] if 401 in codes else []
                for code in codes:
                    operation["responses"].setdefault(
                        str(code), {"description": _ANSWERS[code], "content": error}
                    )
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]
