"""Who a request comes from, as far as its address and headers tell: a loopback peer, and whether a proxy or tunnel
relayed it (they add these headers; a tunnel connects from loopback too). Used by the local gateway's front door and
by `$connect` deciding whether a client shares the gateway's machine."""

from __future__ import annotations

import ipaddress

PROXY_HEADERS = frozenset({"forwarded", "x-real-ip", "via", "cf-connecting-ip", "true-client-ip"})
"""Headers a proxy or tunnel adds, besides every `x-forwarded-*`."""


def is_proxy_header(name: str) -> bool:
    lowered = name.lower()
    return lowered in PROXY_HEADERS or lowered.startswith("x-forwarded-")


def loopback_address(host: str | None) -> bool:
    """`host` is a loopback IP address (IPv4, IPv6, or IPv4 mapped into IPv6)."""
    if not host:
        return False
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))
