"""``POST /api/v1/batches``: the batches of many runs in one request.

A process with many live runs (a sweep driver, several ranks on one host) would otherwise send one request
per run per flush; each request costs the tracker its HTTP, thread hop and transaction whatever it holds.
Here the body is NDJSON: each line is one run's batch exactly as ``POST /api/v1/runs/{run_id}/metrics``
takes it, with the run's id as ``run_id``. Each line is checked, stored and answered on its own: the
answer lists, in the lines' order, ``{"run_id", "status": 200, "answer"}`` with the run's ingest answer, or
``{"run_id", "status", "detail"}`` with the error its own route would have given (a line that could not be
read has ``run_id`` null). One bad line refuses nothing else. How the lines are stored on each database:
:func:`plateau_tracker.server.services.ingest.ingest_all`.
"""

from __future__ import annotations

import json
import re

from pydantic import ValidationError

from plateau_tracker.server.api.deps import IngestServices
from plateau_tracker.server.api.errors import error_response, invalid_body
from plateau_tracker.server.api.storage_errors import STORAGE_ERRORS
from plateau_tracker.server.db.models import MAX_ID
from plateau_tracker.server.errors import InvalidInputError, PlateauError
from plateau_tracker.server.schemas.metrics import MetricBatch, parse_run_batch
from plateau_tracker.server.services import ingest
from plateau_tracker.server.services.auth import Authenticator, Principal, check_run

PATH = "/api/v1/batches"
MAX_LINES = 1_000
"""Batches one request may carry: the SDK sends fewer; a request holds the writer for all of them."""

ANSWERED: tuple[type[Exception], ...] = (PlateauError, ValidationError, *STORAGE_ERRORS)
"""What a line is answered with on its own (through :func:`error_response`); anything else is a bug."""


def store_lines(
    services: IngestServices,
    authenticator: Authenticator,
    principal: Principal | None,
    body: bytes,
) -> bytes:
    """Check, store and answer each line of ``body``; the answer's JSON. The body itself is refused
    (:class:`InvalidInputError`) only when it holds no line or too many."""
    lines = [line for line in body.split(b"\n") if line.strip()]
    if not lines or len(lines) > MAX_LINES:
        raise InvalidInputError("body", f"1 to {MAX_LINES} batches, one per line; got {len(lines)}")
    answers: list[bytes | None] = [None] * len(lines)
    taken: list[tuple[int, MetricBatch]] = []
    places: list[int] = []
    for place, line in enumerate(lines):
        run_id: int | None = None
        try:
            batch = parse_run_batch(line)
            run_id = batch.run_id
            check_run(authenticator, principal, run_id, write=True)
        except ANSWERED as exc:
            refusal = invalid_body(exc, line) if isinstance(exc, ValidationError) else exc
            answers[place] = _refused(run_id if run_id is not None else _run_id_in(line), refusal)
            continue
        taken.append((run_id, batch))
        places.append(place)
    outcomes = ingest.ingest_all(
        services.database, services.keys, taken, services.policies, services.latest, services.memories
    )
    deliveries = 0
    for place, (run_id, _), outcome in zip(places, taken, outcomes, strict=True):
        if isinstance(outcome, Exception):
            if not isinstance(outcome, ANSWERED):
                raise outcome
            answers[place] = _refused(run_id, outcome)
            continue
        if outcome.result.accepted:
            services.notifier.notify(run_id)
        deliveries += outcome.deliveries
        answers[place] = b'{"run_id":%d,"status":200,"answer":%s}' % (
            run_id,
            outcome.result.model_dump_json().encode(),
        )
    if deliveries:
        services.deliverer.poke()
    return b'{"results":[' + b",".join(answer for answer in answers if answer is not None) + b"]}"


def _run_id_in(line: bytes) -> int | None:
    """The run id a line that failed validation names, if it names one (its answer says whose it was)."""
    found = _RUN_ID.search(line)
    return int(found.group(1)) if found is not None and int(found.group(1)) <= MAX_ID else None


_RUN_ID = re.compile(rb'"run_id"\s*:\s*([0-9]{1,10})\b')


def _refused(run_id: int | None, exc: Exception) -> bytes:
    """A line's error, as its run's own route would have answered it."""
    response = error_response(exc)
    if response is None:  # not an error a route answers: the request's 500
        raise exc
    item: dict[str, object] = {"run_id": run_id, "status": response.status_code}
    item["detail"] = json.loads(bytes(response.body)).get("detail")
    retry_after = response.headers.get("retry-after")
    if retry_after is not None:
        item["retry_after"] = retry_after
    return json.dumps(item, separators=(",", ":")).encode()
