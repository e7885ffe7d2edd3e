"""What a browser can forge, refused before any route runs, with tokens or without.

A web page the user visits can send requests to a tracker on the user's machine. Two things stop it:

- **The Host header must name the tracker.** A page on ``evil.example`` that rebinds its name to 127.0.0.1
  (DNS rebinding) sends ``Host: evil.example``; a request whose host is not loopback
  (``localhost``, ``127.0.0.1``, ``[::1]``), the address the tracker binds, or a name the operator lists
  in ``PLATEAU_ALLOWED_HOSTS`` answers 400.
- **Writes take JSON only.** A page can POST ``text/plain`` or a form to any address without asking (a
  "simple" cross-site request); ``application/json`` (and ``application/x-ndjson``, JSON a line at a time,
  which ``POST /api/v1/batches`` takes) needs a CORS preflight, which the tracker never grants. So a POST,
  PUT or PATCH whose ``Content-Type`` is neither answers 415.

``Authorization`` is read here too, once: a request with more than one answers 400, so no route can read
a different one than another.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
_WILDCARDS = frozenset({"", "0.0.0.0", "::"})
_WRITES = frozenset({"POST", "PUT", "PATCH"})


def allowed_hosts(bind_host: str, configured: str) -> frozenset[str]:
    """Loopback, the address the tracker binds (unless a wildcard), and the operator's comma-separated
    names; lower case, without brackets or ports."""
    names = {name.strip().lower().strip("[]") for name in configured.split(",")}
    names.add(bind_host.lower().strip("[]"))
    return frozenset(_LOOPBACK | (names - _WILDCARDS))


def host_of(header: str) -> str:
    """The host of a ``Host`` header: lower case, without the port, an IPv6 literal without brackets."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


_JSON_TYPES = frozenset({"application/json", "application/x-ndjson"})


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media in _JSON_TYPES or (media.startswith("application/") and media.endswith("+json"))


class RequestGuard:
    """The outermost ASGI layer: refuses a foreign ``Host`` (400), a write that is not JSON (415), and
    duplicate ``Authorization`` headers (400), each with a JSON body naming the header."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str]) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host: str | None = None
        content_type: str | None = None
        authorizations = 0
        for name, value in scope["headers"]:
            if name == b"host":
                host = value.decode("latin-1")
            elif name == b"content-type":
                content_type = value.decode("latin-1")
            elif name == b"authorization":
                authorizations += 1
        refusal = None
        if host is not None and host_of(host) not in self.hosts:
            refusal = (
                400,
                f"Host {host!r} is not one this tracker answers to: use localhost or 127.0.0.1, or add the "
                "name to PLATEAU_ALLOWED_HOSTS",
            )
        elif authorizations > 1:
            refusal = (400, "more than one Authorization header: send one")
        elif scope["method"] in _WRITES and not _is_json(content_type or ""):
            refusal = (
                415,
                f"Content-Type {content_type!r} is not JSON: writes take application/json bodies only "
                "(application/x-ndjson on POST /api/v1/batches)",
            )
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, detail = refusal
        body = json.dumps({"detail": detail}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
