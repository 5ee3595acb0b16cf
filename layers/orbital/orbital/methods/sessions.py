"""Session methods (spec §2.3, §5): inspect, patch, preview, reset and compact sessions, and list them.

Every `sessionKey` is canonicalized first (§5.1, with `session.mainKey`, `session.dmScope` and the default agent),
so `main`, `agent:main:web:dm:local` and `agent:main:cli:dm:main` all address `agent:main:main` under the default
configuration. Touching a session persists its `sessionId` and `createdAt` at once.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from pydantic import Field

from orbital.agent import budgets, events, runs, taint
from orbital.domain import roles
from orbital.domain.reset_policy import initial_policy
from orbital.domain.session_keys import canonicalize_with_config
from orbital.errors import BadRequestError
from orbital.protocol.frames import fit
from orbital.protocol.registry import CLIENT, OkResult, Params, Result, Router
from orbital.store.sessions import is_processing, message_count, queue_size, tokens_of

if TYPE_CHECKING:
    from orbital.protocol.context import CallContext

router = Router("sessions")

MAX_KEY_BYTES = 512


# --- params ----------------------------------------------------------------------------------------------------


class SessionKeyParams(Params):
    sessionKey: str | None = None


class SessionPreviewParams(SessionKeyParams):
    limit: int | float | None = None


class Budget(Params):
    maxTokens: int | None = Field(default=None, ge=0)


class SessionPatchParams(SessionKeyParams):
    settings: dict[str, Any] | None = None
    label: str | None = None
    resetPolicy: dict[str, Any] | None = None
    budget: Budget | None = None


class SessionCompactParams(SessionKeyParams):
    keepMessages: int | float | None = None


class SessionsListParams(Params):
    offset: int | float | None = None
    limit: int | float | None = None


# --- results ---------------------------------------------------------------------------------------------------


class Tokens(Result):
    input: int
    output: int
    total: int


class SessionInfo(Result):
    sessionId: str
    sessionKey: str
    createdAt: int
    updatedAt: int
    messageCount: int
    tokens: Tokens
    settings: dict[str, Any]
    resetPolicy: dict[str, Any] | None = None
    lastResetAt: int | None = None
    previousSessionIds: list[str]
    label: str | None = None


class BudgetUse(Result):
    used: int
    """Tokens counted: the session's total; the gateway's for the day or month (with calls in flight)."""
    limit: int | None
    """null: no limit."""
    period: str | None = None
    """The UTC day ("2025-01-31") or month ("2025-01") counted; none for the session."""


class BudgetStatus(Result):
    session: BudgetUse
    daily: BudgetUse
    monthly: BudgetUse


class SessionStats(Result):
    sessionKey: str
    sessionId: str
    messageCount: int
    tokens: Tokens
    createdAt: int
    updatedAt: int
    uptime: int
    isProcessing: bool
    queueSize: int
    currentRunId: str | None = None
    queue: list[dict[str, Any]] | None = None
    budget: BudgetStatus
    taint: dict[str, Any] | None = None
    """Only when the session's history holds content that did not come from an owner (ADR 0041): `{tainted: true,
    sources: [{kind, detail, at, sender?}]}`; every run of the session starts with it, until a reset."""
    currentRunTaint: dict[str, Any] | None = None
    """Only when the current run is tainted: its taint (the session's and what the run read since)."""


class SessionHistory(Result):
    sessionKey: str
    currentSessionId: str
    previousSessionIds: list[str]


class SessionPreview(Result):
    sessionKey: str
    sessionId: str
    messageCount: int
    messages: list[dict[str, Any]]
    truncated: bool | None = None
    taint: dict[str, Any] | None = None
    """Only when the history holds content that did not come from an owner (ADR 0041): `{tainted: true, sources}`."""


class ResetResult(Result):
    ok: bool
    sessionKey: str
    oldSessionId: str
    newSessionId: str
    archivedMessages: int
    archivedTo: str | None = None
    tokensCleared: Tokens
    mediaDeleted: int


class CompactResult(Result):
    ok: bool
    trimmedMessages: int
    keptMessages: int
    archivedTo: str | None = None


class RegistryEntry(Result):
    sessionKey: str
    createdAt: int
    lastActiveAt: int
    label: str | None = None


class SessionsListResult(Result):
    sessions: list[RegistryEntry]
    count: int
    truncated: bool | None = None


# --- helpers ---------------------------------------------------------------------------------------------------


def session_key_param(ctx: CallContext, raw: str | None) -> str:
    """The canonical key of a `sessionKey` param (400 "sessionKey required" when missing or blank)."""
    if not raw or not raw.strip():
        raise BadRequestError("sessionKey required")
    key = canonicalize_with_config(raw, ctx.config())
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise BadRequestError(f"sessionKey too long (max {MAX_KEY_BYTES} bytes)")
    return key


def _whole(value: int | float | None, default: int) -> int:
    """A count param as an integer (fractions truncated, non-finite values ignored)."""
    if value is None or not math.isfinite(value):
        return default
    return math.trunc(value)


def _meta_with_policy(ctx: CallContext, key: str, now: int) -> dict[str, Any]:
    return ctx.services.sessions.get_or_create_meta(key, now=now, reset_policy=initial_policy(ctx.config()))


# --- methods ---------------------------------------------------------------------------------------------------


@router.method("session.get", params=SessionKeyParams, result=SessionInfo, modes=CLIENT, scope=roles.READ)
def session_get(ctx: CallContext, params: SessionKeyParams) -> dict[str, Any]:
    """A session's metadata: ids, timestamps, message count, token totals, settings, reset policy and label.

    A session without a reset policy adopts `session.defaultResetPolicy`. `sessionKey` is "" until the session
    has received a chat message."""
    key = session_key_param(ctx, params.sessionKey)
    meta = _meta_with_policy(ctx, key, ctx.now_ms())
    result: dict[str, Any] = {
        "sessionId": meta["sessionId"],
        "sessionKey": meta.get("sessionKey") or "",
        "createdAt": meta["createdAt"],
        "updatedAt": meta["updatedAt"],
        "messageCount": message_count(meta),
        "tokens": tokens_of(meta),
        "settings": dict(meta.get("settings") or {}),
        "previousSessionIds": list(meta.get("previousSessionIds") or []),
    }
    for name in ("resetPolicy", "lastResetAt", "label"):
        if meta.get(name) is not None:
            result[name] = meta[name]
    return result


@router.method("session.stats", params=SessionKeyParams, result=SessionStats, modes=CLIENT, scope=roles.READ)
def session_stats(ctx: CallContext, params: SessionKeyParams) -> dict[str, Any]:
    """Message count, token totals, age (`uptime` in ms since creation), whether a run is in progress (and its
    `currentRunId`), the messages queued behind it (`queueSize`, and `queue` in order: `{runId, queuedAt}`), and
    the token budgets (`budget`: `session`, `daily` and `monthly`, each `{used, limit}`, `limit` null when unset;
    `daily` and `monthly` count every session of the gateway in the UTC `period` shown), and, when there is any, the
    taint (`taint`: `{tainted: true, sources}`, content in the history that did not come from an owner;
    `currentRunTaint` the current run's; ADR 0041)."""
    key = session_key_param(ctx, params.sessionKey)
    now = ctx.now_ms()
    meta = _meta_with_policy(ctx, key, now)
    result: dict[str, Any] = {
        "sessionKey": meta.get("sessionKey") or "",
        "sessionId": meta["sessionId"],
        "messageCount": message_count(meta),
        "tokens": tokens_of(meta),
        "createdAt": meta["createdAt"],
        "updatedAt": meta["updatedAt"],
        "uptime": now - int(meta["createdAt"]),
        "isProcessing": is_processing(meta),
        "queueSize": queue_size(meta),
        "queue": [{"runId": e.get("runId"), "queuedAt": e.get("queuedAt")} for e in meta.get("queue") or []],
    }
    run = meta.get("currentRun")
    if isinstance(run, dict) and run.get("runId"):
        result["currentRunId"] = run["runId"]
        if taint.is_tainted(run.get(taint.FIELD)):
            result["currentRunTaint"] = taint.shown(run.get(taint.FIELD))
    if taint.session_taint(meta)["tainted"]:
        result["taint"] = taint.session_taint(meta)
    result["budget"] = budgets.status(ctx.services, ctx.config(), meta, now_ms=now)
    return result


@router.method("session.patch", params=SessionPatchParams, result=OkResult, modes=CLIENT, scope=roles.CHAT)
def session_patch(ctx: CallContext, params: SessionPatchParams) -> dict[str, Any]:
    """Change a session's settings (merged; `model` merged field-wise), label and reset policy (merged; mode
    defaults to "manual"), and its token budget (`budget: {maxTokens}`, over `budgets.session`: a message that
    would take the session's total past it is refused by `chat.send`, and a run that reaches it between model
    calls ends with a note instead of calling the model; `maxTokens` null or 0 turns the configured session budget
    off for this session; `budget: null` removes the session's own). Always marks the session as updated now."""
    key = session_key_param(ctx, params.sessionKey)
    given = params.model_fields_set
    ctx.services.sessions.patch(
        key,
        settings=params.settings,
        label=params.label,
        set_label="label" in given,
        reset_policy=params.resetPolicy,
        set_reset_policy="resetPolicy" in given,
        budget=params.budget.model_dump(exclude_unset=True) if params.budget is not None else None,
        set_budget="budget" in given,
        now=ctx.now_ms(),
    )
    return {"ok": True}


@router.method("session.history", params=SessionKeyParams, result=SessionHistory, modes=CLIENT, scope=roles.READ)
def session_history(ctx: CallContext, params: SessionKeyParams) -> dict[str, Any]:
    """The current sessionId and the ids of the sessions it replaced (oldest first)."""
    key = session_key_param(ctx, params.sessionKey)
    meta = ctx.services.sessions.get_or_create_meta(key, now=ctx.now_ms())
    return {
        "sessionKey": meta.get("sessionKey") or "",
        "currentSessionId": meta["sessionId"],
        "previousSessionIds": list(meta.get("previousSessionIds") or []),
    }


@router.method("session.preview", params=SessionPreviewParams, result=SessionPreview, modes=CLIENT, scope=roles.READ)
def session_preview(ctx: CallContext, params: SessionPreviewParams) -> dict[str, Any]:
    """The stored messages, verbatim: the last `limit` of them, or all when `limit` is 0 or absent. A run that was
    stopped or failed leaves a trace after its user message: an assistant message with `api` and `provider`
    "orbital", `stopReason` "aborted" (stopped) or "error" (failed), `errorMessage` (also its text) and `runId`.
    `messageCount` is always the total. If they would not fit one WebSocket message (96 KB of JSON), the newest that
    fit are returned with `truncated: true`. `taint` (`{tainted: true, sources}`), only when there is any, says that the
    history holds content that did not come from an owner (ADR 0041)."""
    key = session_key_param(ctx, params.sessionKey)
    repo = ctx.services.sessions
    meta = repo.get_or_create_meta(key, now=ctx.now_ms())
    limit = _whole(params.limit, 0)
    if limit > 0:
        messages = repo.messages(key, limit, meta=meta)
    else:
        messages = repo.messages(key, meta=meta)
        if limit < 0:
            messages = messages[-limit:]
    messages, truncated = fit(messages, newest_last=True)
    result = {
        "sessionKey": meta.get("sessionKey") or "",
        "sessionId": meta["sessionId"],
        "messageCount": message_count(meta),
        "messages": messages,
    }
    if truncated:
        result["truncated"] = True
    if taint.session_taint(meta)["tainted"]:
        result["taint"] = taint.session_taint(meta)
    return result


@router.method("session.reset", params=SessionKeyParams, result=ResetResult, modes=CLIENT, scope=roles.CHAT)
def session_reset(ctx: CallContext, params: SessionKeyParams) -> dict[str, Any]:
    """Start a fresh session under the same key: messages are archived to
    `agents/{agentId}/sessions/{oldSessionId}.jsonl.gz`, the session's media is deleted, token totals are zeroed.
    Settings, label, reset policy and queued messages are kept. A run in progress is cancelled ("Run cancelled:
    the session was reset"); memories are extracted from the archive in the background when configured."""
    key = session_key_param(ctx, params.sessionKey)
    return runs.reset_session(ctx.services, key, now=ctx.now_ms(), emit_error=events.error_emitter(ctx.services))


@router.method("session.compact", params=SessionCompactParams, result=CompactResult, modes=CLIENT, scope=roles.CHAT)
def session_compact(ctx: CallContext, params: SessionCompactParams) -> dict[str, Any]:
    """Keep the newest `keepMessages` (default 20) messages; older ones are archived to
    `agents/{agentId}/sessions/{sessionId}-part{ms}.jsonl.gz` and removed."""
    key = session_key_param(ctx, params.sessionKey)
    keep = _whole(params.keepMessages, 20)
    return ctx.services.sessions.compact(key, keep, now=ctx.now_ms())


@router.method("sessions.list", params=SessionsListParams, result=SessionsListResult, modes=CLIENT, scope=roles.READ)
def sessions_list(ctx: CallContext, params: SessionsListParams) -> dict[str, Any]:
    """Sessions that received chat or channel messages, most recently active first, paged by `offset` (default 0)
    and `limit` (default 100); `count` is the total. A page that would not fit one WebSocket message (96 KB of
    JSON) is cut short with `truncated: true`: ask for the next page from `offset` + the number returned."""
    entries = ctx.services.sessions.list_registry()
    offset = _whole(params.offset, 0)
    limit = _whole(params.limit, 100)
    page, truncated = fit(entries[offset : offset + limit])
    result: dict[str, Any] = {"sessions": page, "count": len(entries)}
    if truncated:
        result["truncated"] = True
    return result
