"""Slash commands and inline directives of a message, for `chat.send` and channel messages alike (spec §6).

A command answers at once with `{status: "command", command, response?, error?}`; the channel variant formats its
answers for chat apps (spec §6.1 in brackets). Directives apply to one message only.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from orbital.agent import context, events, runs
from orbital.domain import commands
from orbital.domain.config import as_dict
from orbital.domain.reset_policy import initial_policy
from orbital.errors import BadRequestError, RpcError

if TYPE_CHECKING:
    from orbital.ports.services import Services


def run(
    services: Services, config: dict[str, Any], key: str, command: commands.Command, *, now: int, channel: bool = False
) -> dict[str, Any]:
    """Execute a command; failures become `error` ("Command failed: ..."), never an RPC error."""
    result: dict[str, Any] = {"status": "command", "command": command.name}
    try:
        reply = _execute(services, config, key, command, now=now, channel=channel)
    except RpcError as exc:
        reply = commands.CommandReply(error=commands.command_failed(exc.message))
    except Exception as exc:
        reply = commands.CommandReply(error=commands.command_failed(str(exc) or type(exc).__name__))
    if reply.response is not None:
        result["response"] = reply.response
    if reply.error is not None:
        result["error"] = reply.error
    return result


def _execute(
    services: Services, config: dict[str, Any], key: str, command: commands.Command, *, now: int, channel: bool
) -> commands.CommandReply:
    name = command.name
    emit_error = events.error_emitter(services)
    if name == "reset":
        outcome = runs.reset_session(services, key, now=now, emit_error=emit_error)
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
        stopped = runs.stop(services, key, emit_error=emit_error)
        run_id = stopped.run_id if stopped.was_running else None
        return commands.CommandReply(response=commands.format_stop(run_id, stopped.cancelled, channel=channel))
    if name == "help":
        return commands.CommandReply(response=commands.help_text(channel=channel))
    meta = services.sessions.get_or_create_meta(key, now=now, reset_policy=initial_policy(config))
    settings = as_dict(meta.get("settings"))
    model = context.effective_model(config, meta, {})
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
                channel=channel,
                extra_lines=extra,
            )
        )
    if name == "model":
        reply = commands.model_command(command.args, model, channel=channel, config=config)
    elif name == "think":
        reply = commands.think_command(command.args, settings.get("thinkingLevel"), channel=channel)
    else:  # pragma: no cover - parse_command only yields the names above
        raise BadRequestError(f"Unknown command: {name}")
    if reply.settings_patch:
        services.sessions.patch(key, settings=reply.settings_patch, now=now)
    return reply


def directives(services: Services, config: dict[str, Any], key: str, text: str) -> commands.Directives:
    """The message's directives; a model given without a provider keeps the session's current provider, and a model
    of a provider the configuration does not know is an invalid selector (acknowledged as such, not used)."""
    found = commands.parse_directives(text)
    if found.has_model and found.raw_model and "/" not in found.raw_model:
        meta = services.sessions.load_meta(key) or {}
        found = commands.parse_directives(text, context.effective_model(config, meta, {})["provider"])
    if found.model is not None:
        # lazy: the schema's models take tens of ms to build; only config writes and model choices need them
        from orbital.domain import config_schema

        if config_schema.model_problem(config, found.model) is not None:
            found = dataclasses.replace(found, model=None)
    return found


def overrides_of(found: commands.Directives) -> dict[str, Any]:
    """The per-message overrides a run takes from its directives."""
    out: dict[str, Any] = {}
    if found.think_level:
        out["thinkLevel"] = found.think_level
    if found.model:
        out["model"] = found.model
    return out


def shown(found: commands.Directives) -> dict[str, Any] | None:
    """`directives` of a result: present when a think or model directive was given."""
    if found.has_think or found.has_model:
        return {"thinkLevel": found.think_level, "model": found.model}
    return None
