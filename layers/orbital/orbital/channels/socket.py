"""The adapter for a channel served by a connected channel socket (a `channel`-mode WebSocket client that bridges
a messenger): replies go out as `channel.outbound` events, typing as `channel.typing` (spec §12.4).

Control (`channel.start`/`stop`/`login`/`logout`) is forwarded to the socket as a `channel.control` event and
answered when it replies with `channel.control.result` (a deferred call, like a node's tool call); `status` is what
the gateway knows: whether the socket is connected and when it last brought a message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orbital.channels.base import ChannelError, ControlResult, Outbound
from orbital.protocol.frames import event_frame
from orbital.store import keys

if TYPE_CHECKING:
    from orbital.ports.services import Services


def not_connected(channel: str, account_id: str) -> str:
    return (
        f'Channel "{channel}" (account: {account_id}) is not connected. Make sure the channel is started and connected.'
    )


class SocketAdapter:
    def __init__(self, channel: str) -> None:
        self.channel = channel

    def socket(self, services: Services, account_id: str) -> str | None:
        return services.connections.channel_sockets().get(keys.channel_key(self.channel, account_id))

    def send(self, services: Services, message: Outbound) -> str | None:
        connection_id = self.socket(services, message.account_id)
        if not connection_id:
            raise ChannelError(not_connected(self.channel, message.account_id))
        body: dict[str, Any] = {"text": message.text}
        if message.reply_to_id:
            body["replyToId"] = message.reply_to_id
        payload = {
            "channel": self.channel,
            "accountId": message.account_id,
            "peer": message.peer,
            "sessionKey": message.session_key,
            "message": body,
        }
        if not services.push(connection_id, event_frame("channel.outbound", payload)):
            raise ChannelError(not_connected(self.channel, message.account_id))
        return None

    def typing(self, services: Services, account_id: str, peer: dict[str, Any], on: bool) -> None:
        connection_id = self.socket(services, account_id)
        if connection_id:
            payload = {"channel": self.channel, "accountId": account_id, "peer": peer, "sessionKey": "", "typing": on}
            services.push(connection_id, event_frame("channel.typing", payload))

    def status(self, services: Services, account_id: str | None) -> list[dict[str, Any]]:
        sockets = services.connections.channel_sockets()
        entries = {e.get("accountId"): e for e in services.connections.channels() if e.get("channel") == self.channel}
        accounts = sorted(
            {str(a) for a in entries if a} | {k.split(":", 1)[1] for k in sockets if k.startswith(f"{self.channel}:")}
        )
        if account_id is not None:
            accounts = [account_id]
        out = []
        for account in accounts:
            connected = keys.channel_key(self.channel, account) in sockets
            row: dict[str, Any] = {"accountId": account, "connected": connected, "authenticated": connected}
            row["mode"] = "socket"
            last = (entries.get(account) or {}).get("lastMessageAt")
            if last is not None:
                row["lastActivity"] = last
            out.append(row)
        return out

    # control is a round trip to the socket (a deferred call, see methods/channels.py), never answered here
    def start(self, services: Services, account_id: str, config: dict[str, Any]) -> ControlResult:
        raise ChannelError(FORWARDED)

    def stop(self, services: Services, account_id: str) -> ControlResult:
        raise ChannelError(FORWARDED)

    def login(self, services: Services, account_id: str, force: bool) -> ControlResult:
        raise ChannelError(FORWARDED)

    def logout(self, services: Services, account_id: str) -> ControlResult:
        raise ChannelError(FORWARDED)


FORWARDED = "control of a socket channel is forwarded to its socket"
