"""Methods of the `channels` family (spec §12.3, §12.5): inbound messages, channel control, the registry.

The registry keeps an entry per `{channel}:{accountId}` that ever connected (channel-mode sockets, `channel.start`);
entries survive the socket going away. Control goes to the channel's adapter (`orbital.channels.adapters`): a
built-in one (Telegram) answers at once; a channel served by a socket gets a `channel.control` event
`{callId, action, accountId, config?, force?}` and answers with `channel.control.result` — a deferred call, failed
with 503 if the socket leaves and with 504 if it does not answer in time.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from orbital.channels import approval_prompt, delivery, inbound, message_tool
from orbital.channels.adapters import adapter_for, built_in
from orbital.channels.base import ChannelError
from orbital.domain import roles
from orbital.domain.config import as_dict
from orbital.engines import deferred
from orbital.errors import BadRequestError, ForbiddenError, NotFoundError, RpcError, UnavailableError
from orbital.protocol.dispatch import DEFERRED
from orbital.protocol.frames import event_frame
from orbital.protocol.params import Flag, GivenFlag, GivenObject, GivenText, Object, Text
from orbital.protocol.registry import CHANNEL, CLIENT, AckResult, NoParams, Params, Result, Router
from orbital.store import keys

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.protocol.context import CallContext
    from orbital.store.connections import Connection

router = Router("channels")
router.on_run_reply(delivery.run_reply)  # a run's replies go back to the channel it came from
router.on_approval_requested(approval_prompt.on_requested)  # a channel run's approval prompt goes to its chat
router.on_approval_resolved(approval_prompt.on_resolved)  # and shows the decision once made (Telegram)
router.native_tool("gsv__Message")(message_tool.message)


class ChannelEntry(Result):
    channel: str
    accountId: str
    connectedAt: int
    lastMessageAt: int | None = None


class ChannelsListResult(Result):
    channels: list[ChannelEntry]
    count: int


def channel_entry(data: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "channel": data.get("channel"),
        "accountId": data.get("accountId"),
        "connectedAt": data.get("connectedAt"),
    }
    if data.get("lastMessageAt") is not None:
        entry["lastMessageAt"] = data["lastMessageAt"]
    return entry


@router.method(
    "channels.list", params=NoParams, result=ChannelsListResult, reads_only=True, modes=CLIENT, scope=roles.READ
)
def channels_list(ctx: CallContext, params: NoParams) -> dict[str, Any]:
    """Every channel account that has connected: `{channel, accountId, connectedAt, lastMessageAt?}`."""
    channels = [channel_entry(data) for data in ctx.services.connections.channels()]
    return {"channels": channels, "count": len(channels)}


# --- inbound ------------------------------------------------------------------------------------------------------


class ChannelInboundParams(Params):
    # passed on as given: the inbound pipeline checks each field and answers with the protocol's messages
    channel: GivenText = None
    accountId: GivenText = None
    peer: GivenObject = None
    sender: GivenObject = None
    message: GivenObject = None
    wasMentioned: GivenFlag = None


class ChannelInboundResult(Result):
    status: str
    messageId: str | None = None
    processing: bool | None = None
    sessionKey: str | None = None
    runId: str | None = None
    queued: bool | None = None
    queuePosition: int | None = None
    senderId: str | None = None
    reason: str | None = None
    command: str | None = None
    response: str | None = None
    error: str | None = None
    directives: dict[str, Any] | None = None
    approvalId: str | None = None
    """With `status: "paused"`, when the message was a reminder rather than an answer."""


def _channel_error(exc: ChannelError) -> RpcError:
    return RpcError(exc.message, code=exc.code)


@router.method(
    "channel.inbound", params=ChannelInboundParams, result=ChannelInboundResult, modes=CHANNEL, scope=roles.CHANNEL
)
def channel_inbound(ctx: CallContext, params: ChannelInboundParams) -> dict[str, Any]:
    """A message from a messenger, for the agent: `status` is `started` (a run, replying on the channel),
    `duplicate` (a message id already received; `processing: true` while that first delivery is still being
    handled), `pending_pairing` (an unknown sender, told it awaits approval),
    `blocked`, `ignored` (a group message that does not mention the agent when mentions are required), `command` or
    `directive-only` (answered on the channel), or `paused`: the session's run waits for a tool approval, and the
    message was its answer (`yes` / `no` from a sender in config `owners`) or is dropped with a reminder; the
    engine's `response` is sent to the peer as a reply, and `runId` is the paused run's (`approvalId` with a
    reminder)."""
    try:
        return inbound.receive(ctx.services, params.model_dump())
    except ChannelError as exc:
        raise _channel_error(exc) from None


# --- control ------------------------------------------------------------------------------------------------------

CONTROL_KIND = "channel-control"
CONTROL_TIMEOUT_MS = 30_000


class ChannelControlParams(Params):
    channel: Text = None
    accountId: Text = None
    config: Object = None
    force: Flag = None


class ChannelControlResult(Result):
    ok: bool
    channel: str
    accountId: str


class ChannelStatusResult(Result):
    channel: str
    accounts: list[dict[str, Any]]


def _channel(params: ChannelControlParams) -> str:
    if not params.channel or not params.channel.strip():
        raise BadRequestError("channel required")
    return params.channel.strip()


def _account(params: ChannelControlParams) -> str | None:
    """The `accountId` given, if any."""
    return params.accountId.strip() if params.accountId and params.accountId.strip() else None


def _control(ctx: CallContext, params: ChannelControlParams, action: str) -> Any:
    channel, account_id = _channel(params), _account(params) or "default"
    services = ctx.services
    adapter = built_in(channel)
    if adapter is not None:
        try:
            if action == "start":
                outcome = adapter.start(services, account_id, as_dict(params.config))
            elif action == "stop":
                outcome = adapter.stop(services, account_id)
            elif action == "login":
                outcome = adapter.login(services, account_id, params.force is True)
            else:
                outcome = adapter.logout(services, account_id)
        except ChannelError as exc:
            raise _channel_error(exc) from None
        if not outcome.ok:
            raise RpcError(outcome.error or f"channel.{action} failed", code=500)
        _record(services, action, channel, account_id)
        return {**outcome.data, "ok": True, "channel": channel, "accountId": account_id}
    return _forward(ctx, channel, account_id, action, params)


def _record(services: Services, action: str, channel: str, account_id: str) -> None:
    if action == "start":
        services.connections.register_channel(channel, account_id)
    elif action in ("stop", "logout"):
        services.connections.forget_channel(channel, account_id)


def _forward(ctx: CallContext, channel: str, account_id: str, action: str, params: ChannelControlParams) -> Any:
    """Ask the channel's socket; the answer comes with `channel.control.result`."""
    services = ctx.services
    socket = services.connections.channel_sockets().get(keys.channel_key(channel, account_id))
    if not socket:
        raise NotFoundError(f"Unknown channel: {channel}")
    call = deferred.PendingCall(
        call_id=str(uuid.uuid4()),
        kind=CONTROL_KIND,
        node_id=f"channel:{keys.channel_key(channel, account_id)}",
        node_connection_id=socket,
        timeout_ms=CONTROL_TIMEOUT_MS,
        created_at=ctx.now_ms(),
        caller_connection_id=ctx.connection_id,
        frame_id=ctx.frame_id,
        extra={"channel": channel, "accountId": account_id, "action": action},
    )
    deferred.require_waits(services)
    deferred.create(services, call)
    payload: dict[str, Any] = {"callId": call.call_id, "action": action, "channel": channel, "accountId": account_id}
    if action == "start":
        payload["config"] = as_dict(params.config)
    if action == "login":
        payload["force"] = params.force is True
    if not services.push(socket, event_frame("channel.control", payload)):
        deferred.claim(services, call.call_id)
        raise UnavailableError(f"Channel not connected: {channel}")
    deferred.start_wait_after_send(services, call)
    return DEFERRED


