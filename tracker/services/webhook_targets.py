"""Where webhooks may be sent: public addresses only, unless the operator allows more.

A webhook URL is a request the tracker makes on a client's behalf, from inside its network. Left open,
any write token could reach the tracker's own loopback services, the private network and the cloud
metadata endpoint, and read their answers back in the delivery log. So a URL's host must resolve to global
unicast addresses only: loopback, private, link-local (cloud metadata included), shared, reserved,
documentation and multicast addresses are refused, in any spelling (an IPv4 address in an IPv6 one
included). The check runs on the resolved addresses, at registration and again at every delivery, and the
delivery connects to the very address it checked, so a name that resolves elsewhere later (DNS rebinding)
gains nothing. An operator allows a receiver on the same machine or network with
``PLATEAU_WEBHOOK_ALLOW``: host names and networks, comma-separated (``127.0.0.1/32,hooks.internal``).
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class RefusedTargetError(ValueError):
    """The URL may not be a webhook's target; the message says why, for people."""


class UnresolvedTargetError(RefusedTargetError):
    """The URL's host does not resolve now (a later delivery may find it)."""


@dataclass(frozen=True)
class Allowed:
    """What the operator allows beyond public addresses: host names (as written in URLs) and networks."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, setting: str) -> Allowed:
        """From ``PLATEAU_WEBHOOK_ALLOW``: comma-separated host names, addresses and networks."""
        hosts: set[str] = set()
        networks: list[Network] = []
        for entry in (part.strip() for part in setting.split(",")):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                hosts.add(entry.lower().rstrip("."))
        return cls(frozenset(hosts), tuple(networks))

    def covers(self, address: Address) -> bool:
        return any(address in network for network in self.networks)


@dataclass(frozen=True)
class Target:
    """A checked URL: the address to connect to, and the host name the request names (Host, TLS SNI)."""

    url: str
    host: str
    address: str | None  # None: the host is allowed by name, connected to as the system resolves it


def _embedded(address: Address) -> Address:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, Teredo), else the address itself."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = address.ipv4_mapped or address.sixtofour or (address.teredo[1] if address.teredo else None)
        if inner is not None:
            return inner
    return address


def _refusal(address: Address) -> str | None:
    """Why ``address`` may not be a webhook's target, or None for a global unicast address."""
    address = _embedded(address)
    kinds = (
        ("loopback", address.is_loopback),
        ("link-local (the cloud metadata service is one)", address.is_link_local),
        ("multicast", address.is_multicast),
        ("unspecified", address.is_unspecified),
        ("reserved", address.is_reserved),
        ("private or special-purpose", address.is_private),
    )
    for kind, found in kinds:
        if found:
            return f"{address} is a {kind} address"
    if not address.is_global:
        return f"{address} is not a public address"
    return None


def _resolve(host: str, port: int) -> list[Address]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise UnresolvedTargetError(f"the host {host!r} does not resolve") from None
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def _refused(host: str, reason: str) -> str:
    return (
        f"webhooks may not be sent to {host}: {reason} (an operator allows such a receiver with "
        "PLATEAU_WEBHOOK_ALLOW)"
    )


def check(url: str, allowed: Allowed) -> Target:
    """The target of ``url`` if webhooks may go there, else :class:`RefusedTargetError` saying why. Every
    address the host resolves to must be public, or in an allowed network; a host allowed by name is not
    resolved."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise RefusedTargetError("the URL must start with http:// or https://")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise RefusedTargetError("the URL names no host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise RefusedTargetError("the URL's port is not a number from 0 to 65535") from None
    if host.lower() in allowed.hosts:
        return Target(url, host, None)
    try:
        literal: Address | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    name = host.lower()
    if literal is None and (name in ("localhost", "localhost.localdomain") or name.endswith(".localhost")):
        raise RefusedTargetError(_refused(host, f"{host} is a loopback name"))
    addresses = [literal] if literal is not None else _resolve(host, port)
    for address in addresses:
        if allowed.covers(address) or allowed.covers(_embedded(address)):
            continue
        reason = _refusal(address)
        if reason is not None:
            raise RefusedTargetError(_refused(host, reason))
    return Target(url, host, str(addresses[0]))


def pinned(target: Target) -> tuple[str, dict[str, str], dict[str, str]]:
    """The URL to request, the Host header and the request extensions that connect to the address checked
    while naming the host (HTTP ``Host``, TLS SNI and certificate check)."""
    if target.address is None:
        return target.url, {}, {}
    parts = urlsplit(target.url)
    literal = f"[{target.address}]" if ":" in target.address else target.address
    netloc = literal if parts.port is None else f"{literal}:{parts.port}"
    url = parts._replace(netloc=netloc).geturl()
    host_header = parts.netloc.rsplit("@", 1)[-1]
    extensions = {"sni_hostname": target.host} if parts.scheme == "https" else {}
    return url, {"host": host_header}, extensions
