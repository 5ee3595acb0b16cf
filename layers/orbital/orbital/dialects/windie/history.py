"""A conversation's history: `rehydrate-conversation` and `compact-history`."""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

from orbital.agent import compaction, events, runs, settings
from orbital.dialects import base
from orbital.dialects.windie.common import (
    COMPACTION_AWS_S,
    HOLD_MARGIN_S,
    LAMBDA_MARGIN_S,
    MAX_REHYDRATE_MESSAGES,
    MIN_COMPACTION_S,
    _InvalidFrameError,
    log,
)
from orbital.dialects.windie.conversations import _image_entry, label, session_key
from orbital.dialects.windie.frames import _error, _local_events, _ref, _WindieSocket
from orbital.dialects.windie.preview import query_model
from orbital.dialects.windie.query import (
    _mark_guest,
)
from orbital.dialects.windie.user_settings import (
    load_settings_item,
)
from orbital.domain.config import as_dict
from orbital.ports import invocation

if TYPE_CHECKING:
    from orbital.ports.services import Services


def _timestamp(value: Any, default: int) -> int:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return int(value if value > 10**11 else value * 1000)
    if isinstance(value, str) and value:
        try:
            return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
        except ValueError:
            return default
    return default


def _calls_of(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """An assistant entry's `tool_calls` (OpenAI's shape or a flat one) as stored tool-call blocks."""
    blocks = []
    for n, call in enumerate(entry.get("tool_calls") or []):
        if not isinstance(call, dict):
            continue
        function = as_dict(call.get("function")) or call
        name = function.get("name")
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = {}
        if not isinstance(name, str):
            continue
        call_id = call.get("id") if isinstance(call.get("id"), str) else f"tool_call_{n}"
        blocks.append(
            {
                "type": "toolCall",
                "id": call_id,
                "name": name,
                "arguments": arguments if isinstance(arguments, dict) else {},
            }
        )
    return blocks


def convert_history(
    services: Services, session: str, entries: list[Any], reader: str | None, now: int
) -> list[dict[str, Any]]:
    """WindieOS conversation entries as stored messages: users' text (and screenshot), assistants' text and tool
    calls, tool outputs as the results of those calls (as a user's note when no call of theirs precedes them)."""
    messages: list[dict[str, Any]] = []
    open_calls: dict[str, str] = {}
    for n, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise _InvalidFrameError(f"messages[{n}] must be an object")
        role = entry.get("role")
        content = entry.get("content")
        if content is None:
            content = ""
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False)
        stamp = _timestamp(entry.get("timestamp"), now + n)
        if role == "user":
            image = _image_entry(services, entry.get("screenshot_ref"), reader) if entry.get("screenshot_ref") else None
            if image is None:
                messages.append({"role": "user", "content": content, "timestamp": stamp})
            else:
                block = {"type": "image", "r2Key": image["r2Key"], "mimeType": image["mimeType"]}
                messages.append(
                    {"role": "user", "content": [{"type": "text", "text": content}, block], "timestamp": stamp}
                )
        elif role == "assistant":
            calls = _calls_of(entry)
            blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
            blocks += calls
            open_calls = {str(c["id"]): str(c["name"]) for c in calls}
            messages.append(
                {
                    "role": "assistant",
                    "content": blocks,
                    "api": "windie",
                    "provider": "windie",
                    "model": "rehydrated",
                    "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0, "cost": {}},
                    "stopReason": "toolUse" if calls else "stop",
                    "timestamp": stamp,
                }
            )
        elif role == "tool":
            call_id = entry.get("tool_call_id") or entry.get("correlation_id")
            name = entry.get("tool_name") if isinstance(entry.get("tool_name"), str) else "tool"
            if isinstance(call_id, str) and call_id in open_calls:
                result = {
                    "role": "toolResult",
                    "toolCallId": call_id,
                    "toolName": open_calls.pop(call_id),
                    "content": [{"type": "text", "text": content}],
                    "isError": False,
                    "timestamp": stamp,
                }
                messages.append(result)
            else:
                messages.append({"role": "user", "content": f"[output of {name}]\n{content}", "timestamp": stamp})
        else:
            raise _InvalidFrameError(f"messages[{n}].role must be user, assistant or tool")
    return messages