@router.method(
    "channel.start", params=ChannelControlParams, result=ChannelControlResult, modes=CLIENT, scope=roles.OPERATE
)
def channel_start(ctx: CallContext, params: ChannelControlParams) -> Any:
    """Start a channel account (`accountId` default "default", `config` for the adapter): Telegram registers its
    webhook; a socket channel is asked through its socket."""
    return _control(ctx, params, "start")


@router.method(
    "channel.stop", params=ChannelControlParams, result=ChannelControlResult, modes=CLIENT, scope=roles.OPERATE
)
def channel_stop(ctx: CallContext, params: ChannelControlParams) -> Any:
    """Stop a channel account and drop it from the registry."""
    return _control(ctx, params, "stop")


@router.method(
    "channel.login", params=ChannelControlParams, result=ChannelControlResult, modes=CLIENT, scope=roles.OPERATE
)
def channel_login(ctx: CallContext, params: ChannelControlParams) -> Any:
    """Log a channel account in (QR code flows answer with `qrDataUrl` and `message`)."""
    return _control(ctx, params, "login")


@router.method(
    "channel.logout", params=ChannelControlParams, result=ChannelControlResult, modes=CLIENT, scope=roles.OPERATE
)
def channel_logout(ctx: CallContext, params: ChannelControlParams) -> Any:
    """Log a channel account out and drop it from the registry."""
    return _control(ctx, params, "logout")


