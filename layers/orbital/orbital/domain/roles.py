"""Roles and scopes (ADR 0042): what a device may do, checked by the dispatcher for every method it calls.

Every method of the registry declares the one scope it needs (per connection mode where its modes differ in what
they may do); a role is a set of scopes. A connection's role comes with its credential (`conn.extra["role"]`); a
connection without one holds the gateway token, or is a loopback client of a gateway without a token, and is
`admin`.

Pure: no I/O, nothing of the layers above.
"""

from __future__ import annotations

from typing import Final

ADMIN: Final = "admin"
"""Device tokens, pairing, WindieOS installs, and writing secret values of the configuration."""
OPERATE: Final = "operate"
"""Changing the gateway: the configuration (but its secrets), cron jobs, channels, skills, the heartbeat, nodes'
tools and files, the workspace, and answering any session's tool approvals."""
CHAT: Final = "chat"
"""Talking to agents: sending messages, resetting, patching and compacting sessions, answering the tool approvals of
the runs this device started."""
READ: Final = "read"
"""Reading what the gateway holds: sessions, history, the configuration with its secrets masked, jobs, statuses."""
NODE: Final = "node"
"""What a tool host sends: the answers to the calls addressed to it, its events, its tool results' files."""
CHANNEL: Final = "channel"
"""What a messenger bridge sends: inbound messages and answers to control calls."""
CONNECT: Final = "connect"
"""What every connected device may do: the handshake, and listing the tools (a keepalive for nodes and the CLI)."""

SCOPES: Final = (ADMIN, OPERATE, CHAT, READ, NODE, CHANNEL, CONNECT)

ROLES: Final[dict[str, frozenset[str]]] = {
    "admin": frozenset(SCOPES),
    "operator": frozenset({OPERATE, CHAT, READ, NODE, CHANNEL, CONNECT}),
    "client": frozenset({CHAT, READ, CONNECT}),
    "viewer": frozenset({READ, CONNECT}),
    "node": frozenset({NODE, CONNECT}),
    "channel": frozenset({CHANNEL, CONNECT}),
}
"""Role -> the scopes it holds."""

DEFAULT_ROLE: Final = "admin"
"""The role of a connection whose credential names none (the gateway token; a token-less local gateway)."""


def role_of(extra: dict[str, object] | None) -> str:
    """The role a connection record's `extra` carries (`DEFAULT_ROLE` when it names none)."""
    role = (extra or {}).get("role")
    return role if isinstance(role, str) and role else DEFAULT_ROLE


def allows(role: str, scope: str) -> bool:
    """Whether `role` holds `scope`; an unknown role holds nothing (deny by default)."""
    return scope in ROLES.get(role, frozenset())


def refusal(method: str, scope: str, role: str) -> str:
    """The sentence a refused call gets (with code 403)."""
    return f"Method {method} needs scope {scope}; this device's role is {role}"
