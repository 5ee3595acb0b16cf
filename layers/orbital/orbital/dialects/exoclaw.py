"""Exoclaw's WebSocket JSON-RPC: token first, then `ping`, `status`, `plugin.list` and `chat.send` with its stream.

- With a gateway token the first frame must be `{"token": "<it>"}`: the hello `{"ok": true, "version": ...}`
  follows; anything else is answered `{"error": "auth_failed", "code": 4001}` and the socket is closed. A loopback
  gateway without a token greets an Exoclaw client unprompted (the local bridge, when a socket says nothing for a
  moment after its upgrade: `hello_on_silence`); clients of the other dialects speak first and never see it.
- Requests `{"id", "method", "params"?}`; the answer's id is always a string; `result` and `error` are never both
  there. Bad JSON or a request without `id`/`method` → `{"id": "0", "error": "parse error: ..."}`, the socket
  stays open.
- `chat.send {channel, account, peer?="main", content, guild?, team?}` runs the agent in the conversation's session
  (`agent:{agentId}:exoclaw:group:{h}`, the agent from `agents.bindings`, most specific match first) and streams
  `text`, `tool_use`, `tool_result`, `usage` and then `done` (no `data`), or `error` then `done`, each frame
  carrying the request's id. A run refused before it starts (a token budget, a spend limit: `spend limit exceeded
  (daily: $4.98/$5.00)`) is one plain error, no stream; one that such a limit stops between model calls ends with
  `error` (the same words) then `done`.
- A run that pauses for a tool approval ends its stream: the prompt as `text`, then `done`. The next `chat.send`
  answers it: `yes` / `no` streams the engine's answer as its first `text` and then follows the run (its tools,
  text and `done`); anything else gets the reminder and `done` (`orbital.dialects.approval_answers`).
"""

from __future__ import annotations

import hmac
import json
from typing import TYPE_CHECKING, Any

from orbital import __version__
from orbital.agent import budgets, events
from orbital.aws import secrets
from orbital.dialects import approval_answers, base
from orbital.dialects.detect import EXOCLAW
from orbital.domain import spend_words
from orbital.domain.budgets import BudgetExceededError
from orbital.domain.messages import text_of
from orbital.domain.session_keys import resolve_agent_by_specificity
from orbital.engines import device_auth, socket_gate
from orbital.protocol.registry import DialectClose, DialectInbound, Router
from orbital.store.connections import Connection

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.store.subscriptions import Subscription

router = Router("exoclaw")

HELLO = {"ok": True, "version": __version__}
AUTH_FAILED = {"error": "auth_failed", "code": 4001}
SESSION_MARK = f":{EXOCLAW}:group:"
"""In the key of every Exoclaw conversation's session (`status.sessions` counts them)."""
CHAT_FIELDS = ("channel", "account", "content")
"""chat.send's required fields, in the order their absence is reported."""
OPTIONAL_CHAT_FIELDS = ("peer", "guild", "team")
MAX_FRAME_BYTES = events.MAX_EVENT_BYTES
"""The largest stream frame (API Gateway refuses a WebSocket message over 128 KB)."""
TRUNCATED = " [truncated: the whole of it is in the session's transcript]"


def hello_on_silence(services: Services, connection_id: str, conn: Connection | None) -> list[Any]:
    """A socket said nothing for a moment after its upgrade: on a gateway without a token (which serves this
    machine alone), greet it the Exoclaw way. It stays undecided: a frame of another dialect still claims it. A
    socket whose upgrade chose another dialect (`?dialect=`) is not greeted."""
    if secrets.token_configured(services.settings):
        return []
    if conn is not None and not (conn.pending and conn.dialect in (None, EXOCLAW)):
        return []
    extra = {**(conn.extra if conn is not None else {}), "pending": True, "greeted": True}
    dialect = conn.dialect if conn is not None else None
    services.connections.save(Connection(connection_id, "client", services.now_ms(), dialect=dialect, extra=extra))
    return [HELLO]


