"""Replies of runs that came from a channel (or are meant for one) go back to it (spec §12.4, fix F16).

A run carries `deliver = {kind, channel, accountId, peer, replyToId?, agentId?, jobId?}` when its reply belongs
to a messenger: `chat` (a channel message), `heartbeat` (filtered: acknowledgements are not sent, F8), `cron`.
`partial` texts and the `final` text are sent as they come; on `final`, `error` and `paused` typing stops (a pause's
prompt is sent by `orbital.channels.approval_prompt`, which has the approval); an `error` sends a
short note so the person is not left waiting (GSV sent nothing), without the gateway's internals and not for a
cancellation the person asked for. Sending never fails a run: errors are logged.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from orbital.channels.adapters import adapter_for, public_reason
from orbital.channels.base import ChannelError, Outbound
from orbital.domain.config import as_dict
from orbital.domain.run_ends import RESET_REASON, USER_CANCELLED
from orbital.engines import heartbeat

if TYPE_CHECKING:
    from orbital.ports.services import Services

log = logging.getLogger("orbital.channels.delivery")

ERROR_REPLY_LIMIT = 300
_ASKED_FOR = frozenset({USER_CANCELLED, RESET_REASON})
"""Ends the person asked for (`/stop`, `/new`): the command's own answer says so, no error note."""


def trim_leading_blank_lines(text: str) -> str:
    """Drop whitespace-only lines at the start, keeping the first real line's indentation."""
    lines = text.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    return "\n".join(lines)


def error_reply(error: str) -> str:
    short = " ".join(public_reason(error).split())
    if len(short) > ERROR_REPLY_LIMIT:
        short = short[: ERROR_REPLY_LIMIT - 1] + "…"
    return f"Sorry, I couldn't finish that: {short}"


def send(services: Services, target: dict[str, Any], text: str, *, session_key: str = "") -> bool:
    """Send `text` to a delivery target; False (logged) when the channel could not take it."""
    channel, account_id = str(target.get("channel") or ""), str(target.get("accountId") or "default")
    peer = as_dict(target.get("peer"))
    if not channel or not peer.get("id") or not text.strip():
        return False
    message = Outbound(account_id, peer, text, target.get("replyToId"), session_key)
    try:
        adapter_for(channel).send(services, message)
    except ChannelError as exc:
        log.warning("delivery to %s:%s failed: %s", channel, account_id, exc.message)
        return False
    except Exception as exc:
        log.warning("delivery to %s:%s failed: %s", channel, account_id, type(exc).__name__)
        return False
    return True


def typing(services: Services, target: dict[str, Any], on: bool) -> None:
    channel = str(target.get("channel") or "")
    peer = as_dict(target.get("peer"))
    if not channel or not peer.get("id"):
        return
    try:
        adapter_for(channel).typing(services, str(target.get("accountId") or "default"), peer, on)
    except Exception as exc:  # typing is cosmetic
        log.debug("typing on %s failed: %s", channel, type(exc).__name__)


def run_reply(services: Services, session_key: str, run: dict[str, Any], state: str, text: str | None) -> None:
    """A reply text of a run (`Hooks.on_run_reply`, registered by the channels family): delivered when the run
    carries `deliver`. A failure is logged, never raised into the run."""
    if not run.get("deliver"):
        return
    try:
        deliver(services, session_key, run, state, text)
    except Exception:
        log.exception("channel delivery of run %s failed", run.get("runId"))


def deliver(services: Services, session_key: str, run: dict[str, Any], state: str, text: str | None) -> None:
    """Called for every `partial` / `final` / `error` / `paused` of a run that carries `deliver`."""
    target = as_dict(run.get("deliver"))
    if not target:
        return
    if state in ("final", "error", "paused"):
        typing(services, target, False)
    if state == "paused":  # the prompt goes with its approval (`approval_prompt.on_requested`: Telegram's buttons)
        return
    if state == "error":
        if text and target.get("kind") != "heartbeat" and text not in _ASKED_FOR:
            send(services, target, error_reply(text), session_key=session_key)
        return
    body = trim_leading_blank_lines(text or "")
    if not body.strip():
        return
    if target.get("kind") == "heartbeat":
        filtered = heartbeat.filter_delivery(services, str(target.get("agentId") or "main"), body, services.now_ms())
        if filtered is None:
            return
        body = filtered
        target = {k: v for k, v in target.items() if k != "replyToId"}
    send(services, target, body, session_key=session_key)
