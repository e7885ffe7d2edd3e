"""API tokens and who may do what.

A project token belongs to one project and has a scope: ``read`` (GET) or ``write`` (everything). An
operator token (scope ``operator``) belongs to no project: it reads every project and writes none, so one
dashboard can show a team's projects. A token is sent as
``Authorization: Bearer <token>``; only its SHA-256 is stored. With no token in the database the tracker
serves loopback clients only, without tokens. Lookups are cached for a few seconds per process (the
ingest path must not pay a query per batch), so a revoked token stops working within ``CACHE_S``.
"""

from __future__ import annotations

import hashlib
import ipaddress
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

from sqlalchemy import exists, select

from plateau_tracker.server.db import models
from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.errors import NotFoundError, PlateauError
from plateau_tracker.server.services.runs import ensure_project

Scope = Literal["read", "write", "operator"]
CACHE_S = 4.0
TOKEN_PREFIX = "plt_"


class AuthError(PlateauError):
    """No valid credentials (HTTP 401)."""


class ForbiddenError(PlateauError):
    """Valid credentials that do not allow this (HTTP 403)."""


@dataclass(frozen=True)
class Principal:
    """Who a token speaks for: a project (``project_id``, ``project``), or every project (operator: None)."""

    project_id: int | None
    project: str | None
    scope: Scope

    @property
    def operator(self) -> bool:
        return self.scope == "operator"


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def create_token(db: Database, project: str | None, scope: Scope, name: str = "") -> tuple[int, str]:
    """A new token: for ``project`` (created if needed), or with scope ``operator`` for none. Returns (id,
    the token); the token is shown once, never stored."""
    if (scope == "operator") != (project is None):
        raise ValueError("an operator token belongs to no project; a read or write token to one")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with db.session(write=True) as session:
        project_id = None if project is None else ensure_project(session, project)
        row = models.ApiToken(
            project_id=project_id,
            name=name or f"{scope} token",
            scope=scope,
            token_hash=_hash(token),
            prefix=token[:12],
            created_at=datetime.now(timezone.utc),
        )
        session.add(row)
        session.flush()
        return row.id, token


def list_tokens(db: Database, project: str | None = None) -> list[dict[str, object]]:
    with db.session() as session:
        query = select(models.ApiToken, models.Project.name).outerjoin(
            models.Project, models.Project.id == models.ApiToken.project_id
        )
        if project:
            query = query.where(models.Project.name == project)
        return [
            {
                "id": t.id,
                "project": p if p is not None else "(every project)",
                "name": t.name,
                "scope": t.scope,
                "prefix": t.prefix,
                "revoked": t.revoked_at is not None,
            }
            for t, p in session.execute(query.order_by(models.ApiToken.id))
        ]


def revoke_token(db: Database, token_id: int) -> None:
    with db.session(write=True) as session:
        row = session.get(models.ApiToken, token_id)
        if row is None:
            raise NotFoundError(f"token {token_id} does not exist")
        row.revoked_at = row.revoked_at or datetime.now(timezone.utc)


def any_tokens(db: Database) -> bool:
    with db.session() as session:
        return bool(session.execute(select(exists().where(models.ApiToken.id.is_not(None)))).scalar())


class Authenticator:
    """Resolves a request's credentials to a :class:`Principal` (or None when auth is off)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._lock = threading.Lock()
        self._enabled: tuple[float, bool] | None = None
        self._tokens: dict[str, tuple[float, Principal | None]] = {}
        self._runs: dict[int, int] = {}

    def enabled(self) -> bool:
        now = time.monotonic()
        with self._lock:
            cached = self._enabled
        if cached is not None and now - cached[0] < CACHE_S:
            return cached[1]
        value = any_tokens(self.db)
        with self._lock:
            self._enabled = (now, value)
        return value

    def principal(self, authorization: str | None, client_host: str | None) -> Principal | None:
        """The caller, or None for a loopback caller when no token exists; raises :class:`AuthError`."""
        if not self.enabled():
            if is_loopback(client_host):
                return None
            raise AuthError(
                "no API tokens are configured, so only loopback clients are served; create one "
                "with `plateau token create --project P --scope write`"
            )
        if not authorization or not authorization.lower().startswith("bearer "):
            raise AuthError("missing credentials: send 'Authorization: Bearer <token>'")
        token = authorization[7:].strip()
        found = self._lookup(token)
        if found is None:
            raise AuthError("invalid or revoked token")
        return found

    def run_project(self, run_id: int) -> int | None:
        """The project id of a run (cached: a run never changes project)."""
        with self._lock:
            if run_id in self._runs:
                return self._runs[run_id]
        with self.db.session() as session:
            owner = session.execute(select(models.Run.project_id).where(models.Run.id == run_id)).scalar()
        if owner is not None:
            with self._lock:
                if len(self._runs) > 100_000:
                    self._runs.clear()
                self._runs[run_id] = owner
        return owner

    def _lookup(self, token: str) -> Principal | None:
        key = _hash(token)
        now = time.monotonic()
        with self._lock:
            cached = self._tokens.get(key)
        if cached is not None and now - cached[0] < CACHE_S:
            return cached[1]
        with self.db.session() as session:
            row = session.execute(
                select(models.ApiToken.scope, models.ApiToken.project_id, models.Project.name)
                .outerjoin(models.Project, models.Project.id == models.ApiToken.project_id)
                .where(models.ApiToken.token_hash == key, models.ApiToken.revoked_at.is_(None))
            ).first()
        principal = Principal(row[1], row[2], row[0]) if row is not None else None  # type: ignore[arg-type]
        with self._lock:
            if len(self._tokens) > 10_000:
                self._tokens.clear()
            self._tokens[key] = (now, principal)
        return principal


def check_project(principal: Principal | None, project: str, *, write: bool) -> None:
    """Refuse access to another project's resources, and writes with a read or operator token."""
    if principal is None:
        return
    if principal.operator:
        if write:
            raise ForbiddenError("an operator token reads every project and writes none")
        return
    if principal.project != project:
        raise ForbiddenError(f"this token belongs to project {principal.project!r}, not {project!r}")
    if write and principal.scope != "write":
        raise ForbiddenError(f"this token of project {project!r} is read-only")


def check_run(auth: Authenticator, principal: Principal | None, run_id: int, *, write: bool) -> None:
    """As :func:`check_project`, for the project that owns run ``run_id``."""
    if principal is None:
        return
    if principal.operator:
        if write:
            raise ForbiddenError("an operator token reads every project and writes none")
        return
    if write and principal.scope != "write":
        raise ForbiddenError(f"this token of project {principal.project!r} is read-only")
    owner = auth.run_project(run_id)
    if owner is None or owner != principal.project_id:
        # One answer for both: a different one for another project's run tells an outsider which ids exist.
        raise NotFoundError(f"run {run_id} does not exist in project {principal.project!r}")