@router.dialect_frame(EXOCLAW)
def receive(services: Services, inbound: DialectInbound) -> list[Any]:
    conn = inbound.conn
    if conn is None or conn.pending or conn.dialect != EXOCLAW:
        return _first(services, inbound)
    return _request(services, conn, inbound.frame, inbound.text)


def _first(services: Services, inbound: DialectInbound) -> list[Any]:
    """The frame that makes a socket an Exoclaw one. On a gateway with a token: the token (anything else, an RPC
    included, is refused and the socket closed), unless the socket presented it as a bearer at its upgrade. On a
    loopback gateway without one: whatever it sends (a token frame before the unprompted hello gets the hello)."""
    frame = inbound.frame
    token = frame.get("token") if isinstance(frame, dict) and "method" not in frame else None
    bearer = inbound.conn is not None and bool(inbound.conn.extra.get("bearer"))
    if secrets.token_configured(services.settings) and (token is not None or not bearer):
        expected = secrets.gateway_token(services.settings) or ""
        device = device_auth.authenticate(services, token) if isinstance(token, str) else None
        if device is not None and device.role in device_auth.CLIENT_ROLES:  # a device token (ADR 0043)
            base.accept(
                services, inbound.conn, inbound.connection_id, EXOCLAW, role=device.role, deviceId=device.token_id
            )
            device_auth.note_socket(services, device, inbound.connection_id)
        elif not isinstance(token, str) or not hmac.compare_digest(token.encode(), expected.encode()):
            return [AUTH_FAILED, DialectClose(4001, "auth_failed")]
        else:
            base.accept(services, inbound.conn, inbound.connection_id, EXOCLAW)
        if not bearer:
            socket_gate.settle(services, inbound.connection_id)
        return [HELLO]
    greeted = inbound.conn is not None and bool(inbound.conn.extra.get("greeted"))
    conn = base.accept(services, inbound.conn, inbound.connection_id, EXOCLAW)
    if token is not None and not greeted:
        return [HELLO]
    return _request(services, conn, frame, inbound.text)


def _answer(rpc_id: str, result: Any) -> dict[str, Any]:
    return {"id": rpc_id, "result": result}


def _failure(rpc_id: str, message: str) -> dict[str, Any]:
    return {"id": rpc_id, "error": message}


def _parse_error(text: str, frame: Any) -> str | None:
    """Why a frame is no request, in serde's manner (as Exoclaw answers), or None."""
    if frame is None:
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            return f"parse error: {exc.msg[:1].lower()}{exc.msg[1:]} at line {exc.lineno} column {exc.colno}"
    if not isinstance(frame, dict):
        return f"parse error: invalid type: {_serde_kind(frame)}, expected struct Request"
    for name in ("id", "method"):
        if name not in frame:
            return f"parse error: missing field `{name}`"
    rpc_id = frame["id"]
    if isinstance(rpc_id, bool) or not isinstance(rpc_id, str | int | float):
        return f"parse error: invalid type: {_serde_kind(rpc_id)}, expected a string or a number"
    if not isinstance(frame["method"], str):
        return f"parse error: invalid type: {_serde_kind(frame['method'])}, expected a string"
    return None


def _request(services: Services, conn: Connection, frame: Any, text: str) -> list[Any]:
    problem = _parse_error(text, frame)
    if problem is not None:
        return [_failure("0", problem)]
    rpc_id = frame["id"] if isinstance(frame["id"], str) else json.dumps(frame["id"])
    method = frame["method"]
    params = frame.get("params")
    if method == "ping":
        return [_answer(rpc_id, "pong")]
    if method == "plugin.list":
        return [_answer(rpc_id, _plugins(services, conn))]
    if method == "status":
        status = {"version": __version__, "plugins": len(_plugins(services, conn)), "sessions": _sessions(services)}
        status["budget"] = budgets.status(services, services.config.effective())  # what is used, day and month
        return [_answer(rpc_id, status)]
    if method == "chat.send":
        return _chat(services, conn, rpc_id, params)
    return [_failure(rpc_id, f"unknown method: {method}")]


def _plugins(services: Services, conn: Connection) -> list[dict[str, str]]:
    listed = base.call(services, conn, "tools.list", {})
    tools = listed.payload.get("tools") if listed.ok else []
    return [{"name": str(t.get("name"))} for t in tools or [] if isinstance(t, dict) and t.get("name")]


