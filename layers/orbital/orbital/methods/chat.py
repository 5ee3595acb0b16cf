"""`chat.send` (spec §2.4, §6; fixes F2, F4, F15, F16): slash commands, inline directives, then a run of the agent.

Order of checks: required fields → key canonicalization → a slash command (on the raw text) → directives →
directive-only acknowledgement (nothing stored) → the session registry → the run, started or queued. The reply comes
as `chat` events (`delta`, `partial`, `final`, `error`) under the key this client used.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from pydantic import Field

from orbital.agent import context, events, runs
from orbital.domain import commands
from orbital.domain.config import as_dict
from orbital.domain.reset_policy import initial_policy
from orbital.errors import BadRequestError, RpcError
from orbital.methods.sessions import session_key_param
from orbital.protocol.registry import Params, Result, Router

if TYPE_CHECKING:
    from orbital.protocol.context import CallContext

router = Router("chat")

MAX_RUN_ID = 200


class ChatSendParams(Params):
    # loosely typed so that a wrong type gets GSV's own error text (400 "sessionKey and message required")
    sessionKey: Any = Field(default=None, json_schema_extra={"type": "string"})
    message: Any = Field(default=None, json_schema_extra={"type": "string"})
    runId: Any = Field(default=None, json_schema_extra={"type": "string"})


class ChatSendResult(Result):
    status: str
    runId: str | None = None
    queued: bool | None = None
    queuePosition: int | None = None
    directives: dict[str, Any] | None = None
    command: str | None = None
    response: str | None = None
    error: str | None = None


def _command(ctx: CallContext, key: str, command: commands.Command) -> dict[str, Any]:
    result: dict[str, Any] = {"status": "command", "command": command.name}
    try:
        reply = _run_command(ctx, key, command)
    except RpcError as exc:
        reply = commands.CommandReply(error=commands.command_failed(exc.message))
    except Exception as exc:
        reply = commands.CommandReply(error=commands.command_failed(str(exc) or type(exc).__name__))
    if reply.response is not None:
        result["response"] = reply.response
    if reply.error is not None:
        result["error"] = reply.error
    return result


def _run_command(ctx: CallContext, key: str, command: commands.Command) -> commands.CommandReply:
    services = ctx.services
    now = ctx.now_ms()
    name = command.name
    if name == "reset":
        outcome = runs.reset_session(services, key, now=now, emit_error=events.error_emitter(services))
        return commands.CommandReply(response=commands.reset_response(int(outcome["archivedMessages"])))
    if name == "compact":
        keep = commands.compact_count(command.args)
        if keep is None:
            return commands.CommandReply(error=commands.COMPACT_USAGE)
        outcome = services.sessions.compact(key, keep, now=now)
        return commands.CommandReply(
            response=commands.compact_response(int(outcome["keptMessages"]), int(outcome["trimmedMessages"]))
        )
    if name == "stop":
        stopped = runs.stop(services, key, emit_error=events.error_emitter(services))
        run_id = stopped.run_id if stopped.was_running else None
        return commands.CommandReply(response=commands.format_stop(run_id, stopped.cancelled))
    if name == "help":
        return commands.CommandReply(response=commands.help_text())
    meta = services.sessions.get_or_create_meta(key, now=now, reset_policy=initial_policy(ctx.config()))
    settings = as_dict(meta.get("settings"))
    model = context.effective_model(ctx.config(), meta, {})
    if name == "status":
        extra = []
        run = meta.get("currentRun")
        if isinstance(run, dict):
            extra.append(f"Run: {run.get('runId')} in progress")
        queued = len(meta.get("queue") or [])
        if queued:
            extra.append(f"Queued: {queued}")
        policy = as_dict(meta.get("resetPolicy"))
        return commands.CommandReply(
            response=commands.format_status(
                key,
                int(meta.get("messageCount") or 0),
                int(meta.get("inputTokens") or 0),
                int(meta.get("outputTokens") or 0),
                model,
                settings.get("thinkingLevel"),
                policy.get("mode"),
                extra_lines=extra,
            )
        )
    if name == "model":
        reply = commands.model_command(command.args, model)
    elif name == "think":
        reply = commands.think_command(command.args, settings.get("thinkingLevel"))
    else:  # pragma: no cover - parse_command only yields the names above
        raise BadRequestError(f"Unknown command: {name}")
    if reply.settings_patch:
        services.sessions.patch(key, settings=reply.settings_patch, now=now)
    return reply


def _fallback_provider(ctx: CallContext, key: str) -> str:
    meta = ctx.services.sessions.load_meta(key) or {}
    return context.effective_model(ctx.config(), meta, {})["provider"]


@router.method("chat.send", params=ChatSendParams, result=ChatSendResult)
def chat_send(ctx: CallContext, params: ChatSendParams) -> dict[str, Any]:
    """Send a message to the agent of a session. Slash commands answer at once (`status: "command"`), a message of
    inline directives only is acknowledged (`status: "directive-only"`); anything else starts a run
    (`status: "started"`, `queued: false`) or queues it behind the session's current run (`queued: true` with its
    `queuePosition`). The reply streams as `chat` events carrying `runId`."""
    if not isinstance(params.sessionKey, str) or not params.sessionKey or not isinstance(params.message, str):
        raise BadRequestError("sessionKey and message required")
    if not params.message:
        raise BadRequestError("sessionKey and message required")
    key = session_key_param(ctx, params.sessionKey)
    text = params.message
    command = commands.parse_command(text)
    if command is not None:
        return _command(ctx, key, command)
    directives = commands.parse_directives(text)
    if directives.has_model and directives.raw_model and "/" not in directives.raw_model:
        directives = commands.parse_directives(text, _fallback_provider(ctx, key))
    shown = None
    if directives.has_think or directives.has_model:
        shown = {"thinkLevel": directives.think_level, "model": directives.model}
    if directives.any and not directives.cleaned.strip():
        result: dict[str, Any] = {"status": "directive-only", "directives": shown or {}}
        ack = commands.format_directive_ack(directives)
        if ack is not None:
            result["response"] = ack
        return result

    run_id = params.runId if isinstance(params.runId, str) and params.runId.strip() else str(uuid.uuid4())
    if len(run_id) > MAX_RUN_ID:
        raise BadRequestError(f"runId too long (max {MAX_RUN_ID} characters)")
    services = ctx.services
    services.sessions.touch_registry(key, now=ctx.now_ms())
    if ctx.conn is not None and ctx.conn.mode == "client" and ctx.conn.client_id:
        events.remember_alias(services, key, ctx.conn.client_id, params.sessionKey)
    overrides: dict[str, Any] = {}
    if directives.think_level:
        overrides["thinkLevel"] = directives.think_level
    if directives.model:
        overrides["model"] = directives.model
    data: dict[str, Any] = {"text": directives.cleaned if directives.any else text}
    if overrides:
        data["overrides"] = overrides
    origin = {"kind": "chat", "connectionId": ctx.connection_id}
    submitted = runs.submit(
        services, key, data, run_id=run_id, extra={"origin": origin}, emit_error=events.error_emitter(services)
    )
    result = {"status": "started", "runId": submitted.run_id, "queued": submitted.queued}
    if submitted.queued:
        result["queuePosition"] = submitted.position
    if shown is not None:
        result["directives"] = shown
    return result
