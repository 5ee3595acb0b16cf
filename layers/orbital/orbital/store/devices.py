"""Device tokens: a credential per device (a laptop's node, a Telegram bridge, a phone), each with one role and,
for a node or a channel, the identity it may connect as; revoked one by one (ADR 0043).

A token is `orb_dev_{tokenId}_{secret}`: the id (16 hex digits) names the record, so checking a token is one point
read; the secret is 32 random bytes in URL-safe base64. The table keeps only an HMAC-SHA-256 of the whole token,
keyed with a key derived from the gateway token (`device_key`): a copy of the table hands out no credential, and
changing the gateway token ends every device token, as it ends every other way in (ADR 0025). A gateway without a
token (`--auth same-user`) has no key and issues none.

Pairing codes (`DEVICEPAIRS`) are 8 characters of an alphabet without look-alikes, valid 10 minutes, and used once:
the exchange deletes the code in the same request that reads it (one conditional delete), so two exchanges of one
code never both get a token.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from typing import Any

from orbital.store import conditions as cond
from orbital.store import keys
from orbital.store.table import ConflictError, Table

TOKEN_PREFIX = "orb_dev_"
ID_HEX = 16
ROLES = ("admin", "operator", "client", "viewer", "node", "channel")
LAST_USED_EVERY_MS = 60_000
"""`lastUsedAt` is written at most once a minute per token (a write per use would cost more than it tells)."""
SOCKET_TTL_S = 3 * 3600
"""How long a socket's entry under its token is kept: beyond the two hours API Gateway lets a socket live."""

PAIR_ALPHABET = "23456789ABCDEFGHJKMNPQRSTVWXYZ"
"""No 0/O, 1/I/L, U: a code read aloud or typed from a screen is read right."""
PAIR_LENGTH = 8
PAIR_TTL_MS = 10 * 60_000

_KEY_LABEL = b"orbital device tokens v1"


def device_key(gateway_token: str) -> bytes:
    """The key device tokens are hashed with: derived from the gateway token (never stored)."""
    return hmac.new(gateway_token.encode("utf-8"), _KEY_LABEL, hashlib.sha256).digest()


def _hash(token: str, key: bytes) -> str:
    return hmac.new(key, token.encode("utf-8"), hashlib.sha256).hexdigest()


def looks_like_token(value: str) -> bool:
    return value.startswith(TOKEN_PREFIX)


def token_id_of(token: str) -> str | None:
    """The id part of a device token, or None when it is no well-formed one."""
    if not looks_like_token(token):
        return None
    rest = token[len(TOKEN_PREFIX) :]
    token_id, sep, secret = rest.partition("_")
    if not sep or len(token_id) != ID_HEX or not secret or any(c not in "0123456789abcdef" for c in token_id):
        return None
    return token_id


@dataclass(frozen=True)
class Device:
    token_id: str
    name: str
    role: str
    binding: dict[str, str] = field(default_factory=dict)
    """`{nodeId}` for a node token, `{channel, accountId}` for a channel token; empty when not bound."""
    created_at_ms: int = 0
    last_used_at_ms: int | None = None
    expires_at_ms: int | None = None
    revoked: bool = False

    def entry(self) -> dict[str, Any]:
        """What `device.token.list` shows of it (never the secret nor its hash)."""
        return {
            "tokenId": self.token_id,
            "name": self.name,
            "role": self.role,
            "binding": dict(self.binding),
            "createdAt": self.created_at_ms,
            "lastUsedAt": self.last_used_at_ms,
            "expiresAt": self.expires_at_ms,
            "revoked": self.revoked,
        }


def _device(token_id: str, data: dict[str, Any], attrs: dict[str, Any]) -> Device:
    binding = data.get("binding")
    last = attrs.get("lastUsedAt")
    expires = data.get("expiresAt")
    created = data.get("createdAt")
    return Device(
        token_id=token_id,
        name=str(data.get("name", "")),
        role=str(data.get("role", "")),
        binding={str(k): str(v) for k, v in binding.items()} if isinstance(binding, dict) else {},
        created_at_ms=created if isinstance(created, int) else 0,
        last_used_at_ms=int(last) if isinstance(last, int | float) and not isinstance(last, bool) else None,
        expires_at_ms=expires if isinstance(expires, int) else None,
        revoked=attrs.get("revoked") is True,
    )


