"""The trainers' hot routes, ``POST /api/v1/runs/{run_id}/metrics`` and ``POST /api/v1/batches`` (many
runs' batches: :mod:`plateau_tracker.server.api.many_ingest`), served straight from ASGI.

Through FastAPI a batch costs the event loop routing, dependency resolution, request and response objects
and the body's validation: on a busy tracker the loop, not the database, was the limit (more than twice
the worker thread's time). This middleware takes the happy path of that one route before FastAPI sees it:
it reads the body, then checks the caller, validates the batch, stores it and writes the answer in one
worker-thread hop, so the loop only moves bytes.

Anything but success (a bad token, an unknown run, an invalid batch) is answered by the same function as
every route's errors (``plateau_tracker.server.api.errors.error_response``); nothing was written (ingest is
one transaction). The FastAPI route of the same path declares the endpoint (its body schema in the OpenAPI
document) and answers what this path does not take: an id past what the stores hold.
"""

from __future__ import annotations

import re

from anyio import to_thread
from pydantic import ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from plateau_tracker.server.api import many_ingest
from plateau_tracker.server.api.deps import IngestServices
from plateau_tracker.server.api.errors import body_too_large, error_response, invalid_body, read_body
from plateau_tracker.server.db.models import MAX_ID
from plateau_tracker.server.schemas.metrics import MetricBatch, parse_batch
from plateau_tracker.server.services import ingest
from plateau_tracker.server.services.auth import Authenticator, check_run

_INGEST_PATH = re.compile(r"/api/v1/runs/([0-9]{1,20})/metrics")

_JSON_HEADERS = [(b"content-type", b"application/json")]


ANSWERED = many_ingest.ANSWERED
"""What the fast path answers itself (through :func:`error_response`); anything else is a bug."""


class FastIngest:
    """ASGI middleware serving successful metric batches; everything else passes to ``app``."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        if scope["path"] == many_ingest.PATH:
            await self._serve(scope, receive, send, None)
            return
        match = _INGEST_PATH.fullmatch(scope["path"])
        run_id = int(match.group(1)) if match is not None else MAX_ID + 1
        if run_id > MAX_ID:  # an id out of range is the route's to refuse
            await self.app(scope, receive, send)
            return
        await self._serve(scope, receive, send, run_id)

    async def _serve(self, scope: Scope, receive: Receive, send: Send, run_id: int | None) -> None:
        """Read the body, and store it in one worker-thread hop: the batch of run ``run_id``, or (None) the
        lines of ``POST /api/v1/batches``."""
        body = await read_body(receive, self.max_bytes)
        if body is None:
            return  # the client left
        if len(body) > self.max_bytes:  # sent without a Content-Length, which the body limit checks first
            await body_too_large(len(body), self.max_bytes)(scope, receive, send)
            return
        state = scope["app"].state
        authorization = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
        client = scope.get("client")
        try:
            answer = await to_thread.run_sync(
                _store,
                state.ingest_services,
                state.authenticator,
                authorization,
                client[0] if client else None,
                run_id,
                body,
            )
        except ANSWERED as exc:
            response = error_response(invalid_body(exc, body) if isinstance(exc, ValidationError) else exc)
            if response is None:
                raise
            await response(scope, receive, send)
            return
        headers = [*_JSON_HEADERS, (b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})


def store_batch(services: IngestServices, run_id: int, batch: MetricBatch) -> bytes:
    """Ingest ``batch``, wake the run's long-polls and the webhook sender as needed; the answer's JSON
    (written by pydantic in one step, not validated and encoded again by FastAPI)."""
    outcome = ingest.ingest(
        services.database,
        services.keys,
        run_id,
        batch,
        services.policies,
        services.latest,
        services.memories,
    )
    if outcome.result.accepted:
        services.notifier.notify(run_id)
    if outcome.deliveries:
        services.deliverer.poke()
    return outcome.result.model_dump_json().encode()


def _store(
    services: IngestServices,
    authenticator: Authenticator,
    authorization: str | None,
    client_host: str | None,
    run_id: int | None,
    body: bytes,
) -> bytes:
    """The route's work, in the worker thread: auth, validation, ingest; the answer's JSON."""
    principal = authenticator.principal(authorization, client_host)
    if run_id is None:
        return many_ingest.store_lines(services, authenticator, principal, body)
    check_run(authenticator, principal, run_id, write=True)
    return store_batch(services, run_id, parse_batch(body))
