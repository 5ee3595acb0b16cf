"""xeno's gateway JSON-RPC 2.0 (one message per line on its Unix socket, one per text frame over `/ws`).

Methods: `gateway.initialize` (the main session's id and its user/assistant text turns), `gateway.query` (a message
to the agent's main session: `{accepted: true}` at once, then `gateway.stats` → one final `gateway.stream` →
`gateway.done` for that `requestId`, or `gateway.error` → `gateway.done`), `gateway.abort` (`/stop` of the main
session's run), `gateway.heartbeat` and `gateway.new_session` (answered when the run they start has ended: the answer
is posted later with the request's id, nothing waits). Every handler error is code -32000 with xeno's exact message;
invalid JSON, `jsonrpc` other than "2.0", batches and client notifications get no reply. Ids are echoed with their
JSON type. The socket must have authenticated at its upgrade (a bearer, or the loopback rule of a gateway without
a token); the local Unix socket is its owner's (file permissions).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from orbital.agent import runs
from orbital.aws import secrets
from orbital.dialects import base
from orbital.dialects.detect import XENO
from orbital.domain import compaction
from orbital.domain import config as cfg
from orbital.domain import heartbeat as heartbeat_rules
from orbital.domain.session_keys import resolve_agent_main_session_key
from orbital.protocol.registry import DialectClose, DialectInbound, Router

if TYPE_CHECKING:
    from orbital.runtime.services import Services
    from orbital.store.connections import Connection
    from orbital.store.subscriptions import Subscription

log = logging.getLogger("orbital.dialects.xeno")

router = Router("xeno")

ERROR_CODE = -32000
ATTACHMENT_TYPES = frozenset({"image", "video", "audio", "voice", "document", "animation", "sticker"})
HISTORY_BYTES = 100 * 1024
"""`gateway.initialize` keeps the newest turns that fit (one WebSocket message on AWS holds 128 KB)."""
FINAL_CHARS = 120_000
"""A final reply longer than this is cut with a marker (API Gateway's 128 KB message)."""
NO_RESPONSE = "[No response]"
ABORTED = "Query aborted."
NEW_SESSION_PROMPT = "Wake up and bring back your memory."


def _response(rpc_id: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "result": result}


def _error(rpc_id: Any, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": ERROR_CODE, "message": message}}


def _notification(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


class _Invalid(Exception):
    """A request's params failed xeno's validation (the message is xeno's, exactly)."""


@router.dialect_frame(XENO)
def receive(services: Services, inbound: DialectInbound) -> list[Any]:
    """One frame: one message, or several lines of messages (a trailing newline is tolerated)."""
    conn = inbound.conn
    if conn is None or conn.pending or conn.dialect != XENO:
        if secrets.token_configured(services.settings) and not (conn is not None and conn.extra.get("bearer")):
            return [_error(_id_of(inbound.frame), "Unauthorized"), DialectClose(4001, "Unauthorized")]
        conn = base.accept(services, conn, inbound.connection_id, XENO)
    frames: list[Any] = []
    lines = [inbound.text] if inbound.frame is not None else inbound.text.split("\n")
    for line in lines:
        if not line.strip():
            continue
        try:
            message = json.loads(line) if inbound.frame is None else inbound.frame
        except ValueError:
            log.debug("xeno: a line that is not JSON, ignored")
            continue
        frames.extend(_message(services, conn, message))
    return frames


def _id_of(frame: Any) -> Any:
    return frame.get("id") if isinstance(frame, dict) else None


def _message(services: Services, conn: Connection, message: Any) -> list[Any]:
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return []  # a batch, or not JSON-RPC 2.0: xeno logs it and answers nothing
    rpc_id = message.get("id")
    if rpc_id is None or isinstance(rpc_id, bool | dict | list):
        return []  # a notification from the client
    method = message.get("method")
    params = message.get("params")
    try:
        if method == "gateway.initialize":
            return [_response(rpc_id, _initialize(services))]
        if method == "gateway.query":
            return _query(services, conn, rpc_id, params)
        if method == "gateway.abort":
            if params is not None and not isinstance(params, dict):
                raise _Invalid("Invalid abort params.")
            base.call(services, conn, "chat.send", {"sessionKey": _main_key(services), "message": "/stop"})
            return [_response(rpc_id, {"ok": True})]
        if method == "gateway.heartbeat":
            _task_params(params, "Invalid heartbeat params.")
            return _heartbeat(services, conn, rpc_id)
        if method == "gateway.new_session":
            _task_params(params, "Invalid new_session params.")
            return _new_session(services, conn, rpc_id)
    except _Invalid as exc:
        return [_error(rpc_id, str(exc))]
    return [_error(rpc_id, f"Method not found: {method}")]


def _task_params(params: Any, message: str) -> None:
    if params is not None and not isinstance(params, dict):
        raise _Invalid(message)


def _main_key(services: Services) -> str:
    config = services.config.effective()
    main = (config.get("session") or {}).get("mainKey")
    return resolve_agent_main_session_key(cfg.default_agent_id(config), main if isinstance(main, str) else None)


# --- gateway.initialize ---------------------------------------------------------------------------------------------


def _initialize(services: Services) -> dict[str, Any]:
    key = _main_key(services)
    meta = services.sessions.load_meta(key)
    messages = services.sessions.messages(key, meta=meta) if meta is not None else []
    history: list[dict[str, str]] = []
    for message in messages:
        role = message.get("role")
        if role not in ("user", "assistant") or compaction.is_summary_message(message):
            continue
        text = _text(message)
        if text or role == "user":
            history.append({"role": role, "content": text})
    kept: list[dict[str, str]] = []
    size = 0
    for turn in reversed(history):
        size += len(json.dumps(turn, ensure_ascii=False).encode())
        if size > HISTORY_BYTES and kept:
            break
        kept.append(turn)
    session_id = meta.get("sessionId") if meta is not None and messages else None
    return {"sessionId": session_id, "history": list(reversed(kept))}


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


# --- gateway.query ----------------------------------------------------------------------------------------------


def _validated_query(params: Any) -> tuple[str, str]:
    """xeno's checks, in xeno's order: the params, then the attachments, the request id, the content, the
    context and its type."""
    if not isinstance(params, dict):
        raise _Invalid("Invalid query params.")
    if "attachments" in params and params["attachments"] is not None:
        attachments = params["attachments"]
        if not isinstance(attachments, list):
            raise _Invalid("Invalid query attachments payload.")
        for item in attachments:
            if not isinstance(item, dict):
                raise _Invalid("Invalid query attachment.")
            path = item.get("path")
            if item.get("type") not in ATTACHMENT_TYPES or not isinstance(path, str) or not path.strip():
                raise _Invalid("Invalid query attachment payload.")
    request_id = params.get("requestId")
    if not isinstance(request_id, str) or not request_id:
        raise _Invalid("Invalid query requestId.")
    content = params.get("content")
    if not isinstance(content, str) or not content.strip():
        raise _Invalid("Invalid query content.")
    context = params.get("context")
    if not isinstance(context, dict):
        raise _Invalid("Invalid query context.")
    if context.get("type") != "rpc":
        raise _Invalid("Invalid query context type.")
    return request_id, content


def _query(services: Services, conn: Connection, rpc_id: Any, params: Any) -> list[Any]:
    request_id, content = _validated_query(params)
    # the acknowledgement goes before the run can say anything
    services.push(conn.connection_id, _response(rpc_id, {"accepted": True}))
    return _start(services, conn, content, {"kind": "query", "requestId": request_id})


def _start(services: Services, conn: Connection, text: str, ref: dict[str, Any]) -> list[Any]:
    """Send `text` to the main session as a run this socket is subscribed to; what to send at once when no run
    started (a slash command's answer, a refusal)."""
    key = _main_key(services)
    run_id = base.new_run_id()
    sub = base.subscribe(services, conn, run_id, key, {**ref, "startedAt": services.now_ms()})
    sent = base.call(services, conn, "chat.send", {"sessionKey": key, "message": text, "runId": run_id})
    if sent.ok and sent.payload.get("status") == "started":
        return []
    base.unsubscribe(services, sub)
    if sent.ok:  # a slash command or directives only: their answer is the reply
        reply = str(sent.payload.get("response") or sent.payload.get("error") or "")
        return _ended(sub, reply or NO_RESPONSE, None, None)
    return _ended(sub, None, sent.message, None)


# --- gateway.heartbeat / gateway.new_session --------------------------------------------------------------------


def _heartbeat(services: Services, conn: Connection, rpc_id: Any) -> list[Any]:
    config = services.config.effective()
    agent_id = cfg.default_agent_id(config)
    if heartbeat_rules.effective_settings(config, agent_id).every_ms <= 0:
        return [_response(rpc_id, {"ok": False, "message": "Heartbeat task is unavailable or disabled."})]
    run_id = base.new_run_id()
    ref = {"kind": "heartbeat", "id": rpc_id, "startedAt": services.now_ms()}
    sub = base.subscribe(services, conn, run_id, heartbeat_rules.session_key(agent_id), ref)
    started = base.call(services, conn, "heartbeat.trigger", {"agentId": agent_id, "runId": run_id})
    if started.ok and started.payload.get("ok"):
        return []  # answered when the run ends
    base.unsubscribe(services, sub)
    message = started.payload.get("message") if started.ok else started.message
    return [_response(rpc_id, {"ok": False, "message": str(message or "Heartbeat failed")})]


def _new_session(services: Services, conn: Connection, rpc_id: Any) -> list[Any]:
    key = _main_key(services)
    reset = base.call(services, conn, "session.reset", {"sessionKey": key})
    if not reset.ok:
        return [_response(rpc_id, {"ok": False, "message": reset.message})]
    config = services.config.effective()
    prompt = ((config.get("xeno") or {}) if isinstance(config.get("xeno"), dict) else {}).get("newSessionPrompt")
    text = prompt if isinstance(prompt, str) and prompt.strip() else NEW_SESSION_PROMPT
    return _start(services, conn, text, {"kind": "new_session", "id": rpc_id})


# --- the run's events -------------------------------------------------------------------------------------------


TASK_DONE = {"heartbeat": "Heartbeat completed.", "new_session": "New session task completed."}


@router.run_events(XENO)
def encode(services: Services, sub: Subscription, payload: dict[str, Any]) -> list[Any]:
    """What a xeno socket gets for one event of its run: nothing until the run ends (partials are off, as in
    xeno), then its reply or its error."""
    state = payload.get("state")
    if state == "final":
        message = payload.get("message")
        reply = _text(message) if isinstance(message, dict) else ""
        return _ended(
            sub, reply or NO_RESPONSE, None, message if isinstance(message, dict) else {}, now=services.now_ms()
        )
    if state == "error":
        return _ended(sub, None, str(payload.get("error") or "The run failed"), None, now=services.now_ms())
    return []


def _ended(
    sub: Subscription, reply: str | None, error: str | None, message: dict[str, Any] | None, *, now: int | None = None
) -> list[Any]:
    ref = sub.ref
    kind = ref.get("kind")
    started = int(ref.get("startedAt") or 0)
    duration_ms = max(0, (now or started) - started) if started else 0
    if kind in TASK_DONE:
        if error is not None:
            return [_response(ref.get("id"), {"ok": False, "message": error})]
        result = {"ok": True, "message": TASK_DONE[kind], "result": reply or "", "durationMs": duration_ms}
        return [_response(ref.get("id"), result)]
    request_id = ref.get("requestId")
    done = _notification("gateway.done", {"requestId": request_id})
    if error is not None:
        text = ABORTED if error == runs.USER_CANCELLED else error
        return [_notification("gateway.error", {"requestId": request_id, "error": text}), done]
    content = reply or NO_RESPONSE
    if len(content) > FINAL_CHARS:
        content = content[:FINAL_CHARS] + "\n[reply cut here: the whole of it is in the session's history]"
    frames: list[Any] = []
    if message is not None:
        frames.append(_notification("gateway.stats", {"requestId": request_id, "stats": _stats(message, duration_ms)}))
    frames.append(_notification("gateway.stream", {"requestId": request_id, "content": content, "isPartial": False}))
    frames.append(done)
    return frames


def _stats(message: dict[str, Any], duration_ms: int) -> str:
    found = message.get("usage")
    usage: dict[str, Any] = found if isinstance(found, dict) else {}
    parts = [
        "result=success",
        f"input_tokens={int(usage.get('input') or 0)}",
        f"output_tokens={int(usage.get('output') or 0)}",
        f"duration={duration_ms / 1000:.2f}s",
    ]
    if isinstance(message.get("stopReason"), str):
        parts.append(f"stop={message['stopReason']}")
    return " | ".join(parts)
