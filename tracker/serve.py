"""Running the tracker under uvicorn, one process or several workers sharing one socket."""

from __future__ import annotations

import os
import socket

import uvicorn
from uvicorn.supervisors import Multiprocess

from tracker.api.protocol import BoundedHttpToolsProtocol, raise_descriptor_limit
from tracker.app import create_app
from tracker.config import Settings
from tracker.db.prepare import prepare_schema


def serve(settings: Settings, *, workers: int = 1, log_level: str = "warning") -> None:
    """Serve until interrupted. The schema is prepared once here, before any worker starts."""
    prepare_schema(settings.resolved_database_url())
    raise_descriptor_limit()  # workers inherit it
    if workers <= 1:
        config = uvicorn.Config(
            create_app(settings),
            host=settings.host,
            port=settings.port,
            log_level=log_level,
            access_log=False,
            timeout_keep_alive=30,
            http=BoundedHttpToolsProtocol,
        )
        uvicorn.Server(config).run()
        return
    # Workers build their own app from the environment, so hand the settings over through it.
    os.environ["PLATEAU_HOME"] = str(settings.home)
    os.environ["PLATEAU_DATABASE_URL"] = settings.resolved_database_url()
    config = uvicorn.Config(
        "tracker.app:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=workers,
        log_level=log_level,
        access_log=False,
        timeout_keep_alive=30,
        http=BoundedHttpToolsProtocol,
    )
    sock = config.bind_socket()
    # Accepted sockets inherit TCP_NODELAY from the listening one. Uvicorn's shared socket for --workers
    # does not set it, and keep-alive requests then stall ~40 ms on Nagle + delayed ACK (uvicorn #3149).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    Multiprocess(config, sockets=[sock]).run()
