"""Running the tracker under uvicorn, one process or several workers sharing one socket."""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Callable
from typing import Any

import uvicorn
from uvicorn.supervisors import Multiprocess

from plateau_tracker.server.api.protocol import BoundedHttpToolsProtocol, raise_descriptor_limit
from plateau_tracker.server.app import create_app
from plateau_tracker.server.config import Settings
from plateau_tracker.server.db.prepare import prepare_schema


class PortUnavailableError(OSError):
    """The tracker's address could not be bound (the port is taken, or not this machine's)."""


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything is announced, so a busy port is one clear error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted sockets inherit TCP_NODELAY from the listening one; keep-alive requests otherwise stall
        # ~40 ms on Nagle + delayed ACK (uvicorn #3149, where its shared socket for --workers lacks it).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        reason = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound ({exc.strerror})"
        raise PortUnavailableError(exc.errno, f"{host}:{port} {reason}") from exc
    sock.set_inheritable(True)
    return sock


def _uvicorn_config(app: Any, log_level: str, **workers: Any) -> uvicorn.Config:
    """uvicorn's settings for the tracker: no access log, idle connections kept 30 s, and the HTTP
    protocol that bounds a request's head (``workers``: a factory's import string and worker count)."""
    return uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        timeout_keep_alive=30,
        http=BoundedHttpToolsProtocol,
        **workers,
    )


def serve(
    settings: Settings,
    *,
    workers: int = 1,
    log_level: str = "warning",
    on_listening: Callable[[str], None] | None = None,
) -> None:
    """Serve until interrupted. The schema is prepared once here, before any worker starts; the address
    is bound next (:class:`PortUnavailableError` when it cannot be), then ``on_listening`` gets the URL."""
    prepare_schema(settings.resolved_database_url())
    raise_descriptor_limit()  # workers inherit it
    sock = bind(settings.host, settings.port)
    url = f"http://{settings.host}:{sock.getsockname()[1]}"
    if workers <= 1:
        config = _uvicorn_config(create_app(settings), log_level)
        if on_listening is not None:
            on_listening(url)
        uvicorn.Server(config).run(sockets=[sock])
        return
    # Workers build their own app from the environment, so hand the settings over through it.
    os.environ["PLATEAU_HOME"] = str(settings.home)
    os.environ["PLATEAU_DATABASE_URL"] = settings.resolved_database_url()
    config = _uvicorn_config(
        "plateau_tracker.server.app:create_app", log_level, factory=True, workers=workers
    )
    if on_listening is not None:
        on_listening(url)
    Multiprocess(config, sockets=[sock]).run()
