"""``Annotated`` dependency aliases shared by the routes.

The dependencies are ``async`` on purpose: FastAPI runs a plain ``def`` dependency in the thread pool,
and each such hop costs a thread wake-up and a GIL hand-over (milliseconds on a busy machine, several per
request). These only read app state; the auth checks may query the database on a cache miss (at most
every few seconds per token or run), which is short enough to do on the loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Path, Request

from plateau_tracker.server.config import Settings
from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.db.models import MAX_ID
from plateau_tracker.server.schemas._common import Text
from plateau_tracker.server.services.auth import Authenticator, Principal, check_project, check_run
from plateau_tracker.server.services.delivery import Deliverer
from plateau_tracker.server.services.keys import KeyCache
from plateau_tracker.server.services.latest_decisions import LatestDecisions
from plateau_tracker.server.services.notify import RunNotifier
from plateau_tracker.server.services.policies import PolicyCache
from plateau_tracker.server.services.run_memory import RunMemories
from plateau_tracker.server.services.wakeups import Listener


async def _database(request: Request) -> Database:
    database: Database = request.app.state.database
    return database


async def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def _keys(request: Request) -> KeyCache:
    keys: KeyCache = request.app.state.keys
    return keys


async def _notifier(request: Request) -> RunNotifier:
    notifier: RunNotifier = request.app.state.notifier
    return notifier


async def _listener(request: Request) -> Listener | None:
    listener: Listener | None = getattr(request.app.state, "listener", None)
    return listener


async def _deliverer(request: Request) -> Deliverer:
    deliverer: Deliverer = request.app.state.deliverer
    return deliverer


async def _authenticator(request: Request) -> Authenticator:
    auth: Authenticator = request.app.state.authenticator
    return auth


async def _principal(request: Request) -> Principal | None:
    client = request.client.host if request.client else None
    return (await _authenticator(request)).principal(request.headers.get("authorization"), client)


AuthDep = Annotated[Authenticator, Depends(_authenticator)]
PrincipalDep = Annotated[Principal | None, Depends(_principal)]


# A larger id in a path than the stores hold is refused as invalid (422) rather than sent to the database.
IdPath = Annotated[int, Path(ge=0, le=MAX_ID)]
ProjectPath = Annotated[Text, Path(min_length=1, max_length=200)]
"""A project name in a path: text the stores can hold (no NUL, no lone surrogate), or a 422 naming it."""


# The run checks take the request itself rather than the two dependencies above: every dependency costs
# FastAPI ~0.1 ms per request to resolve here, and these guard the trainers' hot routes.
async def read_run(run_id: IdPath, request: Request) -> None:
    """Dependency: the caller may read run ``run_id``."""
    check_run(await _authenticator(request), await _principal(request), run_id, write=False)


async def write_run(run_id: IdPath, request: Request) -> None:
    """Dependency: the caller may write to run ``run_id``."""
    check_run(await _authenticator(request), await _principal(request), run_id, write=True)


@dataclass(frozen=True)
class IngestServices:
    """What the ingest route uses, as one dependency (it is the hottest route: see ``read_run``)."""

    database: Database
    keys: KeyCache
    notifier: RunNotifier
    deliverer: Deliverer
    policies: PolicyCache
    latest: LatestDecisions
    memories: RunMemories


async def _ingest_services(request: Request) -> IngestServices:
    services: IngestServices = request.app.state.ingest_services  # made once, at start-up
    return services


async def read_project(project: ProjectPath, principal: PrincipalDep) -> None:
    check_project(principal, project, write=False)


async def write_project(project: ProjectPath, principal: PrincipalDep) -> None:
    check_project(principal, project, write=True)


DatabaseDep = Annotated[Database, Depends(_database)]
DelivererDep = Annotated[Deliverer, Depends(_deliverer)]
SettingsDep = Annotated[Settings, Depends(_settings)]
KeysDep = Annotated[KeyCache, Depends(_keys)]
IngestServicesDep = Annotated[IngestServices, Depends(_ingest_services)]
NotifierDep = Annotated[RunNotifier, Depends(_notifier)]
ListenerDep = Annotated[Listener | None, Depends(_listener)]
