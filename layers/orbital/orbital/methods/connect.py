"""`connect` (spec §1.3-§1.4): protocol check, token, mode registration, replacement of older sockets.

Families that act when a node (re)registers hook in with `Router.on_node_connected`."""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

from orbital.aws import secrets
from orbital.domain import mcp_names, roles
from orbital.domain.capabilities import RuntimeInvalidError, validate_node_runtime
from orbital.engines import device_auth, socket_gate
from orbital.errors import RpcError, UnavailableError
from orbital.protocol.frames import PROTOCOL_VERSION, SERVER_VERSION, limits
from orbital.protocol.params import GivenObject, Items, Text, Whole
from orbital.protocol.registry import EVERY_MODE, Params, Result, Router
from orbital.store import devices
from orbital.store.connections import Connection

if TYPE_CHECKING:
    from orbital.engines.deferred import PendingCall
    from orbital.ports.services import Services
    from orbital.protocol.context import CallContext

router = Router("connect")

EVENTS = [
    "chat",
    "tool.invoke",
    "tool.result",
    "node.probe",
    "logs.get",
    "channel.outbound",
    "channel.typing",
    "transfer.send",
    "transfer.receive",
    "transfer.start",
    "transfer.end",
    "connection.closing",
    "approval.requested",
    "approval.resolved",
    "spend.alert",
]


class ClientInfo(BaseModel):
    # lenient, like every field of connect: a value of the wrong type reads as absent
    model_config = ConfigDict(extra="allow")
    id: Text = None
    version: Text = None
    platform: Text = None
    mode: Text = None
    channel: Text = None
    accountId: Text = None


class AuthInfo(BaseModel):
    model_config = ConfigDict(extra="allow")
    token: Text = None


def _object(value: Any) -> Any:
    """A nested object of connect; anything but an object reads as absent."""
    return value if isinstance(value, dict | BaseModel) else None


class ConnectParams(Params):
    minProtocol: Whole = None
    maxProtocol: Whole = None
    client: Annotated[ClientInfo | None, BeforeValidator(_object)] = None
    tools: Items = None
    nodeRuntime: GivenObject = None
    auth: Annotated[AuthInfo | None, BeforeValidator(_object)] = None


class HelloOk(Result):
    type: str
    protocol: int
    server: dict[str, Any]
    features: dict[str, Any]


def expected_token(ctx: CallContext) -> str | None:
    """The one credential a socket must present (None: none is asked for): the gateway token (`--token` locally,
    the deployment's secret on AWS). Only a gateway without one (a local gateway, which then serves this machine
    alone) honours GSV's `auth.token` from the configuration instead; where a gateway token exists, a configured
    `auth.token` is no credential at all, so rotating the gateway token revokes every way in (ADR 0025)."""
    settings = ctx.services.settings
    if secrets.token_configured(settings):
        token = secrets.gateway_token(settings)
        if not token:  # a secret holding no text (blank, or stored as binary): nobody gets in, never everybody
            raise UnavailableError("The gateway token could not be read")
        return token
    if settings.require_token:  # a deployment without its token serves nothing
        raise UnavailableError("Gateway auth token not configured")
    configured = (ctx.config().get("auth") or {}).get("token")
    return configured if isinstance(configured, str) and configured else None


def token_matches(given: str | None, expected: str) -> bool:
    """Constant-time comparison (whatever `given` is, the time does not tell how much of it matched)."""
    return hmac.compare_digest((given or "").encode(), expected.encode())


def _tool_names(tools: list[Any]) -> list[str]:
    names = []
    for tool in tools:
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or not tool["name"].strip():
            raise RpcError("Invalid tool definition: every tool needs a name", code=103)
        names.append(tool["name"])
    return names


def _replace(ctx: CallContext, previous: str | None, reason: str) -> None:
    if previous and previous != ctx.connection_id:
        sender = ctx.services.sender

        def close_old() -> None:
            sender.close(previous, 1000, reason)

        ctx.after_reply.append(close_old)


def _save(ctx: CallContext, conn: Connection, extra: dict[str, Any]) -> None:
    """Store the socket's record before it claims an id, so a `$disconnect` handled at the same time (another Lambda
    on AWS) finds what to release: see `_still_open`."""
    if extra:
        conn.extra = extra
    ctx.services.connections.save(conn)


