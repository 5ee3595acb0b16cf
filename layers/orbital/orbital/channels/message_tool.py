"""The `gsv__Message` native tool (spec §8.5): text to a channel peer through the channel's adapter. The channels
family registers it (`Hooks.native_tools`), since the tools layer below the channels cannot reach an adapter."""

from __future__ import annotations

from typing import Any

from orbital.channels.adapters import adapter_for, built_in
from orbital.channels.base import ChannelError, Outbound
from orbital.domain.config import as_dict
from orbital.tools.native import ToolEnv, ToolError

PEER_KINDS = ("dm", "group", "channel", "thread")


def message(env: ToolEnv, args: dict[str, Any]) -> dict[str, Any]:
    """Send text to a channel peer (spec §8.5) through the channel's adapter: a connected channel socket
    (`channel.outbound`) or a built-in messenger's API (Telegram). Without `channel`/`to`, the conversation the agent
    was last talked to (its thread too)."""
    text = args.get("text")
    if not isinstance(text, str) or not text:
        raise ToolError("text is required")
    last = env.services.last_active.get(env.agent_id) or {}
    last_peer = as_dict(last.get("peer"))
    channel = _str(args.get("channel")) or _str(last.get("channel"))
    if not channel:
        raise ToolError("channel is required (no current channel context available)")
    to = _str(args.get("to")) or _str(last_peer.get("id"))
    if not to:
        raise ToolError("to (peer ID) is required (no current peer context available)")
    peer_kind = _str(args.get("peerKind")) or _str(last_peer.get("kind")) or "dm"
    if peer_kind not in PEER_KINDS:
        raise ToolError(f"Invalid peerKind: {peer_kind}. Must be dm, group, channel, or thread.")
    account_id = _str(args.get("accountId")) or _str(last.get("accountId")) or "default"
    same_peer = channel == _str(last.get("channel")) and to == _str(last_peer.get("id"))
    peer = {**last_peer, "kind": peer_kind, "id": to} if same_peer else {"kind": peer_kind, "id": to}
    outbound = Outbound(account_id, peer, text, _str(args.get("replyToId")), "")
    try:
        message_id = adapter_for(channel).send(env.services, outbound)
    except ChannelError as exc:
        raise ToolError(exc.message) from None
    result: dict[str, Any] = {
        "sent": True,
        "channel": channel,
        "to": to,
        "peerKind": peer_kind,
        "accountId": account_id,
        "via": "websocket" if built_in(channel) is None else "api",
    }
    if message_id:
        result["messageId"] = message_id
    return result


def _str(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None
