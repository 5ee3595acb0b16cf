"""Recording taint (ADR 0041): which runs hold content that did not come from an owner, and from where.

A **source** is `{kind, detail, at}` (plus `sender`, the `{channel}:{senderId}` or `windie:{user}` identity, when a
person put it there; that person may never answer the run's approvals):

- `channel`: a channel message from a sender not listed in `owners` (`channels.inbound`, through the run field
  `taint` of `runs.submit`);
- `guest`: a WindieOS install's query (`dialects.windie`, through `chat.send`'s internal `taint`);
- `tool`: a result of a tool matching `toolApproval.untrustedTools` (`agent.tools.tool_result_message`), unless it is
  a remote MCP server's marked `trust: trusted`; an MCP server's error taints too (its text is the server's).

Where it is kept:

- `currentRun.taint = {sources: [...]}`: the run's own, from its input on and every untrusted result it reads. The
  approval gate (`agent.approvals.decide`) reads it.
- the session meta's `taint = {sessionId, sources: [...]}`: what stays in the history every later run of the session
  reads. A run starts with the session's sources (`begin`), so the owner's next message in a conversation where a
  stranger wrote is tainted too: the stranger's text is still in its context. Compaction keeps it (a summary carries
  what it summarises); only a reset (a new `sessionId`) clears it.

A source repeated (the same kind, detail and sender) is kept once, with its first time; at most `MAX_SOURCES` are kept
(the first ones: what made the run tainted stays visible).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from orbital.domain import taint as rules
from orbital.domain.config import as_dict

if TYPE_CHECKING:
    from orbital.ports.services import Services

MAX_SOURCES = 20
FIELD = "taint"


def source(kind: str, detail: str, at: int, *, sender: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"kind": kind, "detail": detail, "at": at}
    if sender:
        found["sender"] = sender
    return found


def _sources(value: Any) -> list[dict[str, Any]]:
    found = as_dict(value).get("sources")
    return [dict(s) for s in found if isinstance(s, dict)] if isinstance(found, list) else []


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return all(a.get(k) == b.get(k) for k in ("kind", "detail", "sender"))


def merged(*groups: Any) -> list[dict[str, Any]]:
    """The sources of every `taint` value given, in order, each once, at most `MAX_SOURCES`."""
    out: list[dict[str, Any]] = []
    for group in groups:
        for item in _sources(group):
            if len(out) < MAX_SOURCES and not any(_same(item, seen) for seen in out):
                out.append(item)
    return out


def shown(value: Any) -> dict[str, Any]:
    """The taint of a run as clients see it: `{tainted, sources}`."""
    sources = _sources(value)
    return {"tainted": bool(sources), "sources": sources}


# --- entry points ------------------------------------------------------------------------------------------------


def channel_run_fields(
    config: Mapping[str, Any], channel: str, sender_id: str, sender_name: str | None, now: int
) -> dict[str, Any]:
    """The run fields of a channel message (`runs.submit` `extra`): `{taint: {sources: [...]}}` when its sender is not
    listed in `owners`, else nothing."""
    if rules.is_owner_sender(config, channel, sender_id):
        return {}
    who = rules.identity(channel, sender_id)
    detail = f"{channel} message from {sender_name} ({who})" if sender_name else f"{channel} message from {who}"
    return {FIELD: {"sources": [source("channel", detail, now, sender=who)]}}


def guest_taint(user: str, now: int) -> dict[str, Any]:
    """The taint of a WindieOS install's query (an install is a guest of the owner's gateway)."""
    who = f"windie:{user}"
    return {"sources": [source("guest", f"WindieOS query from {who}", now, sender=who)]}


def begin(meta: dict[str, Any], run: dict[str, Any]) -> None:
    """In a meta update, as `run` (just made from its queue entry) takes the session: it starts with the session's
    sources and its own input's, and the session keeps its input's for the runs after it."""
    own = run.get(FIELD)
    session = meta.get(FIELD) if as_dict(meta.get(FIELD)).get("sessionId") == meta.get("sessionId") else None
    sources = merged(session, own)
    if sources:
        run[FIELD] = {"sources": sources}
    else:
        run.pop(FIELD, None)
    if _sources(own):
        meta[FIELD] = {"sessionId": meta.get("sessionId"), "sources": merged(session, own)}


def session_taint(meta: Mapping[str, Any] | None) -> dict[str, Any]:
    """The session's taint (`{tainted, sources}`) for its current `sessionId` (a reset cleared it)."""
    value = as_dict(as_dict(meta).get(FIELD))
    if not meta or value.get("sessionId") != meta.get("sessionId"):
        return shown(None)
    return shown(value)


def record(services: Services, session_key: str, found: dict[str, Any]) -> None:
    """Add a source to the session's current run and to the session (one meta update; nothing when it is there)."""

    def add(meta: dict[str, Any]) -> bool:
        session = meta.get(FIELD) if as_dict(meta.get(FIELD)).get("sessionId") == meta.get("sessionId") else None
        changed = False
        kept = merged(session, {"sources": [found]})
        if kept != _sources(session):
            meta[FIELD] = {"sessionId": meta.get("sessionId"), "sources": kept}
            changed = True
        run = meta.get("currentRun")
        if isinstance(run, dict):
            sources = merged(run.get(FIELD), {"sources": [found]})
            if sources != _sources(run.get(FIELD)):
                run[FIELD] = {"sources": sources}
                changed = True
        return changed

    services.sessions.update_meta(session_key, add)


def record_tool_result(services: Services, session_key: str, tool: str, now: int) -> bool:
    """Taint the session's run with a result of `tool` when `toolApproval.untrustedTools` names it (and it is not a
    tool of a remote MCP server marked `trust: trusted`). True when it did."""
    if not tool or not rules.is_untrusted(services.config.effective(), tool):
        return False
    record(services, session_key, source("tool", f"result of {tool}", now))
    return True


def is_tainted(value: Any) -> bool:
    """Whether a run's `taint` value has any source."""
    return bool(_sources(value))