def _sessions(services: Services) -> int:
    return sum(1 for entry in services.sessions.list_registry() if SESSION_MARK in str(entry.get("sessionKey")))


def _serde_kind(value: Any) -> str:
    """How serde names an unexpected JSON value ("integer `5`", "map", ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{json.dumps(value)}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value}`"
    if isinstance(value, str):
        return f"string {json.dumps(value)}"
    return "sequence" if isinstance(value, list) else "map"


def _chat_params(params: Any) -> tuple[dict[str, str], str | None]:
    """chat.send's params as Exoclaw reads them (serde's wording for what is wrong: a value of the wrong type first,
    fields in key order; then the first missing required field, in the struct's order); unknown keys are ignored,
    `peer` defaults to "main"."""
    if params is None:
        params = {}
    if not isinstance(params, dict):
        return {}, f"invalid chat.send params: invalid type: {_serde_kind(params)}, expected struct ChatSendParams"
    for name in sorted(set(params) & set(CHAT_FIELDS + OPTIONAL_CHAT_FIELDS)):
        value = params[name]
        if not isinstance(value, str) and (value is not None or name in CHAT_FIELDS):
            return {}, f"invalid chat.send params: invalid type: {_serde_kind(value)}, expected a string"
    for name in CHAT_FIELDS:
        if name not in params:
            return {}, f"invalid chat.send params: missing field `{name}`"
    values = {name: params[name] for name in CHAT_FIELDS + OPTIONAL_CHAT_FIELDS if params.get(name) is not None}
    if not values["content"].strip():
        return {}, "invalid chat.send params: content must not be empty"
    values.setdefault("peer", "main")
    return values, None


def _chat(services: Services, conn: Connection, rpc_id: str, params: Any) -> list[Any]:
    values, problem = _chat_params(params)
    if problem is not None:
        return [_failure(rpc_id, problem)]
    channel, account, peer = values["channel"], values["account"], values["peer"]
    config = services.config.effective()
    agent = resolve_agent_by_specificity(
        config,
        channel=channel,
        account_id=account,
        peer_id=peer,
        guild_id=values.get("guild"),
        team_id=values.get("team"),
    )
    key = base.conversation_key(agent, EXOCLAW, channel, account, peer)
    run_id = base.new_run_id()
    answer = approval_answers.begin(services, conn, key, {"id": rpc_id})  # the conversation may wait for an approval
    sub = base.subscribe(services, conn, run_id, key, {"id": rpc_id})
    params = {"sessionKey": key, "message": values["content"], "runId": run_id}
    label = f"{EXOCLAW}:{channel}:{account}:{peer}"
    sent = base.call(services, conn, "chat.send", params, internal={"label": label})
    if sent.ok and sent.payload.get("status") == "started":
        approval_answers.settle(services, answer, follow=False)
        return []  # the stream comes from the run
    base.unsubscribe(services, sub)
    if sent.ok and sent.payload.get("status") == "paused":  # the message answered a tool approval (or was reminded)
        return _answered(services, conn, rpc_id, answer, sent.payload)
    approval_answers.settle(services, answer, follow=False)
    if not sent.ok:  # a token budget or a spend limit refused it: Exoclaw's own words, and no stream
        refused = BudgetExceededError.from_details(sent.details) or spend_words.refusal_in(sent.message)
        return [_failure(rpc_id, refused.exoclaw_message if refused is not None else sent.message)]
    reply = str(sent.payload.get("response") or sent.payload.get("error") or "")
    return [{"id": rpc_id, "event": "text", "data": reply}, {"id": rpc_id, "event": "done"}]


def _answered(
    services: Services,
    conn: Connection,
    rpc_id: str,
    answer: approval_answers.Answer | None,
    result: dict[str, Any],
) -> list[Any]:
    """A chat.send that answered a paused run: the engine's response is the stream's first text; when the run goes
    on, the stream follows it (its text, tools and `done` come from the run), else it is done."""
    response = str(result.get("response") or "")
    if answer is None or not approval_answers.resumed(result):
        approval_answers.settle(services, answer, follow=False)
        return [{"id": rpc_id, "event": "text", "data": response}, {"id": rpc_id, "event": "done"}]
    services.push(conn.connection_id, {"id": rpc_id, "event": "text", "data": response + "\n\n"})
    frames: list[Any] = []
    for payload in approval_answers.settle(services, answer, follow=True):
        frames += encode(services, answer.sub, payload)
    return frames


def _spend_stop(message: dict[str, Any] | None) -> spend_words.SpendRefusal | None:
    """The spend limit behind a run's ending note (a note of the gateway's own, not a model's text), else None."""
    if not isinstance(message, dict) or message.get("provider") != "orbital":
        return None
    return spend_words.refusal_in(text_of(message))


