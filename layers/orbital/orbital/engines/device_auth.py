"""Device tokens where a credential is checked (ADR 0043): the key they are hashed with, a presented token's device,
the sockets opened with one, and closing those when it is revoked. `runtime.credentials` (the upgrade and HTTP),
`connect` and the dialects' own credentials all check a device token here, the same way.

Nothing is cached: every check is one point read of the token's record, so a revoked token is refused at its next
use, locally and on AWS alike.
"""

from __future__ import annotations

import logging

from orbital.aws import secrets
from orbital.ports.services import Services
from orbital.store import devices

log = logging.getLogger("orbital.devices")

REVOKED_CLOSE = (4003, "Device token revoked")
"""How a socket opened with a token is closed when the token is revoked."""

ADMIN_ROLES = frozenset({"admin"})
CLIENT_ROLES = frozenset({"admin", "operator", "client", "viewer"})
"""Roles whose token may speak as a client (GSV client mode and every other gateway's dialect)."""


def key(services: Services) -> bytes | None:
    """The key device tokens are hashed with, derived from the gateway token; None on a gateway without one (it
    issues no device tokens). Raises what reading the gateway token raises."""
    if not secrets.token_configured(services.settings):
        return None
    token = secrets.gateway_token(services.settings)
    return devices.device_key(token) if token else None


def authenticate(services: Services, presented: str | None) -> devices.Device | None:
    """The live device of a presented token, or None (not a device token, unknown, wrong, revoked, expired, or a
    gateway without a token)."""
    if not presented or not devices.looks_like_token(presented):
        return None
    device_key = key(services)
    if device_key is None:
        return None
    return devices.authenticate(services.table, presented, key=device_key, now_ms=services.now_ms())


def note_socket(services: Services, device: devices.Device, connection_id: str) -> None:
    devices.note_socket(services.table, device.token_id, connection_id, now_ms=services.now_ms())


def close_sockets(services: Services, token_id: str, *, keep: str | None = None) -> int:
    """Close every socket still open with a (just revoked) token but `keep`: locally in this process, on AWS
    through API Gateway's management API (`DeleteConnection`). Returns how many were open."""
    closed = 0
    for connection_id in devices.sockets(services.table, token_id):
        if connection_id == keep:
            continue
        conn = services.connections.get(connection_id)
        if conn is not None and conn.extra.get("deviceId") == token_id:
            services.sender.close(connection_id, *REVOKED_CLOSE)
            closed += 1
        devices.forget_socket(services.table, token_id, connection_id)
    if closed:
        log.info("device token %s revoked: %d socket(s) closed", token_id, closed)
    return closed


def binding(role: str, node_id: str | None, channel: str | None, account_id: str | None) -> dict[str, str]:
    """A token's binding from what its creator gave; ValueError for one that does not fit the role."""
    if role not in devices.ROLES:
        raise ValueError(f"role must be one of {', '.join(devices.ROLES)}")
    if node_id is not None and role != "node":
        raise ValueError("nodeId binds only a node token (role node)")
    if (channel is not None or account_id is not None) and role != "channel":
        raise ValueError("channel and accountId bind only a channel token (role channel)")
    if account_id is not None and channel is None:
        raise ValueError("accountId needs channel")
    found = {"nodeId": node_id, "channel": channel, "accountId": account_id}
    return {k: v for k, v in found.items() if v}


def exchange(services: Services, code: str, name: str | None) -> tuple[devices.Device, str] | None:
    """A pairing code swapped for a new device token of the code's role and binding (the code is gone after it);
    None for a code that is wrong, used or expired, or a gateway that issues no device tokens."""
    device_key = key(services)
    if device_key is None:
        return None
    now = services.now_ms()
    grant = devices.take_pair_code(services.table, code, now_ms=now)
    if grant is None:
        return None
    return devices.create(
        services.table,
        key=device_key,
        name=(name or grant.name or f"paired {grant.role}")[:64],
        role=grant.role,
        binding=grant.binding,
        now_ms=now,
        expires_at_ms=None,
    )
