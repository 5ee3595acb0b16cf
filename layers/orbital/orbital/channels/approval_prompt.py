"""Tool approvals on a messenger: the prompt goes to the conversation the run came from, and is answered there.

When a run that came from a channel pauses for a tool approval (`Hooks.on_approval_requested`), its prompt is sent
to the run's peer as a reply to the run's inbound message. On Telegram it carries an inline keyboard (Approve /
Deny); elsewhere it is text, answered by a typed `yes` / `no` (`orbital.channels.inbound`). A run with no channel
(the console, the CLI, a GSV client) sends nothing to any messenger.

Only owners answer from a messenger: the decision is the engine's (`orbital.agent.approvals.resolve`, which refuses
anyone `may_answer` does not accept); here the presser is named exactly (`telegram:{userId}`). A conversation where
no owner can answer (a DM with someone who is not in `owners`) gets the prompt without buttons and a note that the
owner answers elsewhere.

A button's `callback_data` is `ap:{approvalId}:{a|d}:{mac}`: 30 bytes (Telegram allows 64), the mac the first 16 hex
digits of an HMAC-SHA256 of the rest keyed with the account's webhook secret, so no client can forge a press for
another approval or turn a Deny into an Approve. A press is also checked against the chat the prompt went to and
the message it was posted as (stored per approval, `keys.approval_prompt`: before it is sent, since a press can come
back before Telegram's answer does, and its message id once that answer is in), answered with `answerCallbackQuery`
once even when Telegram delivers the update again, and the message is edited once to show the decision and who made
it when the approval is resolved, wherever that happened (`Hooks.on_approval_resolved`: the console, the CLI, a typed
`yes`, a button), or as soon as its message id is known when the decision came first.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import threading
import time
from typing import TYPE_CHECKING, Any

from orbital.agent import approvals
from orbital.channels import delivery, inbound
from orbital.channels.adapters import is_passing
from orbital.channels.base import ChannelError, Outbound
from orbital.domain.config import as_dict
from orbital.errors import ConflictError, RpcError
from orbital.store import conditions as cond
from orbital.store import keys

if TYPE_CHECKING:
    from orbital.channels.telegram import TelegramAdapter
    from orbital.ports.services import Services

log = logging.getLogger("orbital.channels.approval_prompt")

TELEGRAM = "telegram"
CALLBACK_PREFIX = "ap"
_CALLBACK = re.compile(r"ap:([0-9a-f]{8}):([ad]):([0-9a-f]{16})")
_DECISIONS = {"a": "approve", "d": "deny"}
REPLY_LINE = 'Reply with "yes" to approve or "no" to deny.'
OWNER_ELSEWHERE = "Only the owner can answer this, from the console or the CLI."
NOT_OWNER = "Only the owner can answer this request."
NOT_PENDING = "This request is no longer pending."
NOT_VALID = "This button is not valid."
PROMPT_TTL_S = 7 * 24 * 3600
"""How long a prompt's message is remembered past the approval's expiry (the edit after a late decision)."""
BUTTONS = (("Approve", "a"), ("Deny", "d"))


def _telegram() -> TelegramAdapter:
    # lazy: the Telegram client is imported only when a Telegram chat is involved (built-in adapters, ADR 0009)
    from orbital.channels.telegram import TelegramAdapter

    return TelegramAdapter()


# --- callback data ------------------------------------------------------------------------------------------------


def _mac(secret: str, approval_id: str, code: str) -> str:
    digest = hmac.new(secret.encode("utf-8"), f"{CALLBACK_PREFIX}:{approval_id}:{code}".encode(), hashlib.sha256)
    return digest.hexdigest()[:16]


def callback_data(secret: str, approval_id: str, decision: str) -> str:
    """The `callback_data` of the button that answers `approval_id` with `decision` ("approve" / "deny")."""
    code = next(c for c, d in _DECISIONS.items() if d == decision)
    return f"{CALLBACK_PREFIX}:{approval_id}:{code}:{_mac(secret, approval_id, code)}"


def parse_callback(secret: str, data: Any) -> tuple[str, str] | None:
    """`(approvalId, decision)` of a button's data, or None when it is not one of ours or its mac is wrong."""
    found = _CALLBACK.fullmatch(data) if isinstance(data, str) else None
    if found is None:
        return None
    approval_id, code, mac = found.groups()
    if not hmac.compare_digest(mac, _mac(secret, approval_id, code)):
        return None
    return approval_id, _DECISIONS[code]


def keyboard(secret: str, approval_id: str) -> dict[str, Any]:
    """The inline keyboard of a prompt: one row, Approve and Deny."""
    row = [{"text": label, "callback_data": callback_data(secret, approval_id, _DECISIONS[c])} for label, c in BUTTONS]
    return {"inline_keyboard": [row]}


# --- who may answer where -----------------------------------------------------------------------------------------


def owners(config: dict[str, Any]) -> list[str]:
    found = config.get("owners")
    return [str(o) for o in found if isinstance(o, str | int)] if isinstance(found, list) else []


def answerable_here(config: dict[str, Any], target: dict[str, Any]) -> bool:
    """Whether an owner can answer in the run's conversation: in a DM, when its peer is an owner; in a group, when
    some owner is known on that channel (only owners' answers count there)."""
    channel = str(target.get("channel") or "")
    peer = as_dict(target.get("peer"))
    known = owners(config)
    if peer.get("kind", "dm") == "dm":
        return f"{channel}:{peer.get('id')}" in known
    return any(o.startswith(f"{channel}:") for o in known)


def sender_identity(channel: str, user: dict[str, Any]) -> dict[str, Any]:
    """`by` of a messenger user: `{kind: "channel", id: "{channel}:{userId}", label}`."""
    user_id = str(user.get("id"))
    name = " ".join(str(user[k]) for k in ("first_name", "last_name") if user.get(k)).strip()
    if not name and user.get("username"):
        name = f"@{user['username']}"
    return {"kind": "channel", "id": f"{channel}:{user_id}", "label": name or user_id}


# --- the prompt and its outcome -----------------------------------------------------------------------------------


def prompt_text(approval: dict[str, Any], *, answerable: bool) -> str:
    text = str(approval.get("prompt") or f"Run paused: tool approval required.\nTool: {approval.get('tool')}")
    if answerable:
        return text
    lines = [line for line in text.split("\n") if line != REPLY_LINE]
    return "\n".join([*lines, OWNER_ELSEWHERE])


def outcome_line(resolution: dict[str, Any]) -> str:
    """What a prompt says once decided: "Approved by Ada (telegram)", "Denied by owner (console)", "Timed out:
    denied", "Cancelled"."""
    decision = resolution.get("decision")
    by = as_dict(resolution.get("by"))
    who = str(by.get("label") or by.get("id") or "the owner")
    via = resolution.get("via")
    where = f" ({via})" if isinstance(via, str) and via and via not in ("timeout", "stop") else ""
    if decision == "approve":
        return f"Approved by {who}{where}."
    if decision == "deny":
        return f"Denied by {who}{where}."
    if decision == "timeout":
        return "Timed out: denied."
    return "Cancelled: the run was stopped."


def decided_text(prompt: str, resolution: dict[str, Any]) -> str:
    lines = [line for line in prompt.split("\n") if line not in (REPLY_LINE, OWNER_ELSEWHERE)]
    return "\n".join([*lines, "", outcome_line(resolution)])


# --- hooks --------------------------------------------------------------------------------------------------------


def on_requested(services: Services, approval: dict[str, Any], run: dict[str, Any]) -> None:
    """`Hooks.on_approval_requested`: the prompt of a channel run goes to its conversation. Never raises."""
    target = as_dict((run or {}).get("deliver"))
    if not target.get("channel") or not as_dict(target.get("peer")).get("id"):
        return  # not a messenger's run: the console and the clients have it
    try:
        _post(services, approval, target)
    except Exception as exc:  # the prompt is also on the console; a messenger failing must not break the pause
        log.warning(
            "approval prompt %s to %s failed: %s",
            approval.get("approvalId"),
            target.get("channel"),
            getattr(exc, "message", None) or type(exc).__name__,
        )


def _post(services: Services, approval: dict[str, Any], target: dict[str, Any]) -> None:
    channel = str(target["channel"])
    if target.get("kind") == "heartbeat":
        target = {k: v for k, v in target.items() if k != "replyToId"}
    config = services.config.effective()
    answerable = answerable_here(config, target)
    text = prompt_text(approval, answerable=answerable)
    delivery.typing(services, target, False)
    approval_id = str(approval.get("approvalId") or "")
    account_id = str(target.get("accountId") or "default")
    adapter = _telegram() if channel == TELEGRAM else None
    secret = adapter.webhook_secret(services, account_id) if adapter is not None else None
    if adapter is None or not secret or not answerable or not re.fullmatch(r"[0-9a-f]{8}", approval_id):
        delivery.send(services, target, text, session_key=str(approval.get("sessionKey") or ""))
        return
    peer = as_dict(target.get("peer"))
    expires_ms = approval.get("expiresAt")
    expires_s = int(expires_ms) // 1000 if isinstance(expires_ms, int | float) else int(time.time())
    key = keys.approval_prompt(approval_id, channel)
    # recorded before it is sent: a press can come back before `send_buttons` returns; the message id follows
    services.table.put(
        key, {"accountId": account_id, "chatId": str(peer.get("id")), "prompt": text}, ttl=expires_s + PROMPT_TTL_S
    )
    posted = adapter.send_buttons(
        services, Outbound(account_id, peer, text, target.get("replyToId")), keyboard(secret, approval_id)
    )
    if posted is None:
        return
    services.table.update(key, set_attrs={"chat": posted[0], "msg": posted[1]}, return_values="NONE")
    decided = approvals.load_resolution(services, approval_id)
    if decided is not None:  # answered before the message id was known: `_edit` found nothing to edit then
        _edit(services, approval_id, decided)


def on_resolved(services: Services, approval: dict[str, Any], resolution: dict[str, Any]) -> None:
    """`Hooks.on_approval_resolved`: the Telegram prompt of that approval (if one was posted) shows the decision
    and loses its buttons. Never raises."""
    approval_id = str((approval or {}).get("approvalId") or resolution.get("approvalId") or "")
    if not approval_id:
        return
    pressing = getattr(_pressing, "approval", None)
    if pressing is not None and pressing[0] == approval_id:  # a button of it, on this thread: edited once answered
        pressing[1].append(resolution)
        return
    _edit(services, approval_id, resolution)


def _edit(services: Services, approval_id: str, resolution: dict[str, Any]) -> None:
    """The prompt's message shows the decision and loses its buttons: once, by whichever of the resolution's hook
    and the prompt's sender (when the decision came first) gets to claim it, and only once its message id is known."""
    key = keys.approval_prompt(approval_id, TELEGRAM)
    claim = cond.all_of(cond.exists("msg"), cond.not_exists("edited"))
    try:
        try:
            found = services.table.update(key, set_attrs={"edited": 1}, condition=claim)
        except ConflictError:
            return  # not posted (yet), or edited already
        if found is None:
            return
        data = found.data
        adapter = _telegram()
        api = adapter.api(services, str(data.get("accountId") or "default"))
        api.edit_message_text(
            found.attrs["chat"], int(found.attrs["msg"]), decided_text(str(data.get("prompt")), resolution)
        )
    except Exception as exc:
        log.warning(
            "editing the approval prompt %s failed: %s",
            approval_id,
            getattr(exc, "message", None) or type(exc).__name__,
        )


# --- a button pressed ---------------------------------------------------------------------------------------------

_pressing = threading.local()
"""`approval`: the approval a button press on this thread is resolving, and where its resolution goes."""


def callback(services: Services, account_id: str, update: dict[str, Any]) -> None:
    """A `callback_query` update: a press of a prompt's button. Answered (`answerCallbackQuery`) once, whatever
    happens; the approval is resolved by the engine, which refuses a presser who is not an owner."""
    query = as_dict(update.get("callback_query"))
    query_id = query.get("id")
    if not isinstance(query_id, str) or not query_id:
        return
    if inbound.claim(services, TELEGRAM, account_id, f"callback:{query_id}") is not None:
        return  # delivered again: it was (or is being) answered
    decided: list[dict[str, Any]] = []
    try:
        notice, alert = _pressed(services, account_id, query, decided)
    except Exception as exc:
        if is_passing(exc):  # Telegram delivers the update again (the webhook answers 503)
            inbound.settle(services, TELEGRAM, account_id, f"callback:{query_id}", done=False)
            raise
        log.warning("a button press was not processed: %s", getattr(exc, "message", None) or type(exc).__name__)
        notice, alert = NOT_VALID, True
    finally:
        _pressing.approval = None
    inbound.settle(services, TELEGRAM, account_id, f"callback:{query_id}", done=True)
    try:  # the presser's spinner stops first, then the prompt shows the decision
        _telegram().api(services, account_id).answer_callback_query(query_id, notice, show_alert=alert)
    except ChannelError as exc:
        log.warning("answerCallbackQuery failed: %s", exc.message)
    for resolution in decided:
        _edit(services, str(resolution.get("approvalId") or ""), resolution)


def _pressed(
    services: Services, account_id: str, query: dict[str, Any], decided: list[dict[str, Any]]
) -> tuple[str, bool]:
    """Resolve what the press asks; the notice for the presser and whether it is an alert. The resolution the
    engine reports for it meanwhile (`on_resolved`) is put in `decided`, for the edit after the answer."""
    secret = _telegram().webhook_secret(services, account_id)
    parsed = parse_callback(secret, query.get("data")) if secret else None
    if parsed is None:
        return NOT_VALID, True
    approval_id, decision = parsed
    found = services.table.get(keys.approval_prompt(approval_id, TELEGRAM))
    message = as_dict(query.get("message"))
    chat = as_dict(message.get("chat"))
    if (
        found is None
        or str(found.data.get("accountId")) != account_id
        or str(found.attrs.get("chat") or found.data.get("chatId")) != str(chat.get("id"))
        or ("msg" in found.attrs and str(found.attrs["msg"]) != str(message.get("message_id")))
    ):
        return NOT_VALID, True
    user = as_dict(query.get("from"))
    if user.get("id") is None:
        return NOT_OWNER, True
    by = sender_identity(TELEGRAM, user)
    _pressing.approval = (approval_id, decided)
    try:
        result = approvals.resolve(services, approval_id, decision, by=by, via=TELEGRAM)
    except RpcError as exc:
        if exc.code == 403:
            return NOT_OWNER, True
        if exc.code == 404:
            return NOT_PENDING, False
        raise
    if result.get("resolved"):
        return ("Approved." if decision == "approve" else "Denied."), False
    return str(result.get("message") or NOT_PENDING), False
