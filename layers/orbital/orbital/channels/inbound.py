"""A message from a messenger reaches the agent (spec §12.1-§12.3, fixes F7 and F16).

`receive` takes the channel inbound params (GSV's `ChannelInboundParams`: `{channel, accountId, peer{kind, id,
name?, handle?, threadId?}, sender?{id, name?, handle?}, message{id, text, timestamp?, replyToId?, media?},
wasMentioned?}`) from a channel socket (`channel.inbound`) or a built-in adapter (the Telegram webhook), and:

1. drops a repeat: a message id seen before on that channel account is acknowledged (`status: "duplicate"`) and not
   processed again (a conditional write with a 48 h TTL, so parallel deliveries of one message run it once). The
   mark is a lease while the message is processed (`processing: true` to a repeat meanwhile) and final once it
   was: a process killed half-way (a Lambda timeout) leaves a lease that expires, so the platform's next retry
   gets through; a failure that may pass deletes the mark at once;
2. applies the sender policy: `open`, `allowlist`, or `pairing` — the default for a channel with no policy (F7):
   an unknown sender is recorded as a pending pair with its first message and told it awaits approval;
3. in groups, with `channels.{channel}.requireMention: true`, ignores messages that do not mention the agent;
4. routes: the agent from `agents.bindings`, the session key from the peer, dmScope and identity links;
5. records the last active context (for heartbeats, cron delivery, gsv__Message) and the channel's last message;
6. answers slash commands and directive-only messages on the channel itself;
7. stores media, wraps the text in its envelope (`[telegram · 3:30 PM UTC] hello`), shows typing and starts (or
   queues) a run whose reply is delivered back to the peer (`orbital.channels.delivery`). A run a spend limit
   refuses is not started (the 429 is the call's answer): the conversation hears the limit's sentence once per
   period, not at every message; a run a limit stops half-way ends with the engine's note, delivered like any
   reply.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orbital.agent import approvals, events, runs, slash, taint
from orbital.channels.adapters import adapter_for, is_passing, public_reason
from orbital.channels.base import ChannelError, Outbound
from orbital.channels.delivery import send as deliver_text
from orbital.channels.delivery import typing as show_typing
from orbital.channels.media import store_attachments
from orbital.domain import commands, pairing, spend_words, timefmt
from orbital.domain.config import as_dict
from orbital.domain.session_keys import resolve_agent_id_from_binding, session_key_for_peer
from orbital.errors import ConflictError
from orbital.store import conditions as cond
from orbital.store import keys

if TYPE_CHECKING:
    from orbital.ports.services import Services

log = logging.getLogger("orbital.channels.inbound")

REQUIRED = "channel, accountId, peer, and message required"
SEEN_TTL_SECONDS = 48 * 3600
LEASE_MS = 90_000
"""How long a message being processed holds its mark (past every function's timeout)."""
PEER_KINDS = {"dm", "group", "channel", "thread"}


def _text(value: Any) -> str | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value.strip() if isinstance(value, str) and value.strip() else None


def _peer(raw: Any) -> dict[str, Any] | None:
    peer = as_dict(raw)
    peer_id = _text(peer.get("id"))
    if not peer_id:
        return None
    kind = _text(peer.get("kind")) or "dm"
    out: dict[str, Any] = {"kind": kind if kind in PEER_KINDS else kind.lower(), "id": peer_id}
    for name in ("name", "handle", "threadId"):
        value = _text(peer.get(name))
        if value:
            out[name] = value
    return out


def _claim(services: Services, channel: str, account_id: str, message_id: str) -> str | None:
    """Take a message id for processing: None when it is ours, "duplicate" when it was processed (or is being
    processed: "processing")."""
    key = keys.inbound_seen(channel, account_id, message_id)
    now = services.now_ms()
    try:
        services.table.put(
            key,
            {"receivedAt": now},
            ttl=int(time.time()) + SEEN_TTL_SECONDS,
            attrs={"lu": now + LEASE_MS},
            condition=cond.not_exists("PK") | cond.lt("lu", now),
        )
    except ConflictError:
        found = services.table.get(key)
        lease = found.attrs.get("lu") if found else None
        return "processing" if isinstance(lease, int | float) and lease >= now else "duplicate"
    return None


def _settle(services: Services, channel: str, account_id: str, message_id: str, *, done: bool) -> None:
    """Processed: the mark becomes final (no lease). Not processed: the mark goes, so a retry gets through."""
    key = keys.inbound_seen(channel, account_id, message_id)
    try:
        if done:
            services.table.put(key, {"receivedAt": services.now_ms()}, ttl=int(time.time()) + SEEN_TTL_SECONDS)
        else:
            services.table.delete(key)
    except Exception as exc:  # the lease expires by itself
        log.warning("inbound mark of %s:%s not settled: %s", channel, account_id, type(exc).__name__)


def claim(services: Services, channel: str, account_id: str, item_id: str) -> str | None:
    """Take an inbound item (a message, a button press) for processing once: None when it is ours, else
    "duplicate" or "processing" (see `receive`). Settle it with `settle`."""
    return _claim(services, channel, account_id, item_id)


def settle(services: Services, channel: str, account_id: str, item_id: str, *, done: bool) -> None:
    _settle(services, channel, account_id, item_id, done=done)


def _reply(services: Services, channel: str, account_id: str, peer: dict[str, Any], text: str, reply_to: Any) -> None:
    """A direct answer on the channel (pairing notices, command responses); failures are logged."""
    message = Outbound(account_id, peer, text, _text(reply_to), "")
    try:
        adapter_for(channel).send(services, message)
    except Exception as exc:
        log.warning("reply on %s:%s failed: %s", channel, account_id, getattr(exc, "message", type(exc).__name__))


def receive(services: Services, params: dict[str, Any]) -> dict[str, Any]:
    """Process one inbound message; returns the `channel.inbound` result (`status` and what goes with it)."""
    channel = _text(params.get("channel"))
    account_id = _text(params.get("accountId"))
    peer = _peer(params.get("peer"))
    message = params.get("message")
    if not channel or not account_id or peer is None or not isinstance(message, dict):
        raise ChannelError(REQUIRED, code=400)
    raw_text = message.get("text")
    text: str = raw_text if isinstance(raw_text, str) else ""
    message_id = _text(message.get("id"))
    if message_id:
        seen = _claim(services, channel, account_id, message_id)
        if seen is not None:
            repeat: dict[str, Any] = {"status": "duplicate", "messageId": message_id}
            if seen == "processing":
                repeat["processing"] = True
            return repeat
    try:
        result = _process(services, params, channel, account_id, peer, message, text)
    except Exception:
        if message_id:  # not processed: a repeated delivery (the platform's retry) must get through
            _settle(services, channel, account_id, message_id, done=False)
        raise
    if message_id:
        _settle(services, channel, account_id, message_id, done=True)
    return result


def _process(
    services: Services,
    params: dict[str, Any],
    channel: str,
    account_id: str,
    peer: dict[str, Any],
    message: dict[str, Any],
    text: str,
) -> dict[str, Any]:
    """Steps 2 to 7 of the module's docstring, for a message that is no repeat."""
    sender = as_dict(params.get("sender"))
    sender_id = _text(sender.get("id")) or peer["id"]
    message_id = _text(message.get("id"))
    config = services.config.effective()

    def reply(answer: str) -> None:
        _reply(services, channel, account_id, peer, answer, message_id)

    refused = _sender_refused(services, config, channel, sender, sender_id, peer, text, reply)  # 2
    if refused is not None:
        return refused
    section = as_dict(as_dict(config.get("channels")).get(channel))  # 3
    if peer["kind"] != "dm" and section.get("requireMention") is True and params.get("wasMentioned") is not True:
        return {"status": "ignored", "reason": "not mentioned"}
    agent_id = resolve_agent_id_from_binding(  # 4
        config, channel=channel, account_id=account_id, peer_kind=peer["kind"], peer_id=peer["id"]
    )
    key = session_key_for_peer(
        config,
        agent_id=agent_id,
        channel=channel,
        peer_kind=peer["kind"],
        peer_id=peer["id"],
        account_id=account_id,
        sender_id=_text(sender.get("id")),
    )
    now = services.now_ms()
    services.connections.touch_channel(channel, account_id, now)  # 5
    services.last_active.put(
        agent_id, {"channel": channel, "accountId": account_id, "peer": peer, "sessionKey": key, "timestamp": now}
    )
    command = commands.parse_command(text)  # 6
    if command is not None:
        answered = slash.run(services, config, key, command, now=now, channel=True)
        reply(str(answered.get("response") or answered.get("error") or commands.COMMAND_EXECUTED))
        return {"sessionKey": key, **answered}
    found = slash.directives(services, config, key, text)
    if found.any and not found.cleaned.strip():
        ack = commands.format_directive_ack(found)
        if ack is not None:
            reply(ack)
        return {"sessionKey": key, "status": "directive-only", "directives": slash.shown(found) or {}}
    paused = _approval_answer(services, channel, key, text, found, sender_id, sender, reply)
    if paused is not None:
        return paused
    target = {
        "kind": "chat",
        "channel": channel,
        "accountId": account_id,
        "peer": peer,
        "replyToId": message_id,
        "agentId": agent_id,
    }
    return _start_run(services, config, key, target, message, text, found, sender_id, sender, now)  # 7


def _sender_refused(
    services: Services,
    config: dict[str, Any],
    channel: str,
    sender: dict[str, Any],
    sender_id: str,
    peer: dict[str, Any],
    text: str,
    reply: Callable[[str], None],
) -> dict[str, Any] | None:
    """The sender policy's answer to a sender it does not allow (an unknown one recorded as a pending pair with its
    first message, and told so once); None: allowed."""
    decision = pairing.is_allowed_sender(config, channel, sender_id, peer["id"])
    if decision.allowed:
        return None
    normalized = pairing.normalize_sender(sender_id)
    if not decision.needs_pairing:
        return {"status": "blocked", "reason": decision.reason}
    pair = {
        "channel": channel,
        "senderId": normalized,
        "senderName": _text(sender.get("name")) or peer.get("name"),
        "requestedAt": services.now_ms(),
        "firstMessage": text[:200],
    }
    if services.pairs.put(pair):  # repeats are silent
        reply(pairing.PAIRING_PENDING_REPLY)
    return {"status": "pending_pairing", "senderId": normalized}


def _approval_answer(
    services: Services,
    channel: str,
    key: str,
    text: str,
    found: commands.Directives,
    sender_id: str,
    sender: dict[str, Any],
    reply: Callable[[str], None],
) -> dict[str, Any] | None:
    """The message as the answer to the tool approval the session waits for (or a reminder), answered on the
    channel; None: no approval waits."""
    answer = _without_mentions(found.cleaned if found.any else text)
    by = _by(channel, sender_id, sender)
    waiting = approvals.answer_from_message(services, key, answer, by=by, via=_via(channel))
    if waiting is None:
        return None
    reply(str(waiting.get("response") or ""))
    paused: dict[str, Any] = {"sessionKey": key, "status": "paused", "runId": waiting.get("runId")}
    if waiting.get("approvalId"):
        paused["approvalId"] = waiting["approvalId"]
    return paused


def _start_run(
    services: Services,
    config: dict[str, Any],
    key: str,
    target: dict[str, Any],
    message: dict[str, Any],
    text: str,
    found: commands.Directives,
    sender_id: str,
    sender: dict[str, Any],
    now: int,
) -> dict[str, Any]:
    """Store the media, wrap the text in its envelope, show typing and start (or queue) the run whose reply goes
    back to `target`; a refusal is told on the channel (a spend limit once per period) and raised."""
    channel, account_id, peer = target["channel"], target["accountId"], target["peer"]
    existing = services.sessions.registry_entry(key)
    services.sessions.touch_registry(key, now=now, default_label=(existing or {}).get("label") or peer.get("name"))
    cleaned = found.cleaned if found.any else text
    media = message.get("media") if isinstance(message.get("media"), list) else []
    data: dict[str, Any] = {"text": _envelope(config, channel, cleaned, now, peer, sender)}
    if media:
        data["media"] = store_attachments(services, key, [m for m in media if isinstance(m, dict)])
    overrides = slash.overrides_of(found)
    if overrides:
        data["overrides"] = overrides
    show_typing(services, target, True)
    run_id = str(uuid.uuid4())
    try:
        submitted = runs.submit(
            services,
            key,
            data,
            run_id=run_id,
            extra={
                "deliver": target,
                "origin": {"kind": "channel", "channel": channel, "accountId": account_id},
                **taint.channel_run_fields(config, channel, sender_id, _text(sender.get("name")), now),
            },
            channel_context={"channel": channel, "accountId": account_id, "peer": peer},
            emit_error=events.error_emitter(services),
        )
    except Exception as exc:
        show_typing(services, target, False)
        refused = spend_words.refusal_of(exc)
        if refused is not None:  # a spend limit: said once per period in this conversation, not to every message
            _tell_spend_once(services, config, key, target, refused)
        elif not is_passing(exc):  # F16; a passing failure is delivered again by the platform (or the bridge retries)
            reason = public_reason(getattr(exc, "message", None) or str(exc) or type(exc).__name__)
            deliver_text(services, target, f"Sorry, I couldn't start on that: {reason}")
        raise
    result: dict[str, Any] = {"sessionKey": key, "status": "started", "runId": submitted.run_id}
    if submitted.queued:
        result.update(queued=True, queuePosition=submitted.position)
    if slash.shown(found) is not None:
        result["directives"] = slash.shown(found)
    return result


def _tell_spend_once(
    services: Services, config: dict[str, Any], key: str, target: dict[str, Any], refused: spend_words.SpendRefusal
) -> bool:
    """Deliver the spend limit's sentence to the conversation unless it was told of this limit in this period
    (a mark in the table that expires when the period ends). True when it was delivered now."""
    meta = services.sessions.load_meta(key) or {}
    tz = spend_words.time_zone(as_dict(config.get("spend")).get("timeZone"))
    period = spend_words.notice_period(refused.period, services.now_ms(), tz, _text(meta.get("sessionId")))
    try:
        services.table.put(
            keys.spend_notice(key, period.name),
            {"toldAt": services.now_ms(), "limitUsd": refused.limit},
            ttl=period.ends_at_s,
            condition=cond.not_exists("PK"),
        )
    except ConflictError:
        return False
    deliver_text(services, target, refused.sentence)
    return True


_MENTION = re.compile(r"@[\w.]+[,:]?")


def _without_mentions(text: str) -> str:
    """The text without the mentions it starts or ends with: in a group, `@agent yes` and `yes @agent` answer an
    approval as `yes` does (a second word would be read as an approval id)."""
    words = text.split()
    while words and _MENTION.fullmatch(words[0]):
        words.pop(0)
    while words and _MENTION.fullmatch(words[-1]):
        words.pop()
    return " ".join(words) or text


def _by(channel: str, sender_id: str, sender: dict[str, Any]) -> dict[str, Any]:
    """Who answers from a messenger: `{kind: "channel", id: "{channel}:{senderId}", label}` (`owners` lists such
    ids; the engine accepts the answer of an owner only)."""
    label = _text(sender.get("name")) or (f"@{sender['handle']}" if _text(sender.get("handle")) else None)
    return {"kind": "channel", "id": f"{channel}:{sender_id}", "label": label or sender_id}


VIA = frozenset({"telegram"})
"""Channels an approval's history names as such (`via`); an answer from any other messenger is `chat`."""


def _via(channel: str) -> str:
    return channel if channel in VIA else "chat"


def _envelope(
    config: dict[str, Any], channel: str, text: str, now: int, peer: dict[str, Any], sender: dict[str, Any]
) -> str:
    """`[{channel} · {time}] {text}`, with the sender's name for group-like conversations (spec §12.3 step 11)."""
    tz = timefmt.resolve_timezone(config.get("userTimezone"))
    label = _text(sender.get("name")) or peer.get("name")
    return timefmt.format_envelope(text, channel, tz, now, peer_kind=peer["kind"], sender=label)
