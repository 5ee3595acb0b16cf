"""Which OS user owns the other end of a loopback TCP connection (Linux: the kernel's socket diagnostics, else
`/proc/net/tcp` and `/proc/net/tcp6`).

The kernel is asked about the one socket (a `NETLINK_SOCK_DIAG` request naming its four-tuple: about 20 µs); where
netlink is not allowed, the tables are read (every socket of the machine: milliseconds on a busy one).

A client on this machine connecting from `peer` to the gateway at `ours` has a socket of its own, listed by the
kernel with the local address `peer` and the remote address `ours`, and the uid of the user who opened it. The
gateway's `same-user` mode admits a connection only when that uid is its own (ADR 0025). Where the kernel does not
publish these tables (no `/proc/net/tcp`: macOS, Windows, a locked-down container), the mode cannot tell one user
from another and refuses to start.
"""

from __future__ import annotations

import ipaddress
import socket
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


def _normal(host: str, port: int) -> Address | None:
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped, port
    return address, port


def _printed(address: Address) -> list[str]:
    """`address` as the kernel prints it: `0100007F:1F90` in `/proc/net/tcp` and, for IPv6 or an IPv4 address seen
    through an IPv6 socket (`::ffff:127.0.0.1`), 32 hex digits and the port in `/proc/net/tcp6`. Each 32-bit word of
    the address is in this machine's byte order."""
    host, port = address
    forms: list[bytes] = []
    if isinstance(host, ipaddress.IPv4Address):
        forms += [host.packed, ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + host.packed).packed]
    else:
        forms.append(host.packed)
    printed = []
    for raw in forms:
        words = struct.unpack(f"={len(raw) // 4}I", raw)
        printed.append("".join(f"{word:08X}" for word in words) + f":{port:04X}")
    return printed


def owner_in(text: str, peer: Address, ours: Address) -> int | None:
    """The uid on the line of a `/proc/net/tcp{,6}` text whose local address is `peer` and remote `ours`. A search
    for the pair as printed, not a parse of every line: the tables list every socket of the machine, and this runs
    at each connection."""
    for local in _printed(peer):
        for remote in _printed(ours):
            if len(local) != len(remote):
                continue
            at = text.find(f" {local} {remote} ")
            if at < 0:
                continue
            end = text.find("\n", at)
            fields = text[at : end if end >= 0 else len(text)].split()
            if len(fields) >= 7:
                try:
                    return int(fields[6])
                except ValueError:
                    return None
    return None


NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLMSG_ERROR = 2
_UID_AT = 16 + 4 + 48 + 12
"""Where `idiag_uid` sits in the answer: after the netlink header, four bytes of state, the socket id and three
words (expires, rqueue, wqueue)."""


class _NoDiagnosticsError(Exception):
    """The kernel's socket diagnostics cannot be asked here (no netlink, or not allowed)."""


def _asked(peer: Address, ours: Address) -> int | None:
    """The uid of the socket at `peer` connected to `ours`, from the kernel's socket diagnostics; None when the
    kernel knows no such socket. `_NoDiagnosticsError` when it cannot be asked."""
    peer_host, ours_host = peer[0], ours[0]
    if isinstance(peer_host, ipaddress.IPv4Address) != isinstance(ours_host, ipaddress.IPv4Address):
        peer_host, ours_host = _as_v6(peer_host), _as_v6(ours_host)
    family = socket.AF_INET if isinstance(peer_host, ipaddress.IPv4Address) else socket.AF_INET6
    sock_id = (
        struct.pack("!HH", peer[1], ours[1])
        + peer_host.packed.ljust(16, b"\0")
        + ours_host.packed.ljust(16, b"\0")
        + struct.pack("=III", 0, 0xFFFFFFFF, 0xFFFFFFFF)  # any interface, no cookie
    )
    request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + sock_id  # every state
    header = struct.pack("=IHHII", 16 + len(request), SOCK_DIAG_BY_FAMILY, 1, 1, 0)  # NLM_F_REQUEST
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as link:
            link.settimeout(1.0)
            link.send(header + request)
            answer = link.recv(8192)
    except (AttributeError, OSError) as exc:  # no AF_NETLINK (not Linux), or refused by a sandbox
        raise _NoDiagnosticsError(str(exc)) from None
    if len(answer) < 16:
        raise _NoDiagnosticsError("a short answer")
    kind = struct.unpack_from("=H", answer, 4)[0]
    if kind == NLMSG_ERROR:
        errno = -struct.unpack_from("=i", answer, 16)[0] if len(answer) >= 20 else 0
        if errno == 2:  # ENOENT: no such socket
            return None
        raise _NoDiagnosticsError(f"errno {errno}")
    if kind != SOCK_DIAG_BY_FAMILY or len(answer) < _UID_AT + 4:
        raise _NoDiagnosticsError(f"an answer of type {kind}")
    return int(struct.unpack_from("=I", answer, _UID_AT)[0])


def _as_v6(host: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv6Address:
    if isinstance(host, ipaddress.IPv6Address):
        return host
    return ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + host.packed)


def owner(peer: tuple[str, int], ours: tuple[str, int], tables: Iterable[Path] = TABLES) -> int | None:
    """The uid of the user whose socket at `peer` is connected to `ours`, or None when the kernel lists none.
    Asks the kernel's socket diagnostics for that one socket (only for the live tables: a test's `tables` are read
    as given); reads the tables where it cannot."""
    peer_address = _normal(*peer)
    our_address = _normal(*ours)
    if peer_address is None or our_address is None:
        return None
    if tables is TABLES:
        try:
            return _asked(peer_address, our_address)
        except _NoDiagnosticsError:
            pass
    for table in tables:
        try:
            text = table.read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        found = owner_in(text, peer_address, our_address)
        if found is not None:
            return found
    return None
