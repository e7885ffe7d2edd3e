"""A storage outage answered as one: 503 with ``Retry-After`` and a JSON body naming the cause.

A full disk, a PostgreSQL that is down or restarting, a pool with no connection to give, a SQLite file
locked past its timeout: none is a bug in the request, and each passes. Answered as a handled error, the
connection stays open (an unhandled one was a plain-text 500 and a closed connection, which keep-alive
clients saw as ``ReadError``), and the SDK takes a 503 for "away": it spools and sends again. The cause is
said in fixed words; the driver's own message (with its SQL, parameters and host names) goes to the
tracker's log only.
"""

from __future__ import annotations

import logging

from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa

from plateau_tracker.server.services.storage_health import STORAGE

logger = logging.getLogger("plateau.tracker")

STORAGE_ERRORS: tuple[type[Exception], ...] = (sa.OperationalError, sa.InterfaceError, sa.TimeoutError)
RETRY_AFTER_S = 5

_CAUSES = (
    (("database or disk is full", "no space left", "disk full", "could not extend file"), "disk_full"),
    (("disk i/o error", "input/output error", "file too large", "read-only file system"), "disk_error"),
    (("database is locked", "database table is locked", "queuepool limit", "timed out"), "busy"),
)
_SAID = {
    "disk_full": "its disk is full",
    "disk_error": "its disk failed a write",
    "busy": "its database is busy",
    "unreachable": "it cannot reach its database",
}


def cause_of(error: Exception) -> str:
    """The outage's cause in one word: ``disk_full``, ``disk_error``, ``busy`` or ``unreachable``."""
    text = str(getattr(error, "orig", None) or error).lower()
    for needles, cause in _CAUSES:
        if any(needle in text for needle in needles):
            return cause
    return "unreachable"


def storage_unavailable(error: Exception) -> JSONResponse:
    """The 503 answer to a storage error, logged in full here."""
    cause = cause_of(error)
    STORAGE.note_failure(cause)
    logger.error("storage unavailable (%s): %s", cause, error)
    return JSONResponse(
        status_code=503,
        content={
            "detail": f"the tracker cannot store or read now: {_SAID[cause]}; retry later",
            "cause": cause,
        },
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )
