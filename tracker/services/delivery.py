"""Delivering the webhook outbox: claim due rows, POST them signed, record the outcome, retry later.

At least once: a delivery that reached the receiver but whose answer was lost is sent again with the same
``X-Plateau-Delivery`` id, which receivers use to drop duplicates. Signature: ``X-Plateau-Signature:
sha256=<hex HMAC-SHA256(secret, f"{timestamp}.{body}")>`` with ``X-Plateau-Timestamp`` (unix seconds), so a
receiver can also reject replays of old deliveries.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import hashlib
import hmac
import json
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import httpx
from anyio import to_thread
from sqlalchemy import select

from plateau_tracker._retry import RETRYABLE_STATUSES, backoff_delay, parse_retry_after
from plateau_tracker.server.db import models
from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.services.webhook_targets import (
    Allowed,
    RefusedTargetError,
    UnresolvedTargetError,
    pinned,
)
from plateau_tracker.server.services.webhook_targets import check as check_target

logger = logging.getLogger("plateau.webhooks")


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The ``X-Plateau-Signature`` value for ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


@dataclass(frozen=True)
class _Claimed:
    id: int
    webhook_id: int
    delivery_id: str
    event: str
    url: str
    secret: str
    payload: dict[str, object]
    attempts: int


@dataclass(frozen=True)
class DeliveryPolicy:
    """``deadline_s`` bounds a whole attempt (connect, send, the answer's status), ``timeout_s`` each
    network wait within it; the answer's body is never read (its status is what counts, and the log keeps
    no word of the receiver's). ``allowed``: receivers beyond public addresses the operator allows. At
    most ``concurrency`` attempts are in flight, at most ``per_webhook`` of them to one webhook, each
    on its own: a slow receiver holds up only its own deliveries."""

    poll_s: float = 0.5
    lease_s: float = 30.0
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    max_attempts: int = 30
    timeout_s: float = 10.0
    deadline_s: float = 15.0
    concurrency: int = 64
    per_webhook: int = 4
    allowed: Allowed = field(default_factory=Allowed)


class Deliverer:
    """Runs in the server's event loop; several tracker processes may run one each (rows are leased).

    Each claimed delivery is its own task, so a receiver that trickles its answer delays no other: it
    used to be one batch waiting for its slowest member, and one slow receiver delayed another project's
    delivery by 39 s. A lease outlives an attempt's deadline, so no other process takes it meanwhile.
    """

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
        policy = self.policy
        in_flight: dict[asyncio.Task[None], int] = {}  # task -> its webhook id
        limits = httpx.Limits(max_connections=policy.concurrency, max_keepalive_connections=16)
        async with httpx.AsyncClient(timeout=policy.timeout_s, limits=limits) as client:
            while True:
                try:
                    room = policy.concurrency - len(in_flight)
                    counts = collections.Counter(in_flight.values())
                    busy = {hook for hook, count in counts.items() if count >= policy.per_webhook}
                    claimed = await to_thread.run_sync(self._claim, room, busy) if room > 0 else []
                    for item in claimed:
                        task = asyncio.get_running_loop().create_task(self._attempt(client, item))
                        in_flight[task] = item.webhook_id
                        task.add_done_callback(functools.partial(self._settled, in_flight))
                    if claimed:
                        continue
                except asyncio.CancelledError:
                    for task in in_flight:
                        task.cancel()
                    raise
                except Exception:
                    logger.exception("webhook delivery loop failed; retrying")
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), policy.poll_s)

    def _settled(self, in_flight: dict[asyncio.Task[None], int], task: asyncio.Task[None]) -> None:
        """An attempt ended: its slot is free, so look for more due deliveries now."""
        in_flight.pop(task, None)
        self._wake.set()

    def _claim(self, room: int, busy: set[int]) -> list[_Claimed]:
        """Lease up to ``room`` due deliveries, none to the webhooks in ``busy`` (at their limit in flight);
        their next attempt moves a lease ahead, so a crashed process's claims come back on their own."""
        now = datetime.now(timezone.utc)
        d, w = models.WebhookDelivery, models.Webhook
        # Look before taking the write lock: the loop also wakes every poll interval, and on SQLite a
        # needless write transaction here would hold up the ingests queued behind it.
        with self.db.session() as session:
            due = (
                select(d.id)
                .where(d.status == "pending", d.next_attempt_at <= now, d.webhook_id.not_in(busy))
                .limit(1)
            )
            if session.execute(due).first() is None:
                return []
        with self.db.session(write=True) as session:
            rows = session.execute(
                select(d, w.url, w.secret)
                .join(w, w.id == d.webhook_id)
                .where(d.status == "pending", d.next_attempt_at <= now, d.webhook_id.not_in(busy))
                .order_by(d.next_attempt_at, d.id)
                .limit(room)
                .with_for_update(skip_locked=True, of=d)
            ).all()
            claimed: list[_Claimed] = []
            taken: dict[int, int] = {}
            for row, url, secret in rows:
                # Within one claim too, at most per_webhook to one webhook; the rest wait for the next.
                taken[row.webhook_id] = taken.get(row.webhook_id, 0) + 1
                if taken[row.webhook_id] > self.policy.per_webhook:
                    continue
                row.next_attempt_at = now + timedelta(
                    seconds=max(self.policy.lease_s, 2 * self.policy.deadline_s)
                )
                claimed.append(
                    _Claimed(
                        row.id,
                        row.webhook_id,
                        row.delivery_id,
                        row.event,
                        url,
                        secret,
                        row.payload,
                        row.attempts,
                    )
                )
            return claimed

    async def _attempt(self, client: httpx.AsyncClient, item: _Claimed) -> None:
        try:
            await self._deliver(client, item)
        except asyncio.CancelledError:
            raise
        except Exception:  # one delivery's failure is its own; its lease brings it back
            logger.exception("webhook delivery %s failed", item.delivery_id)

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
        final = False
        try:
            # Checked at every delivery, on the address connected to: a name that resolves elsewhere
            # since registration (DNS rebinding) is refused here.
            target = await to_thread.run_sync(lambda: check_target(item.url, self.policy.allowed))
            url, pin, extensions = pinned(target)
            response = await asyncio.wait_for(
                self._exchange(client, url, body, {**headers, **pin}, extensions), self.policy.deadline_s
            )
            status = response.status_code
            error = None if 200 <= status < 300 else f"the receiver answered HTTP {status}"
            retry_after = parse_retry_after(response.headers.get("retry-after"))
        except RefusedTargetError as exc:
            error, final = (
                f"refused by the webhook URL policy: {exc}",
                not isinstance(exc, UnresolvedTargetError),
            )
        except asyncio.TimeoutError:  # TimeoutError itself only from Python 3.11
            error = f"no complete answer within the {self.policy.deadline_s:g} s deadline"
        except httpx.HTTPError as exc:
            error = _failure(exc)
        await to_thread.run_sync(lambda: self._record(item, status, error, retry_after, final=final))

    @staticmethod
    async def _exchange(
        client: httpx.AsyncClient, url: str, body: bytes, headers: dict[str, str], extensions: dict[str, str]
    ) -> httpx.Response:
        """POST and take the answer's status line and headers; redirects are not followed, and the body is
        never read (the connection is closed, not reused)."""
        request = client.build_request("POST", url, content=body, headers=headers, extensions=extensions)
        response = await client.send(request, stream=True, follow_redirects=False)
        await response.aclose()
        return response

    def _record(
        self,
        item: _Claimed,
        status: int | None,
        error: str | None,
        retry_after: float | None,
        *,
        final: bool = False,
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
            retryable = not final and (status is None or status in RETRYABLE_STATUSES)
            if not retryable or row.attempts >= self.policy.max_attempts:
                row.status = "failed"
                return
            delay = backoff_delay(
                row.attempts,
                base_s=self.policy.backoff_base_s,
                cap_s=self.policy.backoff_max_s,
                retry_after=retry_after,
            )
            row.next_attempt_at = now + timedelta(seconds=delay)


_FAILURES: tuple[tuple[type[httpx.HTTPError], str], ...] = (
    (httpx.ConnectTimeout, "the connection to the receiver timed out"),
    (httpx.ConnectError, "could not connect to the receiver"),
    (httpx.TimeoutException, "the receiver did not answer in time"),
    (httpx.RemoteProtocolError, "the receiver broke off the HTTP exchange"),
    (httpx.NetworkError, "the connection to the receiver failed"),
)


def _failure(exc: httpx.HTTPError) -> str:
    """A short, fixed description of a failed exchange: never the receiver's words."""
    for kind, description in _FAILURES:
        if isinstance(exc, kind):
            return description
    return f"the request failed ({type(exc).__name__})"
