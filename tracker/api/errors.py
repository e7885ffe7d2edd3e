"""Domain errors to HTTP responses; a request body over the limit to 413."""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from plateau_tracker.server.api.storage_errors import STORAGE_ERRORS, storage_unavailable
from plateau_tracker.server.errors import ConflictError, InvalidInputError, NotFoundError
from plateau_tracker.server.schemas._common import json_safe
from plateau_tracker.server.services.auth import AuthError, ForbiddenError


def _shown(value: Any) -> Any:
    """An offending input as an error may show it: JSON-safe (NaN/inf spelled out), and short."""
    if isinstance(value, (bytes, bytearray)):  # a body that is not even UTF-8
        value = bytes(value[:400]).decode("utf-8", "backslashreplace")
    safe = json_safe(jsonable_encoder(value, custom_encoder={float: lambda f: f}))
    text = json.dumps(safe, allow_nan=False)  # ASCII: a lone surrogate is escaped, not an encoding error
    if len(text) > 200:
        return text[:200] + "..."
    try:
        json.dumps(safe, ensure_ascii=False).encode()  # as the response will write it
    except UnicodeEncodeError:
        return text
    return safe


def error_response(exc: Exception) -> JSONResponse | None:
    """The answer every route gives to a domain error or an invalid request; None for any other exception
    (a bug: the server's 500). The ingest fast path answers its errors through this too."""
    if isinstance(exc, RequestValidationError):
        # FastAPI's own handler echoes the input; a NaN or inf in it would make the error itself a 500.
        detail = [
            {
                "loc": list(e.get("loc", ())),
                "msg": e.get("msg", ""),
                "type": e.get("type", ""),
                **({"input": _shown(e["input"])} if "input" in e else {}),
            }
            for e in exc.errors()
        ]
        return JSONResponse(status_code=422, content={"detail": detail})
    if isinstance(exc, InvalidInputError):
        detail = [{"loc": exc.field.split("."), "msg": exc.message, "type": "invalid"}]
        return JSONResponse(status_code=422, content={"detail": detail})
    if isinstance(exc, AuthError):
        return JSONResponse(
            status_code=401, content={"detail": str(exc)}, headers={"WWW-Authenticate": "Bearer"}
        )
    if isinstance(exc, STORAGE_ERRORS):
        return storage_unavailable(exc)
    status = _STATUS.get(type(exc))
    return None if status is None else JSONResponse(status_code=status, content={"detail": str(exc)})


_STATUS: dict[type[Exception], int] = {NotFoundError: 404, ConflictError: 409, ForbiddenError: 403}


def invalid_body(exc: ValidationError, body: bytes) -> RequestValidationError:
    """A batch that failed validation, as FastAPI reports an invalid body: each error located under
    ``body``."""
    errors = [{**error, "loc": ("body", *error["loc"])} for error in exc.errors()]
    return RequestValidationError(errors, body=body)


def install_error_handlers(app: FastAPI) -> None:
    """Answer the errors :func:`error_response` knows as it says, on every route."""

    async def _answer(_request: Request, exc: Exception) -> Response:
        response = error_response(exc)
        if response is None:  # registered only for the types it answers
            raise exc
        return response

    for handled in (RequestValidationError, InvalidInputError, AuthError, *_STATUS, *STORAGE_ERRORS):
        app.add_exception_handler(handled, _answer)


def body_too_large(size: int, max_bytes: int) -> JSONResponse:
    """The 413 answer to a body of ``size`` bytes (or more) over ``max_bytes``."""
    return JSONResponse(
        status_code=413,
        content={
            "detail": f"request body of {size} bytes is over the limit of {max_bytes} bytes; "
            "send smaller batches"
        },
    )


class BodyLimitMiddleware:
    """Refuses a request whose body is larger than ``max_bytes`` with a 413, on every route: before
    reading it when its ``Content-Length`` says so, and after reading at most ``max_bytes + 1`` of it when
    it comes without one (chunked), so no route ever reads a larger body whole."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                declared = value
        if declared is not None:
            if declared.isdigit() and int(declared) > self.max_bytes:
                await body_too_large(int(declared), self.max_bytes)(scope, receive, send)
                return
            await self.app(scope, receive, send)  # the server holds the body to its declared length
            return
        if scope["method"] in ("GET", "HEAD", "DELETE", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        body = await read_body(receive, self.max_bytes)
        if body is None:
            return  # the client left
        if len(body) > self.max_bytes:
            await body_too_large(len(body), self.max_bytes)(scope, receive, send)
            return
        await self.app(scope, replay_body(body, receive), send)


async def read_body(receive: Receive, max_bytes: int) -> bytes | None:
    """The request body, or None if the client disconnected. Reading stops past ``max_bytes``: what was
    read so far is returned, and its length says it is over."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        chunks.append(chunk)
        if size > max_bytes or not message.get("more_body", False):
            return b"".join(chunks)


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the already-read body over again, then listens to the client."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
