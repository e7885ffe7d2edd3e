"""Delivering the webhook outbox: claim due rows, POST them signed, record the outcome, retry later.

At least once: a delivery that reached the receiver but whose answer was lost is sent again with the same
``X-Plateau-Delivery`` id, which receivers use to drop duplicates. Signature: ``X-Plateau-Signature:
sha256=<hex HMAC-SHA256(secret, f"{timestamp}.{body}")>`` with ``X-Plateau-Timestamp`` (unix seconds), so a
receiver can also reject replays of old deliveries.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import random
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import httpx
from anyio import to_thread
from sqlalchemy import select

from tracker.db import models
from tracker.db.engine import Database

logger = logging.getLogger("plateau.webhooks")

_RETRY_STATUSES = frozenset({408, 425, 429}) | frozenset(range(500, 600))


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The ``X-Plateau-Signature`` value for ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


@dataclass(frozen=True)
class _Claimed:
    id: int
    delivery_id: str
    event: str
    url: str
    secret: str
    payload: dict[str, object]
    attempts: int


@dataclass(frozen=True)
class DeliveryPolicy:
    poll_s: float = 0.5
    lease_s: float = 30.0
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    max_attempts: int = 30
    timeout_s: float = 10.0
    batch: int = 20


class Deliverer:
    """Runs in the server's event loop; several tracker processes may run one each (rows are leased)."""

    def __init__(self, db: Database, policy: DeliveryPolicy | None = None) -> None:
        self.db = db
        self.policy = policy or DeliveryPolicy()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="plateau-webhooks")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def poke(self) -> None:
        """Look for due deliveries now rather than at the next poll; callable from any thread."""
        task = self._task
        if task is not None and not task.done():
            task.get_loop().call_soon_threadsafe(self._wake.set)

    async def _run(self) -> None:
        async with httpx.AsyncClient(timeout=self.policy.timeout_s) as client:
            while True:
                try:
                    claimed = await to_thread.run_sync(self._claim)
                    if claimed:
                        await asyncio.gather(*(self._deliver(client, c) for c in claimed))
                        continue
                except asyncio.CancelledError:
                    raise
                except Exception:
                    logger.exception("webhook delivery loop failed; retrying")
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.policy.poll_s)

    def _claim(self) -> list[_Claimed]:
        """Lease up to ``batch`` due deliveries (their next attempt moves a lease ahead, so a crashed
        process's claims come back on their own)."""
        now = datetime.now(timezone.utc)
        d, w = models.WebhookDelivery, models.Webhook
        # Look before taking the write lock: the loop also wakes every poll interval, and on SQLite a
        # needless write transaction here would hold up the ingests queued behind it.
        with self.db.session() as session:
            due = select(d.id).where(d.status == "pending", d.next_attempt_at <= now).limit(1)
            if session.execute(due).first() is None:
                return []
        with self.db.session(write=True) as session:
            rows = session.execute(
                select(d, w.url, w.secret)
                .join(w, w.id == d.webhook_id)
                .where(d.status == "pending", d.next_attempt_at <= now)
                .order_by(d.next_attempt_at, d.id)
                .limit(self.policy.batch)
                .with_for_update(skip_locked=True, of=d)
            ).all()
            claimed = []
            for row, url, secret in rows:
                row.next_attempt_at = now + timedelta(seconds=self.policy.lease_s)
                claimed.append(
                    _Claimed(row.id, row.delivery_id, row.event, url, secret, row.payload, row.attempts)
                )
            return claimed

    async def _deliver(self, client: httpx.AsyncClient, item: _Claimed) -> None:
        body = json.dumps(item.payload, separators=(",", ":"), allow_nan=False).encode()
        timestamp = str(int(time.time()))
        headers = {
            "content-type": "application/json",
            "user-agent": "plateau-webhooks",
            "x-plateau-event": item.event,
            "x-plateau-delivery": item.delivery_id,
            "x-plateau-timestamp": timestamp,
            "x-plateau-signature": sign(item.secret, timestamp, body),
        }
        status: int | None = None
        retry_after: float | None = None
        try:
            response = await client.post(item.url, content=body, headers=headers)
            status = response.status_code
            error = None if 200 <= status < 300 else f"HTTP {status}: {response.text[:200]}"
            if "retry-after" in response.headers:
                try:
                    retry_after = float(response.headers["retry-after"])
                except ValueError:
                    retry_after = None
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
        await to_thread.run_sync(lambda: self._record(item, status, error, retry_after))

    def _record(
        self, item: _Claimed, status: int | None, error: str | None, retry_after: float | None
    ) -> None:
        now = datetime.now(timezone.utc)
        with self.db.session(write=True) as session:
            row = session.get(models.WebhookDelivery, item.id)
            if row is None:
                return
            row.attempts = item.attempts + 1
            row.last_status = status
            row.last_error = error
            if error is None:
                row.status, row.delivered_at = "delivered", now
                return
            retryable = status is None or status in _RETRY_STATUSES
            if not retryable or row.attempts >= self.policy.max_attempts:
                row.status = "failed"
                return
            delay = min(self.policy.backoff_max_s, self.policy.backoff_base_s * 2 ** (row.attempts - 1))
            delay *= random.uniform(0.5, 1.0)
            if retry_after is not None:
                delay = max(delay, min(retry_after, self.policy.backoff_max_s))
            row.next_attempt_at = now + timedelta(seconds=delay)
