"""Methods of the `channels` family: the channel registry (spec §12.5).

The registry keeps an entry per `{channel}:{accountId}` that ever connected (channel-mode sockets, later also
`channel.start`); entries survive the socket going away.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orbital.protocol.registry import NoParams, Result, Router

if TYPE_CHECKING:
    from orbital.protocol.context import CallContext

router = Router("channels")


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


@router.method("channels.list", params=NoParams, result=ChannelsListResult)
def channels_list(ctx: CallContext, params: NoParams) -> dict[str, Any]:
    """Every channel account that has connected: `{channel, accountId, connectedAt, lastMessageAt?}`."""
    channels = [channel_entry(data) for data in ctx.services.connections.channels()]
    return {"channels": channels, "count": len(channels)}
