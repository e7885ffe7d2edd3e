"""The webhook URL policy: public addresses only, in any spelling, unless the operator allows more; the
delivery connects to the address checked."""

from __future__ import annotations

import pytest

from plateau_tracker.server.services.webhook_targets import (
    Allowed,
    RefusedTargetError,
    Target,
    check,
    pinned,
)

NOTHING_ALLOWED = Allowed()


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://127.0.0.1:8080/admin", "loopback"),
        ("http://127.1.2.3/", "loopback"),
        ("http://[::1]/", "loopback"),
        ("http://localhost:8765/api/v1/runs", "loopback name"),
        ("http://api.localhost/", "loopback name"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),  # IPv4-mapped
        ("http://[2002:7f00:1::]/", "loopback"),  # 6to4 around 127.0.0.1
        ("http://0x7f000001/", "loopback"),  # a spelling inet_aton reads
        ("http://2130706433/", "loopback"),
        ("http://0177.0.0.1/", "loopback"),
        ("http://10.1.2.3/", "private"),
        ("http://172.16.0.1/", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://[fd00:ec2::254]/", "private"),  # AWS's IPv6 metadata service
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[fe80::1]/", "link-local"),
        ("http://100.100.100.200/", "not a public address"),  # Alibaba's metadata, shared space
        ("http://224.0.0.1/", "multicast"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://240.0.0.1/", "reserved"),
        ("https://192.0.2.10/", "special-purpose"),  # documentation range
    ],
)
def test_internal_addresses_are_refused_in_every_spelling(url: str, kind: str) -> None:
    with pytest.raises(RefusedTargetError, match=kind):
        check(url, NOTHING_ALLOWED)


@pytest.mark.parametrize("url", ["ftp://8.8.8.8/", "http:///path", "http://8.8.8.8:99999/"])
def test_urls_that_name_no_usable_http_target_are_refused(url: str) -> None:
    with pytest.raises(RefusedTargetError):
        check(url, NOTHING_ALLOWED)


def test_a_public_address_is_accepted_and_connected_to_as_checked() -> None:
    target = check("https://8.8.8.8:8443/hook?x=1", NOTHING_ALLOWED)
    assert target == Target("https://8.8.8.8:8443/hook?x=1", "8.8.8.8", "8.8.8.8")


def test_the_operator_allows_networks_and_hosts() -> None:
    allowed = Allowed.parse(" 127.0.0.1/32, 10.0.0.0/8,hooks.internal ,[::1]")
    assert check("http://127.0.0.1:9000/h", allowed).address == "127.0.0.1"
    assert check("http://10.20.30.40/h", allowed).address == "10.20.30.40"
    assert check("http://[::1]:9000/h", allowed).address == "::1"
    by_name = check("http://Hooks.Internal:9000/h", allowed)
    assert by_name.address is None  # allowed by name: connected to as the system resolves it
    with pytest.raises(RefusedTargetError, match="private"):
        check("http://192.168.0.1/", allowed)
    with pytest.raises(RefusedTargetError, match="loopback"):
        check("http://127.0.0.2/", allowed)


def test_a_checked_target_pins_the_address_and_names_the_host() -> None:
    url, headers, extensions = pinned(
        Target("https://hooks.example.com:8443/a?b=1", "hooks.example.com", "93.184.216.34")
    )
    assert url == "https://93.184.216.34:8443/a?b=1"
    assert headers == {"host": "hooks.example.com:8443"}
    assert extensions == {"sni_hostname": "hooks.example.com"}
    url, headers, extensions = pinned(
        Target("http://hooks.example.com/a", "hooks.example.com", "2001:db8::5")
    )
    assert url == "http://[2001:db8::5]/a"
    assert headers == {"host": "hooks.example.com"}
    assert extensions == {}
    assert pinned(Target("http://hooks.internal/a", "hooks.internal", None)) == (
        "http://hooks.internal/a",
        {},
        {},
    )