def _size(frame: dict[str, Any]) -> int:
    return len(json.dumps(frame, separators=(",", ":"), ensure_ascii=False).encode())


def _fitted(frame: dict[str, Any], name: str) -> dict[str, Any]:
    """A frame whose `data[name]` (a tool call's input, a tool's result) would make it larger than one WebSocket
    message may be on API Gateway, with that value cut (as text, marked) until it fits. The whole of it stays in the
    session's transcript."""
    if _size(frame) <= MAX_FRAME_BYTES:
        return frame
    data = frame["data"]
    value = data[name]
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    keep = len(text)
    fitted = frame
    while keep > 256 and (fitted is frame or _size(fitted) > MAX_FRAME_BYTES):
        keep = min(keep // 2, MAX_FRAME_BYTES // 2)
        fitted = {**frame, "data": {**data, name: f"{text[:keep]}{TRUNCATED}"}}
    return fitted


@router.run_events(EXOCLAW)
def encode(services: Services, sub: Subscription, payload: dict[str, Any]) -> list[Any]:
    """Exoclaw's stream frames for one event of a run."""
    if sub.scratch.get("closed") or approval_answers.held(sub, payload):
        return []
    rpc_id = str(sub.ref.get("id") or "0")
    state = payload.get("state")
    if state == "paused":  # the prompt ends this stream; the next chat.send answers it
        approval_answers.end_turn(services, sub)
        return [
            {"id": rpc_id, "event": "text", "data": approval_answers.prompt_of(payload)},
            {"id": rpc_id, "event": "done"},
        ]
    if state == "delta":
        return [{"id": rpc_id, "event": "text", "data": str(payload.get("text") or "")}]
    if state == "tool":
        return [
            _fitted(
                {
                    "id": rpc_id,
                    "event": "tool_use",
                    "data": {"id": call.get("id"), "name": call.get("name"), "input": call.get("arguments")},
                },
                "input",
            )
            for call in payload.get("tools") or []
            if isinstance(call, dict)
        ]
    if state == "toolResult":
        data = {
            "tool_use_id": payload.get("toolCallId"),
            "content": str(payload.get("content") or ""),
            "is_error": bool(payload.get("isError")),
        }
        return [_fitted({"id": rpc_id, "event": "tool_result", "data": data}, "content")]
    if state == "usage":
        found = payload.get("usage")
        usage: dict[str, Any] = found if isinstance(found, dict) else {}
        data = {"input_tokens": int(usage.get("input") or 0), "output_tokens": int(usage.get("output") or 0)}
        return [{"id": rpc_id, "event": "usage", "data": data}]
    if state == "final":
        message = payload.get("message") if isinstance(payload.get("message"), dict) else None
        stopped = budgets.exceeded_of(message) or _spend_stop(message)
        if stopped is not None:  # a budget ended the run between model calls: an error, as Exoclaw's loop says it
            return [{"id": rpc_id, "event": "error", "data": stopped.exoclaw_message}, {"id": rpc_id, "event": "done"}]
        return [{"id": rpc_id, "event": "done"}]
    if state == "error":
        message = str(payload.get("error") or "The run failed")
        if payload.get("cause") == events.PROVIDER_FAILED:
            message = f"provider error: {message}"
        return [{"id": rpc_id, "event": "error", "data": message}, {"id": rpc_id, "event": "done"}]
    return []
