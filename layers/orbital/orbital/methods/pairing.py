"""Methods of the `pairing` family: pending senders and the owner's decision on them (spec §12.2).

A sender held by the "pairing" policy waits in the pending list until `pair.approve` adds it to
`channels.{channel}.allowFrom` (and tells it so through a connected channel socket) or `pair.reject` drops it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orbital.domain import pairing, roles
from orbital.errors import BadRequestError, NotFoundError
from orbital.protocol.frames import event_frame
from orbital.protocol.params import Id, Text
from orbital.protocol.registry import CLIENT, NoParams, Params, Result, Router

if TYPE_CHECKING:
    from orbital.protocol.context import CallContext

router = Router("pairing")


class PairDecisionParams(Params):
    # lenient: a missing or wrong value gets the protocol's own 400 message; a numeric sender id is taken as text
    channel: Text = None
    senderId: Id = None


class PendingPair(Result):
    channel: str
    senderId: str
    senderName: str | None = None
    requestedAt: int
    firstMessage: str
    message: str


class PairListResult(Result):
    pairs: dict[str, PendingPair]


class PairApproveResult(Result):
    approved: bool
    senderId: str
    senderName: str | None = None


class PairRejectResult(Result):
    rejected: bool
    senderId: str


def _required(params: PairDecisionParams) -> tuple[str, str]:
    channel, sender = params.channel, params.senderId
    if not channel or not sender:
        raise BadRequestError("channel and senderId required")
    return channel, pairing.normalize_sender(sender)


def _pending(ctx: CallContext, channel: str, sender_id: str) -> dict[str, Any]:
    pair = ctx.services.pairs.get(channel, sender_id)
    if pair is None:
        raise NotFoundError(f"No pending pairing for {channel}:{sender_id}")
    return pair


def _listed(pair: dict[str, Any]) -> dict[str, Any]:
    first = pair.get("firstMessage")
    first = first if isinstance(first, str) else ""
    out = {**pair, "firstMessage": first, "message": first}
    if out.get("senderName") is None:
        out.pop("senderName", None)
    return out


@router.method("pair.list", params=NoParams, result=PairListResult, reads_only=True, modes=CLIENT, scope=roles.READ)
def pair_list(ctx: CallContext, params: NoParams) -> dict[str, Any]:
    """Pending pairing requests by `{channel}:{senderId}`; `message` repeats `firstMessage`."""
    return {"pairs": {key: _listed(pair) for key, pair in ctx.services.pairs.all().items()}}


def _allow(ctx: CallContext, channel: str, sender_id: str) -> None:
    current = pairing.allow_list(ctx.services.config.effective(), channel)
    if sender_id in current:
        return
    ctx.services.config.set_path(f"channels.{channel}.allowFrom", [*current, sender_id])


def _confirm(ctx: CallContext, channel: str, sender_id: str) -> None:
    """Tell the approved sender, through the first connected socket of the channel that takes the message."""
    prefix = f"{channel}:"
    for key, connection_id in ctx.services.connections.channel_sockets().items():
        if not key.startswith(prefix):
            continue
        payload = {
            "channel": channel,
            "accountId": key[len(prefix) :],
            "peer": {"kind": "dm", "id": sender_id},
            "sessionKey": "",
            "message": {"text": pairing.PAIRING_APPROVED_REPLY},
        }
        if ctx.services.push(connection_id, event_frame("channel.outbound", payload)):
            return


@router.method("pair.approve", params=PairDecisionParams, result=PairApproveResult, modes=CLIENT, scope=roles.ADMIN)
def pair_approve(ctx: CallContext, params: PairDecisionParams) -> dict[str, Any]:
    """Approve a pending sender: add it to `channels.{channel}.allowFrom`, drop the request and send the sender a
    confirmation through a connected channel socket, if any."""
    channel, sender_id = _required(params)
    pair = _pending(ctx, channel, sender_id)
    _allow(ctx, channel, sender_id)
    if ctx.services.pairs.delete(channel, sender_id) is not None:
        _confirm(ctx, channel, sender_id)  # only once when two approvals race
    result: dict[str, Any] = {"approved": True, "senderId": sender_id}
    if pair.get("senderName") is not None:
        result["senderName"] = pair["senderName"]
    return result


@router.method("pair.reject", params=PairDecisionParams, result=PairRejectResult, modes=CLIENT, scope=roles.ADMIN)
def pair_reject(ctx: CallContext, params: PairDecisionParams) -> dict[str, Any]:
    """Drop a pending sender's request (nothing is sent to the sender)."""
    channel, sender_id = _required(params)
    if ctx.services.pairs.delete(channel, sender_id) is None:
        raise NotFoundError(f"No pending pairing for {channel}:{sender_id}")
    return {"rejected": True, "senderId": sender_id}
