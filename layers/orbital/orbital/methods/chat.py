"""`chat.send` (spec §2.4, §6; fixes F2, F4, F15, F16): slash commands, inline directives, then a run of the agent.

Order of checks: required fields → key canonicalization → a slash command (on the raw text) → directives →
directive-only acknowledgement (nothing stored) → the session registry → the run, started or queued. A dialect's
translator may pass `literal` (`CallContext.internal`, which no GSV client can set): the text is then neither a
command nor has directives, and goes to the model as it is (a WindieOS install's query). The reply comes
as `chat` events (`delta`, `partial`, `final`, `error`) under the key this client used.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Literal

from orbital.agent import approvals, budgets, events, runs, slash
from orbital.channels.media import store_attachments
from orbital.domain import commands, roles
from orbital.errors import BadRequestError
from orbital.methods.approvals import refuse_unless_own
from orbital.methods.sessions import session_key_param
from orbital.protocol.params import Text
from orbital.protocol.registry import CLIENT, Params, Result, Router

if TYPE_CHECKING:
    from orbital.protocol.context import CallContext

router = Router("chat")


class ChatSendParams(Params):
    # lenient: a wrong type reads as absent and gets GSV's own error text (400 "sessionKey and message required")
    sessionKey: Text = None
    message: Text = None
    runId: Text = None


class ChatSendResult(Result):
    status: str
    runId: str | None = None
    queued: Literal[True] | None = None
    """Only on a message queued behind the session's current run (F4); a run that starts at once has no `queued`
    key at all, as GSV clients test `queued === undefined`."""
    queuePosition: int | None = None
    directives: dict[str, Any] | None = None
    command: str | None = None
    response: str | None = None
    error: str | None = None
    approvalId: str | None = None
    """Only on `status: "paused"` when the message was a reminder (not a yes/no) or named another approval."""


DIALECT_VIAS = frozenset({"xeno", "exoclaw", "windie"})


def _via(ctx: CallContext) -> str:
    dialect = ctx.conn.dialect if ctx.conn is not None else None
    return dialect if dialect in DIALECT_VIAS else "chat"


def _answerer(ctx: CallContext, guest: bool) -> dict[str, Any]:
    """Who a yes / no typed into a paused session comes from. A dialect's guest (a WindieOS install's query) is no
    owner and cannot answer."""
    ident = (ctx.conn.client_id if ctx.conn is not None else None) or ctx.connection_id
    by: dict[str, Any] = {"kind": "client", "id": str(ident), "label": str(ident)}
    if guest:
        by["guest"] = True
    return by


@router.method("chat.send", params=ChatSendParams, result=ChatSendResult, modes=CLIENT, scope=roles.CHAT)
def chat_send(ctx: CallContext, params: ChatSendParams) -> dict[str, Any]:
    """Send a message to the agent of a session. Slash commands answer at once (`status: "command"`), a message of
    inline directives only is acknowledged (`status: "directive-only"`); anything else starts a run
    (`status: "started"`, no `queued` key) or queues it behind the session's current run (`status: "started"`,
    `queued: true` with its `queuePosition`). The reply streams as `chat` events carrying `runId`.

    A message that a token budget refuses (what is used plus an estimate of the next model call would exceed the
    session's, the day's or the month's limit: `session.stats` `budget`) fails with `429 Token budget exceeded
    ({scope}: {used}/{limit}): …how to raise it`, and nothing is stored: no message, no run, no queue entry. A run
    that reaches a budget between model calls ends with a `final` note that names the scope.

    Into a session whose run is paused for a tool approval (a `chat` event with `state: "paused"`), a message is
    the answer: `yes` / `no` (also `y`, `approve`, `ok`… / `n`, `deny`, `reject`…, any case, optionally followed by
    the approval id) decides it, anything else is dropped with a reminder. Either way the reply is `{status:
    "paused", runId: <the paused run>, response}` (plus `approvalId` on a reminder). Slash commands still work:
    `/stop` cancels the run and its approval."""
    if not params.sessionKey or not params.message:
        raise BadRequestError("sessionKey and message required")
    key = session_key_param(ctx, params.sessionKey)
    text = params.message
    literal = bool(ctx.internal.get("literal"))  # a dialect's guest: its text is the model's, never a command
    command = None if literal else commands.parse_command(text)
    if command is not None:
        return slash.run(ctx.services, ctx.config(), key, command, now=ctx.now_ms())
    directives = commands.literal_text(text) if literal else slash.directives(ctx.services, ctx.config(), key, text)
    shown = slash.shown(directives)
    if directives.any and not directives.cleaned.strip():
        return _directive_only(directives, shown)
    services = ctx.services
    meta = services.sessions.load_meta(key) or {}
    if approvals.waits_for_answer(meta):  # the session's run waits for a tool approval: the message answers it
        answered = _answer_approval(ctx, key, text, literal)
        if answered is not None:
            return answered
        meta = services.sessions.load_meta(key) or {}

    run_id = params.runId if params.runId and params.runId.strip() else str(uuid.uuid4())
    if len(run_id) > runs.MAX_RUN_ID:
        raise BadRequestError(f"runId too long (max {runs.MAX_RUN_ID} characters)")
    data: dict[str, Any] = {"text": directives.cleaned if directives.any else text}
    overrides = slash.overrides_of(directives)
    model = ctx.internal.get("model")  # a dialect user's chosen model (its settings); a directive still wins
    if isinstance(model, dict) and "model" not in overrides:
        overrides["model"] = model
    origin = _origin(ctx)
    budgets.check_before_run(  # the estimate the run's first model call will reserve; stores nothing
        services, ctx.config(), key, meta, data["text"], now_ms=ctx.now_ms(), origin=origin, overrides=overrides
    )
    label = ctx.internal.get("label")  # a dialect's name for a conversation it opens (sessions.list shows it)
    services.sessions.touch_registry(key, now=ctx.now_ms(), default_label=label if isinstance(label, str) else None)
    if ctx.conn is not None and ctx.conn.mode == "client" and ctx.conn.client_id:
        events.remember_alias(services, key, ctx.conn.client_id, params.sessionKey)
    media = ctx.internal.get("media")
    if isinstance(media, list) and media:  # from a dialect's translator only: GSV's chat.send carries no media
        data["media"] = store_attachments(services, key, [m for m in media if isinstance(m, dict)])
    if overrides:
        data["overrides"] = overrides
    submitted = runs.submit(
        services,
        key,
        data,
        run_id=run_id,
        # a dialect guest's query taints its run; `notify`: a waiter for the run's reply (the MCP endpoint's)
        extra={"origin": origin, "taint": ctx.internal.get("taint"), "notify": ctx.internal.get("notify")},
        emit_error=events.error_emitter(services),
        check_budget=False,
        meta=meta,
    )
    result: dict[str, Any] = {"status": "started", "runId": submitted.run_id}
    if submitted.queued:  # F4: only a queued message says so; a started run carries no `queued` key
        result.update(queued=True, queuePosition=submitted.position)
    if shown is not None:
        result["directives"] = shown
    return result


def _directive_only(directives: commands.Directives, shown: dict[str, Any] | None) -> dict[str, Any]:
    """The answer to a message of inline directives only: acknowledged, no run."""
    result: dict[str, Any] = {"status": "directive-only", "directives": shown or {}}
    ack = commands.format_directive_ack(directives)
    if ack is not None:
        result["response"] = ack
    return result


def _answer_approval(ctx: CallContext, key: str, text: str, literal: bool) -> dict[str, Any] | None:
    """A message into a session whose run waits for a tool approval, as that approval's answer (or a reminder); a
    caller who may not operate answers only its own runs'. None: no approval is pending any more."""
    services = ctx.services
    if not roles.allows(roles.role_of(ctx.conn.extra if ctx.conn is not None else None), roles.OPERATE):
        paused = approvals.pending_of_session(services, key)
        if paused is not None:
            refuse_unless_own(ctx, paused[0])
    return approvals.answer_from_message(services, key, text, by=_answerer(ctx, literal), via=_via(ctx))


def _origin(ctx: CallContext) -> dict[str, Any]:
    """Where a run started: this socket, its device (a client device answers its own runs' approvals) and, for a
    socket with tools of its own, the policy narrowing the run's tools."""
    origin: dict[str, Any] = {"kind": "chat", "connectionId": ctx.connection_id}
    device = ctx.conn.extra.get("deviceId") if ctx.conn is not None else None
    if isinstance(device, str) and device:
        origin["deviceId"] = device
    if ctx.internal.get("clientTools"):
        origin.update(clientTools=True, toolPolicy=ctx.internal.get("toolPolicy") or {})
        if ctx.internal.get("ownTools"):
            origin["ownTools"] = True
    return origin