@router.method(
    "channel.status", params=ChannelControlParams, result=ChannelStatusResult, modes=CLIENT, scope=roles.READ
)
def channel_status(ctx: CallContext, params: ChannelControlParams) -> dict[str, Any]:
    """The accounts of a channel (all, or `accountId`): `{accountId, connected, authenticated, mode?,
    lastActivity?, error?, extra?}`."""
    channel = _channel(params)
    account = _account(params)
    try:
        accounts = adapter_for(channel).status(ctx.services, account)
    except ChannelError as exc:
        raise _channel_error(exc) from None
    return {"channel": channel, "accounts": accounts}


class ControlAnswerParams(Params):
    callId: Text = None
    ok: Flag = None
    result: Object = None
    error: Text = None


@router.method(
    "channel.control.result",
    params=ControlAnswerParams,
    result=AckResult,
    mode_error=(403, "Only channel clients can answer channel control"),
    modes=CHANNEL,
    scope=roles.CHANNEL,
)
def channel_control_result(ctx: CallContext, params: ControlAnswerParams) -> dict[str, Any]:
    """A channel socket's answer to `channel.control`: `{callId, ok, result?, error?}`."""
    if not params.callId:
        raise BadRequestError("callId required")
    found = deferred.get(ctx.services, params.callId)
    if found is None or found.call.kind != CONTROL_KIND:
        raise NotFoundError("Unknown callId")
    conn = ctx.conn
    extra = found.call.extra
    if conn is None or conn.channel != extra.get("channel") or conn.account_id != extra.get("accountId"):
        raise ForbiddenError("Channel not authorized for this call")
    claimed = deferred.claim(ctx.services, params.callId)
    if claimed is None:
        return {"ok": True, "dropped": True}
    call, token = claimed
    failed = params.ok is False or bool(params.error)
    if failed:
        message = params.error or f"channel.{extra['action']} failed"
        delivered = deferred.answer(ctx.services, call, error={"code": 500, "message": message})
    else:
        _record(ctx.services, str(extra["action"]), str(extra["channel"]), str(extra["accountId"]))
        payload = {**as_dict(params.result), "ok": True, "channel": extra["channel"], "accountId": extra["accountId"]}
        delivered = deferred.answer(ctx.services, call, payload=payload)
    deferred.close_execution(ctx.services, token)
    return {"ok": True} if delivered else {"ok": True, "dropped": True}


@router.on_call_timeout(CONTROL_KIND)
def _control_timeout(services: Services, call: deferred.PendingCall) -> None:
    message = f"Channel {call.extra.get('channel')} did not answer {call.extra.get('action')} in time"
    deferred.answer(services, call, error={"code": 504, "message": message, "retryable": True})


@router.on_channel_gone
def _socket_gone(services: Services, conn: Connection) -> None:
    deferred.fail_node_calls(services, f"channel:{conn.channel_key}", f"Channel disconnected: {conn.channel_key}")
