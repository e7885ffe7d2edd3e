"""Webhooks: subscriptions per project, and the outbox rows written with the events that fire them."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any, NamedTuple

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from plateau_tracker.server.db import models
from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.errors import NotFoundError
from plateau_tracker.server.schemas._common import as_utc, json_safe
from plateau_tracker.server.schemas.webhooks import (
    DeliveriesPublic,
    DeliveryPublic,
    WebhookCreate,
    WebhookPublic,
    WebhooksPublic,
)

DIVERGENCE_RULES = frozenset({"non_finite", "divergence"})


def events_of(decision: models.Decision) -> list[str]:
    """The webhook events a decision fires."""
    if decision.action == "checkpoint":
        return ["checkpoint"]
    if decision.action == "stop":
        return ["stop", "diverged"] if decision.rule in DIVERGENCE_RULES else ["stop"]
    if decision.action == "alert" and decision.rule in ("straggler", "staleness", "missing_monitor"):
        return [decision.rule]
    return []


def _project(session: Session, name: str) -> models.Project:
    project = session.execute(select(models.Project).where(models.Project.name == name)).scalar_one_or_none()
    if project is None:
        raise NotFoundError(f"project {name!r} does not exist")
    return project


def require_project(db: Database, name: str) -> None:
    """NotFoundError unless the project exists."""
    with db.session() as session:
        _project(session, name)


def _public(hook: models.Webhook, project: str) -> WebhookPublic:
    return WebhookPublic(
        id=hook.id, project=project, url=hook.url, events=hook.events, created_at=as_utc(hook.created_at)
    )


def create(db: Database, project: str, request: WebhookCreate) -> WebhookPublic:
    with db.session(write=True) as session:
        owner = _project(session, project)
        hook = models.Webhook(
            project_id=owner.id,
            url=str(request.url),
            events=sorted(set(request.events)),
            secret=request.secret,
            created_at=datetime.now(timezone.utc),
        )
        session.add(hook)
        session.flush()
        return _public(hook, project)


def list_hooks(db: Database, project: str) -> WebhooksPublic:
    with db.session() as session:
        owner = _project(session, project)
        hooks = session.execute(
            select(models.Webhook).where(models.Webhook.project_id == owner.id).order_by(models.Webhook.id)
        ).scalars()
        data = [_public(h, project) for h in hooks]
    return WebhooksPublic(data=data, count=len(data))


def _hook(session: Session, project: str, webhook_id: int) -> models.Webhook:
    owner = _project(session, project)
    hook = session.get(models.Webhook, webhook_id)
    if hook is None or hook.project_id != owner.id:
        raise NotFoundError(f"webhook {webhook_id} does not exist in project {project!r}")
    return hook


def delete(db: Database, project: str, webhook_id: int) -> None:
    with db.session(write=True) as session:
        session.delete(_hook(session, project, webhook_id))


def deliveries(db: Database, project: str, webhook_id: int, *, limit: int, offset: int) -> DeliveriesPublic:
    """The delivery log of one webhook, newest first."""
    with db.session() as session:
        _hook(session, project, webhook_id)
        rows = session.execute(
            select(models.WebhookDelivery)
            .where(models.WebhookDelivery.webhook_id == webhook_id)
            .order_by(models.WebhookDelivery.id.desc())
            .limit(limit)
            .offset(offset)
        ).scalars()
        data = [
            DeliveryPublic(
                delivery_id=r.delivery_id,
                webhook_id=r.webhook_id,
                event=r.event,
                run_id=r.run_id,
                status=r.status,
                attempts=r.attempts,
                last_status=r.last_status,
                last_error=r.last_error,
                created_at=as_utc(r.created_at),
                next_attempt_at=as_utc(r.next_attempt_at),
                delivered_at=as_utc(r.delivered_at) if r.delivered_at else None,
                payload=r.payload,
            )
            for r in rows
        ]
    return DeliveriesPublic(data=data, count=len(data))


class HookTarget(NamedTuple):
    """What an event needs of a webhook: its id, and the events it wants."""

    id: int
    events: list[Any]


def project_hooks(session: Session, project_id: int) -> list[HookTarget]:
    """The project's webhooks: read once for all the decisions of a batch (most projects have none)."""
    return [HookTarget(*row) for row in session.execute(_PROJECT_HOOKS, {"project_id": project_id})]


# Asked for every batch that makes a decision (each new best is a checkpoint) and every run's end: built
# once, in Core (through the ORM, loading the hooks as objects cost several times the query).
_hooks = models.table_of(models.Webhook)
_PROJECT_HOOKS = select(_hooks.c.id, _hooks.c.events).where(_hooks.c.project_id == bindparam("project_id"))


def enqueue(
    session: Session,
    run: models.Run,
    event: str,
    decision: models.Decision | None,
    hooks: list[HookTarget] | None = None,
) -> int:
    """Write an outbox row for every webhook of the run's project that wants ``event``, in the caller's
    transaction (so the event and its deliveries commit or vanish together). Returns how many. ``hooks``:
    the project's webhooks (:func:`project_hooks`) when the caller has read them already."""
    hooks = [
        h for h in (project_hooks(session, run.project_id) if hooks is None else hooks) if event in h.events
    ]
    if not hooks:
        return 0
    now = datetime.now(timezone.utc)
    project = session.get(models.Project, run.project_id)
    experiment = session.get(models.Experiment, run.experiment_id)
    payload_run = {
        "id": run.id,
        "name": run.name,
        "run_key": run.run_key,
        "status": run.status,
        "project": project.name if project else None,
        "experiment": experiment.name if experiment else None,
    }
    decision_body: dict[str, Any] | None = None
    if decision is not None:
        decision_body = {
            "seq": decision.seq,
            "action": decision.action,
            "step": decision.step,
            "rule": decision.rule,
            "reason": decision.reason,
            "evidence": decision.evidence,
            "best_step": decision.best_step,
            "best_value": decision.best_value,
        }
    for hook in hooks:
        delivery_id = uuid.uuid4().hex
        session.add(
            models.WebhookDelivery(
                webhook_id=hook.id,
                delivery_id=delivery_id,
                event=event,
                run_id=run.id,
                payload=json_safe(
                    {
                        "delivery_id": delivery_id,
                        "event": event,
                        "run": payload_run,
                        "decision": decision_body,
                        "created_at": now.isoformat(),
                    }
                ),
                status="pending",
                attempts=0,
                next_attempt_at=now,
                created_at=now,
            )
        )
    return len(hooks)