def _still_open(ctx: CallContext, conn: Connection) -> None:
    """After the claim: a `$disconnect` that removed the record before the claim landed released nothing, so the
    claim would outlive its socket. Give it back and stop here. (A `$disconnect` after this read finds the record and
    releases the claim itself.)"""
    if ctx.services.connections.get(conn.connection_id) is not None:
        return
    ctx.services.connections.release_identity(conn)
    raise UnavailableError("The socket closed while connecting")


def _release_previous_identity(ctx: CallContext, conn: Connection) -> None:
    """A socket that connects again under another identity gives up the old one."""
    old = ctx.services.connections.get(ctx.connection_id)
    if old is None:
        return
    repo = ctx.services.connections
    same = (old.mode, old.client_id, old.node_id, old.channel_key) == (
        conn.mode,
        conn.client_id,
        conn.node_id,
        conn.channel_key,
    )
    if not same:
        repo.release_identity(old, ctx.connection_id)


def _as_bound(device: devices.Device, mode: str, raw_id: str | None, client: ClientInfo) -> str | None:
    """What a device token's role and binding allow this socket to be (403 otherwise, ADR 0043): a `node` token
    connects only as a node, and only as its `nodeId` when it has one; a `channel` token only as a channel, for
    its channel and account; `client` and `viewer` tokens only as clients. Returns the socket's id (a bound
    identity where the client gave none)."""
    role, binding = device.role, device.binding
    if role == "node":
        if mode != "node":
            raise RpcError(f"Forbidden: a node device token connects only in node mode, not {mode}", code=403)
        bound = binding.get("nodeId")
        if bound:
            if raw_id is not None and raw_id != bound:
                raise RpcError(f"Forbidden: this device token may connect only as node {bound!r}", code=403)
            return bound
        return raw_id
    if role == "channel":
        if mode != "channel":
            raise RpcError(f"Forbidden: a channel device token connects only in channel mode, not {mode}", code=403)
        channel, account = binding.get("channel"), binding.get("accountId")
        if channel and client.channel != channel:
            raise RpcError(f"Forbidden: this device token may connect only as channel {channel!r}", code=403)
        if account:
            given = client.accountId
            if given is not None and given != account:
                raise RpcError(f"Forbidden: this device token may connect only as account {account!r}", code=403)
            client.accountId = account
        return raw_id
    if mode != "client" and role not in ("admin", "operator"):
        raise RpcError(f"Forbidden: a {role} device token connects only in client mode, not {mode}", code=403)
    return raw_id


RESERVED_NODE_PREFIX = "~"
"""Node ids the gateway keeps for owners of calls that are no node (`agent.client_tools.owner`: `~client:{id}`)."""


@router.method("connect", params=ConnectParams, result=HelloOk, modes=EVERY_MODE, scope=roles.CONNECT, socket_only=True)
def connect(ctx: CallContext, params: ConnectParams) -> dict[str, Any]:
    """Handshake. Registers the socket as a client, node or channel and answers `hello-ok`, whose `features` list
    the methods, events and transfer modes, and `limits`: `{maxMessageBytes, maxFrameBytes}`, the most the gateway
    accepts in one WebSocket message (128 KB) and one frame (32 KB; send a longer message as fragments) before it
    closes the socket with 1009, on AWS and locally alike."""
    if params.minProtocol != PROTOCOL_VERSION:
        raise RpcError("Unsupported protocol version", code=102)
    device = _authenticate(ctx, params)
    client = params.client or ClientInfo()
    mode = client.mode
    if mode not in ("client", "node", "channel"):
        raise RpcError("Invalid client mode", code=103)
    now = ctx.now_ms()
    raw_id = client.id if client.id and client.id.strip() else None
    if device is not None:
        raw_id = _as_bound(device, mode, raw_id, client)
    extra: dict[str, Any] = {k: v for k, v in (("version", client.version), ("platform", client.platform)) if v}
    if device is not None:
        extra.update(role=device.role, deviceId=device.token_id)
    if mode == "client":
        _register_client(ctx, raw_id, now, extra)
    elif mode == "node":
        _register_node(ctx, params, client, raw_id, now, extra)
    else:
        _register_channel(ctx, client, raw_id, now, extra)
    if device is not None:
        device_auth.note_socket(ctx.services, device, ctx.connection_id)  # so that revoking the token closes it
    if socket_gate.applies(ctx.services):
        socket_gate.settle(ctx.services, ctx.connection_id)
    return _hello(ctx)


