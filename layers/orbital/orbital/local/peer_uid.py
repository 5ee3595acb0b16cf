"""Which OS user owns the other end of a loopback TCP connection (Linux: `/proc/net/tcp` and `/proc/net/tcp6`).

A client on this machine connecting from `peer` to the gateway at `ours` has a socket of its own, listed by the
kernel with the local address `peer` and the remote address `ours`, and the uid of the user who opened it. The
gateway's `same-user` mode admits a connection only when that uid is its own (ADR 0025). Where the kernel does not
publish these tables (no `/proc/net/tcp`: macOS, Windows, a locked-down container), the mode cannot tell one user
from another and refuses to start.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterable
from pathlib import Path

TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))

Address = tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]


def unsupported(tables: Iterable[Path] | None = None) -> str | None:
    """Why this platform cannot tell who owns a connection, or None when it can."""
    if not any(table.exists() for table in (TABLES if tables is None else tables)):
        return "this system does not list its sockets' owners in /proc/net/tcp, so it cannot tell who connects"
    return None


def _address(field: str) -> Address | None:
    """`0100007F:1F90` (IPv4) or 32 hex digits and a port (IPv6), as the kernel prints them: each 32-bit word of the
    address in this machine's byte order."""
    host, _, port = field.partition(":")
    try:
        words = [int(host[i : i + 8], 16) for i in range(0, len(host), 8)]
        raw = b"".join(struct.pack("=I", word) for word in words)
        address = ipaddress.ip_address(raw)
        number = int(port, 16)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped, number
    return address, number


def _normal(host: str, port: int) -> Address | None:
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped, port
    return address, port


def owner_in(text: str, peer: Address, ours: Address) -> int | None:
    """The uid on the line of a `/proc/net/tcp{,6}` text whose local address is `peer` and remote `ours`."""
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        if _address(fields[1]) == peer and _address(fields[2]) == ours:
            try:
                return int(fields[7])
            except ValueError:
                return None
    return None


def owner(peer: tuple[str, int], ours: tuple[str, int], tables: Iterable[Path] = TABLES) -> int | None:
    """The uid of the user whose socket at `peer` is connected to `ours`, or None when no table lists it."""
    peer_address = _normal(*peer)
    our_address = _normal(*ours)
    if peer_address is None or our_address is None:
        return None
    for table in tables:
        try:
            text = table.read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        found = owner_in(text, peer_address, our_address)
        if found is not None:
            return found
    return None
