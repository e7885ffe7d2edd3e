"""A small keep-alive HTTP/1.1 client over the standard library's ``http.client``.

The SDK makes one kind of call: a small JSON request to one tracker, answered in milliseconds. httpx,
which the SDK used before, spent about a third of a millisecond of Python per call on what this does not
need (URL and header models, cookies, auth flows, event hooks, a pool state machine): a quarter of a
one-point round trip. This client keeps a few idle connections to the tracker and nothing else. It
honours the proxy environment variables (``HTTP(S)_PROXY``, ``ALL_PROXY``, ``NO_PROXY``) as httpx did.
"""

from __future__ import annotations

import functools
import http.client
import select
import socket
import ssl
import threading
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

# Failures of the network or of the other end's HTTP: the caller sorts them as "try again later".
TransportErrors = (OSError, http.client.HTTPException)
# Those that say the other end closed the connection.
_DROPPED = (ConnectionError, http.client.RemoteDisconnected)
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One TLS context for every connection in the process: each one loads the CA bundle (about 1 MB)."""
    return ssl.create_default_context()


@dataclass(frozen=True)
class Reply:
    """A complete response: status, headers (names lower-cased) and body."""

    status: int
    headers: dict[str, str]
    body: bytes


class HttpClient:
    """Requests to one base URL over at most ``max_idle`` kept-alive connections. Thread-safe: a request
    takes a connection to itself and gives it back when the response is read."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float,
        connect_timeout: float,
        headers: dict[str, str],
        max_idle: int = 4,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r} (a tracker URL looks like http://127.0.0.1:8765)")
        try:
            port = parts.port  # urllib raises on a port out of range or not a number
        except ValueError as exc:
            raise ValueError(f"bad port in the tracker URL {url!r}: {exc}") from None
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._headers = {**headers, "host": parts.netloc, "connection": "keep-alive"}
        self._max_idle = max_idle
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._proxy = _proxy_for(parts.scheme, self._host)
        # Through a plain-HTTP proxy the request line carries the whole URL.
        self._origin = f"http://{parts.netloc}" if self._proxy and not self._https else ""

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Reply:
        """Send one request and read the whole answer. Raises one of :data:`TransportErrors` when the
        tracker cannot be reached or breaks the connection."""
        target = self._origin + self._prefix + path
        if params:
            target += "?" + urllib.parse.urlencode(params, doseq=True)
        sent_headers = {**self._headers, **(headers or {})}
        if body is not None:
            sent_headers["content-length"] = str(len(body))
        connection, reused = self._take()
        while True:
            try:
                reply = self._exchange(connection, method, target, body, sent_headers, timeout)
                break
            except TransportErrors as exc:
                connection.close()
                if not reused or not isinstance(exc, _DROPPED):
                    raise
            # A kept-alive connection the tracker closed while it sat idle, the race every keep-alive
            # client meets: once more on a new connection. (Batches carry ids, so a repeat is harmless.)
            # Not after a timeout: that would double the time a caller waits on a tracker that hangs.
            connection, reused = self._new(), False
        if connection.sock is not None:  # http.client closes it when the answer says it will close
            self._give_back(connection)
        return reply

    def _exchange(
        self,
        connection: http.client.HTTPConnection,
        method: str,
        target: str,
        body: bytes | None,
        headers: dict[str, str],
        timeout: float | None,
    ) -> Reply:
        if connection.sock is None:
            connection.connect()
            # A small request must not wait ~40 ms on Nagle's algorithm and the tracker's delayed ACK.
            connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # type: ignore[attr-defined]
        connection.sock.settimeout(self._timeout if timeout is None else timeout)
        connection.request(method, target, body=body, headers=headers)
        response = connection.getresponse()
        data = response.read()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, data)

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection that still looks open, or a new (unconnected) one; and whether reused."""
        while True:
            with self._lock:
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return self._new(), False
            if _still_open(connection):
                return connection, True
            connection.close()

    def _new(self) -> http.client.HTTPConnection:
        host, port = self._proxy or (self._host, self._port)
        if self._https:
            connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, port, timeout=self._connect_timeout, context=tls_context()
            )
            if self._proxy:
                connection.set_tunnel(self._host, self._port)
            return connection
        return http.client.HTTPConnection(host, port, timeout=self._connect_timeout)

    def _give_back(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self._max_idle:
                self._idle.append(connection)
                return
        connection.close()

    def forget(self) -> None:
        """Drop the idle connections unused (in a forked child: they are the parent's connections, and
        the child must not talk on them; dropping the child's copies leaves the parent's open)."""
        with self._lock:
            self._idle = []

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _still_open(connection: http.client.HTTPConnection) -> bool:
    """False when an idle connection is readable: the tracker closed it (or sent what no request asked
    for); either way it is no use."""
    sock = connection.sock
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


def _proxy_for(scheme: str, host: str) -> tuple[str, int] | None:
    """The proxy the environment names for ``scheme`` and ``host`` (None when there is none, or the host
    is in ``NO_PROXY``)."""
    if host in _LOOPBACK:
        return None  # no proxy can reach this machine's loopback
    proxies = urllib.request.getproxies()
    proxy = proxies.get(scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    if not parts.hostname:
        return None
    return parts.hostname, parts.port or 80
