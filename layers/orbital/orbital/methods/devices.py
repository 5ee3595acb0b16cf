"""Methods of the `device` family: device tokens (a credential per device, with a role and a binding) and the
one-time codes that pair a new device without copying a secret (ADR 0043). Only an admin may call them: the gateway
token, or an `admin` device token.

A token is shown once, by `device.token.create` (or the pairing exchange, `POST /api/v1/pair/exchange`); the table
keeps only a keyed hash of it. `device.token.revoke` refuses the token from the next use on and closes the sockets
open with it at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orbital.domain import roles
from orbital.engines import device_auth
from orbital.errors import BadRequestError, ForbiddenError, NotFoundError, UnavailableError
from orbital.protocol.params import Text, Whole
from orbital.protocol.registry import CLIENT, NoParams, Params, Result, Router
from orbital.store import devices

if TYPE_CHECKING:
    from orbital.protocol.context import CallContext

router = Router("device")

MAX_NAME = 64
MAX_DAYS = 3650
DAY_MS = 86_400_000


class TokenCreateParams(Params):
    name: Text = None
    role: Text = None
    nodeId: Text = None
    channel: Text = None
    accountId: Text = None
    expiresInDays: Whole = None


class TokenCreateResult(Result):
    tokenId: str
    token: str
    name: str
    role: str
    binding: dict[str, str]
    createdAt: int
    expiresAt: int | None


class TokenEntry(Result):
    tokenId: str
    name: str
    role: str
    binding: dict[str, str]
    createdAt: int
    lastUsedAt: int | None
    expiresAt: int | None
    revoked: bool


class TokenListResult(Result):
    tokens: list[TokenEntry]


class TokenRevokeParams(Params):
    tokenId: Text = None


class TokenRevokeResult(Result):
    tokenId: str
    revoked: bool
    closed: int


class PairCreateParams(Params):
    role: Text = None
    name: Text = None
    nodeId: Text = None
    channel: Text = None
    accountId: Text = None


class PairCreateResult(Result):
    code: str
    expiresAt: int


def _admin(ctx: CallContext) -> None:
    """Device tokens are the admin's alone (a socket without a role connected with the gateway token)."""
    role = ctx.conn.extra.get("role", "admin") if ctx.conn is not None else "admin"
    if role != "admin":
        raise ForbiddenError(f"Forbidden: device tokens need the admin role, this socket's token is {role}")


def _key(ctx: CallContext) -> bytes:
    found = device_auth.key(ctx.services)
    if found is None:
        raise UnavailableError("Device tokens need a gateway token: restart the gateway with one")
    return found


def _binding(role: str | None, node_id: str | None, channel: str | None, account_id: str | None) -> dict[str, str]:
    if not role:
        raise BadRequestError(f"role required: one of {', '.join(devices.ROLES)}")
    try:
        return device_auth.binding(role, node_id, channel, account_id)
    except ValueError as exc:
        raise BadRequestError(str(exc)) from None


def _name(name: str | None, *, required: bool) -> str | None:
    if name is None or not name.strip():
        if required:
            raise BadRequestError("name required")
        return None
    if len(name.strip()) > MAX_NAME:
        raise BadRequestError(f"name: at most {MAX_NAME} characters")
    return name.strip()


@router.method(
    "device.token.create", params=TokenCreateParams, result=TokenCreateResult, modes=CLIENT, scope=roles.ADMIN
)
def token_create(ctx: CallContext, params: TokenCreateParams) -> dict[str, Any]:
    """A new device token with a role (`admin`, `operator`, `client`, `viewer`, `node`, `channel`), bound for a node
    token to `nodeId` and for a channel token to `channel`/`accountId` when given; `expiresInDays` (1-3650) ends it
    by itself. The token is in this answer only: the gateway keeps a keyed hash of it."""
    _admin(ctx)
    name = _name(params.name, required=True)
    assert name is not None
    binding = _binding(params.role, params.nodeId, params.channel, params.accountId)
    days = params.expiresInDays
    if days is not None and not 1 <= days <= MAX_DAYS:
        raise BadRequestError(f"expiresInDays: a whole number of days from 1 to {MAX_DAYS}")
    now = ctx.now_ms()
    device, token = devices.create(
        ctx.services.table,
        key=_key(ctx),
        name=name,
        role=str(params.role),
        binding=binding,
        now_ms=now,
        expires_at_ms=now + days * DAY_MS if days is not None else None,
    )
    entry = device.entry()
    return {
        "tokenId": device.token_id,
        "token": token,
        "name": device.name,
        "role": device.role,
        "binding": entry["binding"],
        "createdAt": device.created_at_ms,
        "expiresAt": device.expires_at_ms,
    }


@router.method("device.token.list", params=NoParams, result=TokenListResult, modes=CLIENT, scope=roles.ADMIN)
def token_list(ctx: CallContext, params: NoParams) -> dict[str, Any]:
    """Every device token, the oldest first, revoked ones marked (never a token nor its hash)."""
    _admin(ctx)
    return {"tokens": [d.entry() for d in devices.listing(ctx.services.table)]}


@router.method(
    "device.token.revoke", params=TokenRevokeParams, result=TokenRevokeResult, modes=CLIENT, scope=roles.ADMIN
)
def token_revoke(ctx: CallContext, params: TokenRevokeParams) -> dict[str, Any]:
    """Revoke a device token: refused from now on, and the sockets open with it are closed now (`closed`: how
    many)."""
    _admin(ctx)
    token_id = params.tokenId
    if not token_id:
        raise BadRequestError("tokenId required")
    if not devices.revoke(ctx.services.table, token_id):
        raise NotFoundError(f"No device token {token_id}")
    services = ctx.services
    own = ctx.conn is not None and ctx.conn.extra.get("deviceId") == token_id
    if own:  # the caller's own socket: closed after it has its answer
        closed = device_auth.close_sockets(services, token_id, keep=ctx.connection_id) + 1

        def close_own() -> None:
            services.sender.close(ctx.connection_id, *device_auth.REVOKED_CLOSE)

        ctx.after_reply.append(close_own)
    else:
        closed = device_auth.close_sockets(services, token_id)
    return {"tokenId": token_id, "revoked": True, "closed": closed}


@router.method("device.pair.create", params=PairCreateParams, result=PairCreateResult, modes=CLIENT, scope=roles.ADMIN)
def pair_create(ctx: CallContext, params: PairCreateParams) -> dict[str, Any]:
    """A one-time pairing code (8 characters, valid 10 minutes, used once) for a new device of `role` (and
    binding, as in `device.token.create`): the device swaps it for its own token at `POST /api/v1/pair/exchange`
    (`orbital node --pair CODE`, `orbital login --pair CODE`)."""
    _admin(ctx)
    _key(ctx)  # a gateway that issues no tokens hands out no codes either
    binding = _binding(params.role, params.nodeId, params.channel, params.accountId)
    code, expires = devices.create_pair_code(
        ctx.services.table,
        role=str(params.role),
        name=_name(params.name, required=False),
        binding=binding,
        now_ms=ctx.now_ms(),
    )
    return {"code": code, "expiresAt": expires}
