"""Domain errors to HTTP responses; a request body over the limit to 413."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from tracker.errors import ConflictError, InvalidInputError, NotFoundError
from tracker.services.auth import AuthError, ForbiddenError


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(NotFoundError)
    async def _not_found(_request: Request, exc: NotFoundError) -> JSONResponse:
        return JSONResponse(status_code=404, content={"detail": str(exc)})

    @app.exception_handler(ConflictError)
    async def _conflict(_request: Request, exc: ConflictError) -> JSONResponse:
        return JSONResponse(status_code=409, content={"detail": str(exc)})

    @app.exception_handler(AuthError)
    async def _unauthorised(_request: Request, exc: AuthError) -> JSONResponse:
        return JSONResponse(
            status_code=401, content={"detail": str(exc)}, headers={"WWW-Authenticate": "Bearer"}
        )

    @app.exception_handler(ForbiddenError)
    async def _forbidden(_request: Request, exc: ForbiddenError) -> JSONResponse:
        return JSONResponse(status_code=403, content={"detail": str(exc)})

    @app.exception_handler(InvalidInputError)
    async def _invalid(_request: Request, exc: InvalidInputError) -> JSONResponse:
        detail = [{"loc": exc.field.split("."), "msg": exc.message, "type": "invalid"}]
        return JSONResponse(status_code=422, content={"detail": detail})


class BodyLimitMiddleware:
    """Refuses, before reading it, a request whose declared body is larger than ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                    response = JSONResponse(
                        status_code=413,
                        content={
                            "detail": f"request body of {int(value)} bytes is over the limit of "
                            f"{self.max_bytes} bytes; send smaller batches"
                        },
                    )
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)
