"""Webhooks and their delivery log."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AnyHttpUrl, Field

from plateau_tracker.server.schemas._common import Schema, Text

WebhookEvent = Literal[
    "stop", "checkpoint", "diverged", "straggler", "staleness", "missing_monitor", "run_finished", "crashed"
]


class WebhookCreate(Schema):
    """``events``: any of stop, checkpoint, diverged (a stop by non_finite or divergence), straggler,
    staleness, missing_monitor, run_finished, crashed (the trainer sent nothing for the tracker's heartbeat
    time). ``secret`` signs each delivery (HMAC-SHA256)."""

    url: Annotated[AnyHttpUrl, Field(max_length=2000)]
    events: list[WebhookEvent] = Field(min_length=1, max_length=8)
    secret: Text = Field(min_length=16, max_length=200)


class WebhookPublic(Schema):
    id: int
    project: str
    url: str
    events: list[str]
    created_at: datetime


class WebhooksPublic(Schema):
    data: list[WebhookPublic]
    count: int


class DeliveryPublic(Schema):
    delivery_id: str
    webhook_id: int
    event: str
    run_id: int | None
    status: Literal["pending", "delivered", "failed"]
    attempts: int
    last_status: int | None
    last_error: str | None
    created_at: datetime
    next_attempt_at: datetime
    delivered_at: datetime | None
    payload: dict[str, Any]


class DeliveriesPublic(Schema):
    data: list[DeliveryPublic]
    count: int
