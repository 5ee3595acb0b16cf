"""Who may talk to the agent through a channel (spec §12.1) and how pending senders are identified (§12.2).

Policy per channel, from `channels.{channel}`:

    dmPolicy "open"      every sender is served
    dmPolicy "pairing"   senders outside allowFrom are held until the owner approves them (pair.approve)
    any other policy     senders outside allowFrom are refused ("allowlist")

A channel with no configured `dmPolicy` (including a channel missing from the config) is treated as "pairing", so
an unknown channel is never open to strangers by accident (fix F7). The policy applies to every peer kind.

Sender ids are compared in E.164 form (`normalize_e164`). Ids without any digit (plain user names) would normalize
to "" and could never be approved, so they keep their trimmed raw form as their identity (`normalize_sender`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orbital.domain.ids import normalize_e164

POLICY_OPEN = "open"
POLICY_PAIRING = "pairing"
POLICY_ALLOWLIST = "allowlist"

PAIRING_PENDING_REPLY = "Your message has been received. Awaiting approval from the owner."
PAIRING_APPROVED_REPLY = "You're now connected! Feel free to send me a message."


def normalize_sender(raw: Any) -> str:
    """The identity a sender is paired and allow-listed under: its E.164 form, or the trimmed id when it has no
    digits at all."""
    normalized = normalize_e164(raw)
    if normalized:
        return normalized
    if raw is None or isinstance(raw, bool):
        return ""
    return str(raw).strip()


def pair_key(channel: str, sender_id: Any) -> str:
    """`{channel}:{normalized sender}`: the key of a pending pairing in `pair.list`."""
    return f"{channel}:{normalize_sender(sender_id)}"


@dataclass(frozen=True)
class SenderDecision:
    allowed: bool
    needs_pairing: bool = False
    reason: str | None = None


def channel_policy(config: dict[str, Any], channel: str) -> str:
    """The effective dmPolicy of a channel ("pairing" when none is configured)."""
    entry = _channel_entry(config, channel)
    policy = entry.get("dmPolicy") if entry is not None else None
    if policy is None or policy == "":
        return POLICY_PAIRING
    return str(policy)


def allow_list(config: dict[str, Any], channel: str) -> list[str]:
    """The channel's `allowFrom` entries as strings (a missing or malformed list is empty)."""
    entry = _channel_entry(config, channel)
    raw = entry.get("allowFrom") if entry is not None else None
    if not isinstance(raw, list):
        return []
    return [str(item) for item in raw if item is not None and not isinstance(item, dict | list)]


def is_allowed_sender(config: dict[str, Any], channel: str, sender_id: Any, peer_id: Any) -> SenderDecision:
    """Decide whether an inbound message from `sender_id` (in conversation `peer_id`) may reach the agent."""
    policy = channel_policy(config, channel)
    if policy == POLICY_OPEN:
        return SenderDecision(allowed=True)
    entries = allow_list(config, channel)
    if "*" in entries:
        return SenderDecision(allowed=True)
    sender = normalize_sender(sender_id)
    peer = "" if peer_id is None else str(peer_id)
    for entry in entries:
        entry_id = normalize_sender(entry)
        if (entry_id and entry_id == sender) or (peer and entry == peer):
            return SenderDecision(allowed=True)
    if policy == POLICY_PAIRING:
        return SenderDecision(allowed=False, needs_pairing=True, reason=f"Sender {sender} needs pairing approval")
    return SenderDecision(allowed=False, reason=f"Sender {sender} not in allowFrom list")


def _channel_entry(config: dict[str, Any], channel: str) -> dict[str, Any] | None:
    channels = config.get("channels")
    if not isinstance(channels, dict):
        return None
    entry = channels.get(channel)
    return entry if isinstance(entry, dict) else None
