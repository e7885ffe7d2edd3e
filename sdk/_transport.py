"""HTTP calls to the tracker over kept-alive connections, with errors sorted into retry or give up."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from sdk._decision import Answer, Decision
from sdk._http import HttpClient, Reply, TransportErrors

# Statuses worth another try: the request may succeed later unchanged.
_RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
_JSON = {"content-type": "application/json"}


class RetryableError(Exception):
    """The tracker could not be reached or asked us to come back (``retry_after`` seconds, if it said)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RejectedError(Exception):
    """The tracker refused the request as it is; sending it again will not help."""


def _retry_after(reply: Reply) -> float | None:
    value = reply.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _detail(reply: Reply) -> str:
    try:
        return json.dumps(json.loads(reply.body).get("detail"))[:500]
    except (ValueError, AttributeError):
        return reply.body[:500].decode("utf-8", "replace")


class Transport:
    """The tracker's API v1 as the SDK uses it. Thread-safe."""

    def __init__(self, url: str, *, timeout: float = 10.0, token: str | None = None) -> None:
        self.url = url.rstrip("/")
        headers = {"user-agent": "plateau-sdk", "accept": "application/json"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        self._client = HttpClient(
            self.url, timeout=timeout, connect_timeout=min(timeout, 2.0), headers=headers
        )

    def reset_after_fork(self) -> None:
        """In a forked child: the inherited keep-alive connections are the parent's. They are dropped,
        never used or shut down, so the parent's connections stay intact."""
        self._client.forget()

    def _request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Any:
        try:
            reply = self._client.request(
                method,
                path,
                body=body,
                headers=_JSON if body is not None else None,
                params=params,
                timeout=timeout,
            )
        except TransportErrors as exc:  # connection refused, reset, timeouts, TLS, broken HTTP
            raise RetryableError(f"{type(exc).__name__}: {exc}") from exc
        if reply.status in _RETRY_STATUSES:
            raise RetryableError(f"HTTP {reply.status} from {method} {path}", retry_after=_retry_after(reply))
        if reply.status >= 400:
            raise RejectedError(f"HTTP {reply.status} from {method} {path}: {_detail(reply)}")
        if reply.status == 204:
            return None
        try:
            return json.loads(reply.body)
        except ValueError as exc:
            raise RetryableError(f"unreadable answer from {method} {path}") from exc

    def create_run(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            result: dict[str, Any] = self._send_json("POST", "/api/v1/runs", body)
        except RejectedError as exc:
            if not str(exc).startswith("HTTP 404 "):
                raise
            # A tracker answers this route whatever the run: a 404 says the URL does not lead to one.
            suffix = " without /api/v1" if self.url.endswith("/api/v1") else ""
            raise RejectedError(
                f"HTTP 404 from {self.url}/api/v1/runs: no Plateau tracker there; give the tracker's base "
                f"URL{suffix}, like http://127.0.0.1:8765"
            ) from None
        return result

    def send_points(self, run_id: int, batch_id: str, points: list[dict[str, Any]]) -> Answer:
        """Post a batch of points, one object per point."""
        return self._send_batch(run_id, {"batch_id": batch_id, "points": points})

    def send_series(self, run_id: int, batch_id: str, series: list[dict[str, Any]]) -> Answer:
        """Post a batch as series: per key and rank, ``steps``, ``values`` and ``wall_times`` columns (the
        compact form: about half the bytes, and far less work for both ends)."""
        return self._send_batch(run_id, {"batch_id": batch_id, "series": series})

    def _send_batch(self, run_id: int, body: dict[str, Any]) -> Answer:
        return Answer.from_json(self._send_json("POST", f"/api/v1/runs/{run_id}/metrics", body))

    def _send_json(self, method: str, path: str, body: dict[str, Any], timeout: float | None = None) -> Any:
        # Python's json writes NaN and Infinity literals, which the tracker reads back faithfully; anything
        # else not JSON-able is sent as its str().
        content = json.dumps(body, separators=(",", ":"), default=str).encode()
        return self._request(method, path, body=content, timeout=timeout)

    def get_decision(self, run_id: int, *, step: int | None = None, wait: float = 0.0) -> Decision:
        params: dict[str, Any] = {"wait": round(max(0.0, wait), 3)}
        if step is not None:
            params["step"] = step
        result = self._request("GET", f"/api/v1/runs/{run_id}/decision", params=params, timeout=wait + 5.0)
        return Decision.from_json(result)

    def decisions_at(self, run_id: int, step: int) -> list[Decision]:
        """The run's decisions about exactly ``step``, oldest first."""
        result = self._request("GET", f"/api/v1/runs/{run_id}/decisions", params={"step": step})
        return [Decision.from_json(item) for item in result["data"]]

    def update_summary(self, run_id: int, summary: dict[str, Any]) -> None:
        self._send_json("PATCH", f"/api/v1/runs/{run_id}/summary", {"summary": summary})

    def finish_run(self, run_id: int, status: str, timeout: float, ended_at: float | None = None) -> None:
        """Mark the run ended; ``ended_at`` (unix seconds) when it ended earlier than now (a replay)."""
        body: dict[str, Any] = {"status": status}
        if ended_at is not None:
            body["ended_at"] = datetime.fromtimestamp(ended_at, timezone.utc).isoformat()
        self._send_json("POST", f"/api/v1/runs/{run_id}/finish", body, timeout=timeout)

    def close(self) -> None:
        self._client.close()