def create(
    table: Table,
    *,
    key: bytes,
    name: str,
    role: str,
    binding: dict[str, str],
    now_ms: int,
    expires_at_ms: int | None,
) -> tuple[Device, str]:
    """A new device token and its record (the only time the token exists in the clear)."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")
    while True:
        token_id = secrets.token_hex(ID_HEX // 2)
        token = f"{TOKEN_PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
        data: dict[str, Any] = {
            "hash": _hash(token, key),
            "name": name,
            "role": role,
            "binding": dict(binding),
            "createdAt": now_ms,
            "expiresAt": expires_at_ms,
        }
        try:
            table.put(keys.device(token_id), data, attrs={"revoked": False}, condition=cond.not_exists("PK"))
        except ConflictError:  # 64 random bits colliding with an existing id: draw again
            continue
        return _device(token_id, data, {"revoked": False}), token


def get(table: Table, token_id: str) -> Device | None:
    rec = table.get(keys.device(token_id))
    return None if rec is None else _device(token_id, rec.data, rec.attrs)


def authenticate(table: Table, token: str, *, key: bytes, now_ms: int) -> Device | None:
    """The live device a token belongs to (one point read), or None: unknown, wrong secret, revoked or expired.
    Notes the use (`lastUsedAt`, at most once a minute: a conditional write that fails quietly)."""
    token_id = token_id_of(token)
    if token_id is None:
        return None
    rec = table.get(keys.device(token_id))
    if rec is None:
        return None
    stored = rec.data.get("hash")
    if not isinstance(stored, str) or not hmac.compare_digest(stored.encode(), _hash(token, key).encode()):
        return None
    device = _device(token_id, rec.data, rec.attrs)
    if device.revoked or (device.expires_at_ms is not None and device.expires_at_ms <= now_ms):
        return None
    if device.last_used_at_ms is None or now_ms - device.last_used_at_ms >= LAST_USED_EVERY_MS:
        try:
            table.update(
                keys.device(token_id),
                set_attrs={"lastUsedAt": now_ms},
                condition=cond.exists("PK")
                & (cond.not_exists("lastUsedAt") | cond.lt("lastUsedAt", now_ms - LAST_USED_EVERY_MS + 1)),
                return_values="NONE",
            )
        except ConflictError:  # another use noted it meanwhile (or the record went)
            pass
    return device


def listing(table: Table) -> list[Device]:
    """Every device token, the oldest first (revoked ones included, marked)."""
    found = [_device(rec.sk, rec.data, rec.attrs) for rec in table.query(keys.DEVICES_PK)]
    return sorted(found, key=lambda d: (d.created_at_ms, d.token_id))


def revoke(table: Table, token_id: str) -> bool:
    """Mark a token revoked (refused from the next read on). False when there is no such token."""
    try:
        table.update(
            keys.device(token_id), set_attrs={"revoked": True}, condition=cond.exists("PK"), return_values="NONE"
        )
    except ConflictError:
        return False
    return True


# --- the sockets opened with a token ------------------------------------------------------------------------------


def note_socket(table: Table, token_id: str, connection_id: str, *, now_ms: int) -> None:
    """Remember that `connection_id` was opened with the token, so revoking it closes the socket."""
    table.put(keys.device_socket(token_id, connection_id), {}, ttl=now_ms // 1000 + SOCKET_TTL_S)


def sockets(table: Table, token_id: str) -> list[str]:
    return [rec.sk for rec in table.query(keys.device_sockets_pk(token_id))]


def forget_socket(table: Table, token_id: str, connection_id: str) -> None:
    table.delete(keys.device_socket(token_id, connection_id))


# --- pairing codes -------------------------------------------------------------------------------------------------


def normalize_code(code: str) -> str:
    """A code as typed (any case, with spaces or dashes) in its stored form."""
    return "".join(c for c in code.upper() if c not in " -")


def create_pair_code(
    table: Table, *, role: str, name: str | None, binding: dict[str, str], now_ms: int
) -> tuple[str, int]:
    """A new one-time code for a device of `role` (and binding): (code, expiresAt)."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")
    expires = now_ms + PAIR_TTL_MS
    while True:
        code = "".join(secrets.choice(PAIR_ALPHABET) for _ in range(PAIR_LENGTH))
        data = {"role": role, "name": name, "binding": dict(binding), "expiresAt": expires}
        try:
            table.put(keys.device_pair(code), data, ttl=expires // 1000 + 1, condition=cond.not_exists("PK"))
        except ConflictError:
            continue
        return code, expires


@dataclass(frozen=True)
class PairGrant:
    role: str
    name: str | None
    binding: dict[str, str]


def take_pair_code(table: Table, code: str, *, now_ms: int) -> PairGrant | None:
    """Use a code: deleted in the same request that reads it, so only one exchange ever gets it. None for a code
    that is unknown, used already or expired."""
    normalized = normalize_code(code)
    if len(normalized) != PAIR_LENGTH or any(c not in PAIR_ALPHABET for c in normalized):
        return None
    try:
        old = table.delete(keys.device_pair(normalized), condition=cond.exists("PK"), return_old=True)
    except ConflictError:  # none (another exchange took it first)
        return None
    return _grant(old.data if old is not None else None, now_ms)


def _grant(data: dict[str, Any] | None, now_ms: int) -> PairGrant | None:
    if data is None:
        return None
    expires = data.get("expiresAt")
    if not isinstance(expires, int) or expires <= now_ms:
        return None
    binding = data.get("binding")
    name = data.get("name")
    return PairGrant(
        role=str(data.get("role", "")),
        name=name if isinstance(name, str) else None,
        binding={str(k): str(v) for k, v in binding.items()} if isinstance(binding, dict) else {},
    )