def _rehydrate(services: Services, sock: _WindieSocket, rid: Any, payload: dict[str, Any]) -> list[Any]:
    conversation = _ref(payload)
    mode = payload.get("rehydrate_mode", "replace")
    if mode != "replace":
        raise _InvalidFrameError('rehydrate_mode must be "replace"')
    entries = payload.get("messages")
    if not isinstance(entries, list) or len(entries) > MAX_REHYDRATE_MESSAGES:
        raise _InvalidFrameError(f"messages must be a list (at most {MAX_REHYDRATE_MESSAGES})")
    key = session_key(services.config.effective(), sock.user, conversation)
    if runs.current_run(services, key) is not None:
        return [
            _error(rid, "A query is running in this conversation: stop it first", sock.user, conversation=conversation)
        ]
    now = services.now_ms()
    if not sock.admin:  # before the reset: what it archives is a guest's, and no memory is taken from it
        _mark_guest(services, key, services.sessions.load_meta(key))
    reset = base.call(services, sock.conn, "session.reset", {"sessionKey": key})  # archived, as a reset archives
    if not reset.ok:
        return [_error(rid, f"Could not replace the history: {reset.message}", sock.user, conversation=conversation)]
    messages = convert_history(services, key, entries, sock.reader, now)
    if messages:
        services.sessions.append_messages(key, messages, updated_at=now)
    services.sessions.touch_registry(key, now=now, default_label=label(sock.user, conversation))
    return []


def compaction_seconds(services: Services, config: dict[str, Any]) -> float:
    """How long `compact-history` may take: `timeouts.llmMs` where requests are not cut off (the local gateway);
    on AWS, where it runs inside the frame's Lambda invocation, what that invocation has left less a margin, and
    never over `COMPACTION_AWS_S`."""
    longest = settings.llm_timeout_ms(config) / 1000
    if not services.capabilities.bounded_requests:
        return longest
    left = invocation.remaining_seconds()
    bound = COMPACTION_AWS_S if left is None else left - LAMBDA_MARGIN_S
    return max(0.0, min(longest, COMPACTION_AWS_S, bound))


def _compact(services: Services, sock: _WindieSocket, rid: Any, payload: dict[str, Any]) -> list[Any]:
    """Summarize a conversation's older messages now, within what this request may take (on AWS, its Lambda
    invocation's remaining time), holding the session as a run does meanwhile: a query sent meanwhile queues."""
    conversation = _ref(payload)
    config = services.config.effective()
    key = session_key(config, sock.user, conversation)
    # its events are numbered as a turn's are (the SDK checks the sequence of every event that names a
    # conversation), the request's id their turn: 1 started, 2 completed or failed (1 when it never started)
    ref = {"turn": str(rid) if rid is not None else str(uuid.uuid4()), "conv": conversation, "user": sock.user}
    ref["session"] = key
    sent = 0

    def failed(message: str) -> list[Any]:
        body = {"conversation_ref": conversation, "message": message}
        return _local_events(ref, [("context-compaction-failed", body)], sent)

    seconds = compaction_seconds(services, config)
    if seconds < MIN_COMPACTION_S:
        return failed("Compaction needs more time than this request has left; try again")
    hold = f"compact-{uuid.uuid4().hex}"
    if not runs.hold(services, key, hold, int((seconds + HOLD_MARGIN_S) * 1000), kind="compaction"):
        return failed("A query is running in this conversation")
    try:
        (started,) = _local_events(ref, [("context-compaction-started", {"conversation_ref": conversation})])
        if not services.push(sock.conn.connection_id, started):
            return []
        sent = 1
        deadline = time.monotonic() + seconds
        meta = services.sessions.load_meta(key) or {}
        if not sock.admin:
            meta = _mark_guest(services, key, meta)
        messages = services.sessions.messages(key, meta=meta)
        model = query_model(config, meta, load_settings_item(services, sock.user))
        force = payload.get("force") is not False
        done = compaction.maybe_compact(
            services, config, key, meta, messages, model, "", force=force, deadline=deadline, strict=True
        )
    except compaction.SummaryFailedError:
        return failed("The model could not summarize the history; history unchanged")
    except compaction.OutOfTimeError:
        log.warning("compacting %s did not finish within %.1fs", key, seconds)
        return failed(f"Compaction could not finish within {seconds:.0f}s (this request's limit); history unchanged")
    except Exception:
        log.exception("compacting %s failed", key)
        return failed("Compaction failed")
    finally:
        runs.finish(services, key, hold, None, emit_error=events.error_emitter(services))
    body = {
        "conversation_ref": conversation,
        "compacted": done is not None,
        "message_count": len(done) if done is not None else len(messages),
    }
    return _local_events(ref, [("context-compaction-completed", body)], sent)
