"""HTTP calls to the tracker over one keep-alive client, with errors sorted into retry or give up."""

from __future__ import annotations

import functools
import json
import socket
import ssl
from typing import Any

import httpx

from sdk._decision import Decision

# Statuses worth another try: the request may succeed later unchanged.
_RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


class RetryableError(Exception):
    """The tracker could not be reached or asked us to come back (``retry_after`` seconds, if it said)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RejectedError(Exception):
    """The tracker refused the request as it is; sending it again will not help."""


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _detail(response: httpx.Response) -> str:
    try:
        return json.dumps(response.json().get("detail"))[:500]
    except (ValueError, AttributeError):
        return response.text[:500]


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context for every client in the process. httpx builds one per client by default, and each
    loads the CA bundle: about 1 MB per run, most of the SDK's memory with many live runs."""
    return httpx.create_ssl_context()


class Transport:
    """The tracker's API v1 as the SDK uses it. Thread-safe (httpx clients are)."""

    def __init__(
        self, url: str, *, timeout: float = 10.0, client: httpx.Client | None = None, token: str | None = None
    ) -> None:
        self.url = url.rstrip("/")
        headers = {"user-agent": "plateau-sdk"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        self._timeout = timeout
        self._headers = headers
        self._client = client or self._new_client()

    def _new_client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            timeout=httpx.Timeout(self._timeout, connect=min(self._timeout, 2.0)),
            limits=httpx.Limits(max_connections=4, max_keepalive_connections=4),
            headers=self._headers,
            # TCP_NODELAY: a small keep-alive request must not wait ~40 ms on Nagle + delayed ACK.
            transport=httpx.HTTPTransport(
                verify=_tls_context(), socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
            ),
        )

    def reset_after_fork(self) -> None:
        """In a forked child: a new client. The inherited one's sockets are the parent's connections; they
        are dropped, not closed, so the parent's keep-alive connections stay intact."""
        self._client = self._new_client()

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:  # connection refused, reset, timeouts
            raise RetryableError(f"{type(exc).__name__}: {exc}") from exc
        if response.status_code in _RETRY_STATUSES:
            raise RetryableError(
                f"HTTP {response.status_code} from {method} {path}", retry_after=_retry_after(response)
            )
        if response.status_code >= 400:
            raise RejectedError(f"HTTP {response.status_code} from {method} {path}: {_detail(response)}")
        try:
            return response.json()
        except ValueError as exc:
            raise RetryableError(f"unreadable answer from {method} {path}") from exc

    def create_run(self, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._request("POST", "/api/v1/runs", json=body)
        return result

    def send_points(self, run_id: int, batch_id: str, points: list[dict[str, Any]]) -> Decision:
        """Post a batch of points, one object per point."""
        return self._send_batch(run_id, {"batch_id": batch_id, "points": points})

    def send_series(self, run_id: int, batch_id: str, series: list[dict[str, Any]]) -> Decision:
        """Post a batch as series: per key and rank, ``steps``, ``values`` and ``wall_times`` columns (the
        compact form: about half the bytes, and far less work for both ends)."""
        return self._send_batch(run_id, {"batch_id": batch_id, "series": series})

    def _send_batch(self, run_id: int, body: dict[str, Any]) -> Decision:
        result = self._send_json("POST", f"/api/v1/runs/{run_id}/metrics", body)
        return Decision.from_json(result["decision"])

    def _send_json(self, method: str, path: str, body: dict[str, Any]) -> Any:
        # Python's json writes NaN and Infinity literals, which the tracker reads back faithfully (httpx's
        # json= refuses them); anything else not JSON-able is sent as its str().
        content = json.dumps(body, separators=(",", ":"), default=str)
        return self._request(method, path, content=content, headers={"content-type": "application/json"})

    def get_decision(self, run_id: int, *, step: int | None = None, wait: float = 0.0) -> Decision:
        params: dict[str, Any] = {"wait": round(max(0.0, wait), 3)}
        if step is not None:
            params["step"] = step
        result = self._request("GET", f"/api/v1/runs/{run_id}/decision", params=params, timeout=wait + 5.0)
        return Decision.from_json(result)

    def update_summary(self, run_id: int, summary: dict[str, Any]) -> None:
        self._send_json("PATCH", f"/api/v1/runs/{run_id}/summary", {"summary": summary})

    def finish_run(self, run_id: int, status: str, timeout: float) -> None:
        self._request("POST", f"/api/v1/runs/{run_id}/finish", json={"status": status}, timeout=timeout)

    def close(self) -> None:
        self._client.close()