def _authenticate(ctx: CallContext, params: ConnectParams) -> devices.Device | None:
    """The device whose token the socket presented (None for the gateway's token or none); a wrong token is
    refused with 401 and the socket closed after the answer."""
    expected = expected_token(ctx)
    given = params.auth.token if params.auth else None
    device: devices.Device | None = None
    if given is not None and devices.looks_like_token(given):
        device = device_auth.authenticate(ctx.services, given)  # one read: a revoked token is refused at once
        if device is None:
            ctx.close_after = (4001, "Unauthorized")
            raise RpcError("Unauthorized: invalid or missing token", code=401)
    elif expected is not None and not token_matches(given, expected):
        ctx.close_after = (4001, "Unauthorized")
        raise RpcError("Unauthorized: invalid or missing token", code=401)
    return device


def _register_client(ctx: CallContext, raw_id: str | None, now: int, extra: dict[str, Any]) -> None:
    client_id = raw_id or f"client-{ctx.connection_id}"
    conn = Connection(ctx.connection_id, "client", now, client_id=client_id)
    _release_previous_identity(ctx, conn)
    _save(ctx, conn, extra)
    claimed = ctx.services.connections.claim_client(client_id, ctx.connection_id)
    _replace(ctx, claimed, "Replaced by newer client connection")
    _still_open(ctx, conn)


def _register_node(
    ctx: CallContext, params: ConnectParams, client: ClientInfo, raw_id: str | None, now: int, extra: dict[str, Any]
) -> None:
    repo = ctx.services.connections
    node_id = raw_id or f"node-{ctx.connection_id}"
    if node_id.startswith(RESERVED_NODE_PREFIX):  # the gateway's own owners of calls (a dialect socket's tools)
        raise RpcError(f"Invalid node id: ids starting with {RESERVED_NODE_PREFIX!r} are reserved", code=103)
    if node_id.lower() == mcp_names.PREFIX.rstrip("_"):  # `mcp__…` names a remote MCP server's tool (ADR 0045)
        raise RpcError("Invalid node id: 'mcp' is reserved for the tools of MCP servers", code=103)
    tools = params.tools
    if not tools:
        raise RpcError("Node mode requires tools", code=103)
    names = _tool_names(tools)
    try:
        runtime = validate_node_runtime(node_id, params.nodeRuntime, names)
    except RuntimeInvalidError as exc:
        raise RpcError(f"Invalid nodeRuntime: {exc}", code=103) from None
    conn = Connection(ctx.connection_id, "node", now, node_id=node_id)
    _release_previous_identity(ctx, conn)
    _save(ctx, conn, extra)
    previous = repo.claim_node(node_id, ctx.connection_id, tools, runtime)
    _replace(ctx, previous, "Replaced by newer node connection")
    _still_open(ctx, conn)
    repo.node_seen(node_id, now, platform=client.platform, version=client.version, tools=tools, runtime=runtime)
    for hook in ctx.services.hooks.on_node_connected:
        hook(ctx, node_id, previous)


def _register_channel(
    ctx: CallContext, client: ClientInfo, raw_id: str | None, now: int, extra: dict[str, Any]
) -> None:
    repo = ctx.services.connections
    channel = client.channel
    if not channel or not channel.strip():
        raise RpcError("Channel mode requires channel field", code=103)
    account_id = client.accountId or raw_id or "default"
    conn = Connection(ctx.connection_id, "channel", now, channel=channel, account_id=account_id)
    _release_previous_identity(ctx, conn)
    _save(ctx, conn, extra)
    previous = repo.claim_channel_socket(channel, account_id, ctx.connection_id)
    _replace(ctx, previous, "Replaced by newer channel connection")
    _still_open(ctx, conn)
    repo.register_channel(channel, account_id)


def _hello(ctx: CallContext) -> dict[str, Any]:
    return {
        "type": "hello-ok",
        "protocol": PROTOCOL_VERSION,
        "server": {"version": SERVER_VERSION, "connectionId": ctx.connection_id},
        "features": {
            "methods": ctx.services.registry.names(),
            "events": EVENTS,
            # binary GSV frames only where no API Gateway sits in between (it refuses inbound binary frames)
            "transferModes": ctx.services.capabilities.transfer_modes,
            # what this gateway accepts in one message and one frame: API Gateway's caps, enforced locally too
            "limits": limits(),
        },
    }


@router.on_call_timeout(socket_gate.KIND)
def _not_authenticated_in_time(services: Services, call: PendingCall) -> None:
    socket_gate.expired(services, call)
