"""xeno's gateway JSON-RPC 2.0 (one message per line on its Unix socket, one per text frame over `/ws`).

Methods: `gateway.initialize` (the main session's id and its user/assistant text turns), `gateway.query` (a message
to the agent's main session: `{accepted: true}` at once, then `gateway.stats` → one final `gateway.stream` →
`gateway.done` for that `requestId`, or `gateway.error` → `gateway.done`), `gateway.abort` (`/stop` of the main
session's run), `gateway.heartbeat` and `gateway.new_session` (answered when the run they start has ended: the answer
is posted later with the request's id, nothing waits). Every handler error is code -32000 with xeno's exact message;
invalid JSON, `jsonrpc` other than "2.0", batches and client notifications get no reply. Ids are echoed with their
JSON type. The socket must have authenticated at its upgrade (a bearer, or the loopback rule of a gateway without
a token); the local Unix socket is its owner's (file permissions, and the peer's user checked at accept).

A query's `attachments` are files on the client's machine. A local gateway reads one (a regular file, at most the
channels' media limit) only for a client on its Unix socket, whose peer is the gateway's own user (checked at accept,
`orbital.local.xeno_socket`), and never a file in the gateway's data directory (the path resolved, symlinks too); it
is then the run's media, stored with the type its bytes show (an "image" whose bytes are no PNG, JPEG, GIF or WebP is
kept as a document, never served as an image). Over `/ws`, on any gateway, a path is refused: the query ends with
`gateway.error` saying to upload the file, as `orbital xeno-bridge` does. A path `artifact:{id}` names a file
uploaded to `POST /api/artifacts/` first: the stored artifact is the run's media, on any gateway.
With `xeno.partials: true` in the configuration a query also gets the reply's text so far as `gateway.stream
{isPartial: true}`, at most every half second (off by default, as in xeno).

A run that pauses for a tool approval ends its query: the prompt is its final `gateway.stream`, then `gateway.done`
(xeno's console takes no input while a query runs). The next query answers it: `yes` / `no` is shown the engine's
answer (`Approved …` / `Denied …`, a final stream) and then follows the run to its own stats, final stream and
`done`; anything else gets the reminder and its `done` (`orbital.dialects.approval_answers`).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orbital.agent import runs
from orbital.aws import secrets
from orbital.channels import media as media_store
from orbital.dialects import approval_answers, base
from orbital.dialects.detect import XENO
from orbital.domain import compaction, sniff
from orbital.domain import config as cfg
from orbital.domain import heartbeat as heartbeat_rules
from orbital.domain.messages import text_of
from orbital.domain.session_keys import resolve_agent_main_session_key
from orbital.protocol.registry import DialectClose, DialectInbound, Router
from orbital.store import artifacts, keys

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.store.connections import Connection
    from orbital.store.subscriptions import Subscription

log = logging.getLogger("orbital.dialects.xeno")

router = Router("xeno")

ERROR_CODE = -32000
MEDIA_TYPES = {
    "image": "image",
    "sticker": "image",
    "audio": "audio",
    "voice": "audio",
    "document": "document",
    "video": "video",
    "animation": "video",
}
"""xeno's attachment types and the kind of run media each one is (what channels hand in)."""
ATTACHMENT_TYPES = frozenset(MEDIA_TYPES)
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


class _InvalidMessageError(Exception):
    """A request's params failed xeno's validation (the message is xeno's, exactly)."""


@router.dialect_frame(XENO)
def receive(services: Services, inbound: DialectInbound) -> list[Any]:
    """One frame: one message, or several lines of messages (a trailing newline is tolerated)."""
    conn = inbound.conn
    if conn is None or conn.pending or conn.dialect != XENO:
        if secrets.token_configured(services.settings) and not (conn is not None and conn.extra.get("bearer")):
            return [_error(_id_of(inbound.frame), "Unauthorized"), DialectClose(4001, "Unauthorized")]
        conn = base.accept(services, conn, inbound.connection_id, XENO)
    if inbound.frame is not None:
        return _message(services, conn, inbound.frame)
    frames: list[Any] = []
    for line in inbound.text.split("\n"):
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError:
            log.debug("xeno: a line that is not JSON, ignored")
            continue
        for frame in frames:  # what the earlier lines answered goes before anything the next one sends
            services.push(conn.connection_id, frame)
        frames = _message(services, conn, message)
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
                raise _InvalidMessageError("Invalid abort params.")
            # the answer goes before the stopped query's `gateway.error` and `gateway.done`
            services.push(conn.connection_id, _response(rpc_id, {"ok": True}))
            base.call(services, conn, "chat.send", {"sessionKey": _main_key(services), "message": "/stop"})
            return []
        if method == "gateway.heartbeat":
            _task_params(params, "Invalid heartbeat params.")
            return _heartbeat(services, conn, rpc_id)
        if method == "gateway.new_session":
            _task_params(params, "Invalid new_session params.")
            return _new_session(services, conn, rpc_id)
    except _InvalidMessageError as exc:
        return [_error(rpc_id, str(exc))]
    return [_error(rpc_id, f"Method not found: {method}")]


def _task_params(params: Any, message: str) -> None:
    if params is not None and not isinstance(params, dict):
        raise _InvalidMessageError(message)


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
        text = text_of(message)
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


# --- gateway.query ----------------------------------------------------------------------------------------------


def _validated_query(params: Any) -> tuple[str, str]:
    """xeno's checks, in xeno's order: the params, then the attachments, the request id, the content, the
    context and its type."""
    if not isinstance(params, dict):
        raise _InvalidMessageError("Invalid query params.")
    if "attachments" in params and params["attachments"] is not None:
        attachments = params["attachments"]
        if not isinstance(attachments, list):
            raise _InvalidMessageError("Invalid query attachments payload.")
        for item in attachments:
            if not isinstance(item, dict):
                raise _InvalidMessageError("Invalid query attachment.")
            kind, path = item.get("type"), item.get("path")
            if (
                not isinstance(kind, str)
                or kind not in ATTACHMENT_TYPES
                or not isinstance(path, str)
                or not path.strip()
            ):
                raise _InvalidMessageError("Invalid query attachment payload.")
    request_id = params.get("requestId")
    if not isinstance(request_id, str) or not request_id:
        raise _InvalidMessageError("Invalid query requestId.")
    content = params.get("content")
    if not isinstance(content, str) or not content.strip():
        raise _InvalidMessageError("Invalid query content.")
    context = params.get("context")
    if not isinstance(context, dict):
        raise _InvalidMessageError("Invalid query context.")
    if context.get("type") != "rpc":
        raise _InvalidMessageError("Invalid query context type.")
    return request_id, content


def _query(services: Services, conn: Connection, rpc_id: Any, params: Any) -> list[Any]:
    request_id, content = _validated_query(params)
    # the acknowledgement goes before the run can say anything
    services.push(conn.connection_id, _response(rpc_id, {"accepted": True}))
    ref = {"kind": "query", "requestId": request_id}
    try:
        media = _media(services, conn, params.get("attachments") or [])
    except _UnreadableError as exc:
        return [
            _notification("gateway.error", {"requestId": request_id, "error": str(exc)}),
            _notification("gateway.done", {"requestId": request_id}),
        ]
    return _start(services, conn, content, ref, media=media)


def _start(
    services: Services, conn: Connection, text: str, ref: dict[str, Any], *, media: list[dict[str, Any]] | None = None
) -> list[Any]:
    """Send `text` (and `media`) to the main session as a run this socket is subscribed to; what to send at once
    when no run started (a slash command's answer, a refusal)."""
    key = _main_key(services)
    run_id = base.new_run_id()
    turn = {**ref, "startedAt": services.now_ms()}
    answer = approval_answers.begin(services, conn, key, turn)  # the main session may wait for an approval
    sub = base.subscribe(services, conn, run_id, key, turn)
    sent = base.call(
        services,
        conn,
        "chat.send",
        {"sessionKey": key, "message": text, "runId": run_id},
        internal={"media": media} if media else None,
    )
    if sent.ok and sent.payload.get("status") == "started":
        approval_answers.settle(services, answer, follow=False)
        return []
    base.unsubscribe(services, sub)
    if sent.ok and sent.payload.get("status") == "paused":  # the message answered a tool approval (or was reminded)
        return _answered(services, conn, answer, sub, sent.payload)
    approval_answers.settle(services, answer, follow=False)
    if sent.ok:  # a slash command or directives only: their answer is the reply
        reply = str(sent.payload.get("response") or sent.payload.get("error") or "")
        return _ended(sub, reply or NO_RESPONSE, None, None)
    return _ended(sub, None, sent.message, None)


def _answered(
    services: Services,
    conn: Connection,
    answer: approval_answers.Answer | None,
    sub: Subscription,
    result: dict[str, Any],
) -> list[Any]:
    """A query that answered a paused run: the engine's response is shown (a final stream); when the run goes on,
    the query follows it (its final text and `done` come from the run), else it is done."""
    response = str(result.get("response") or "")
    follow = answer is not None and approval_answers.resumed(result)
    if not follow:
        approval_answers.settle(services, answer, follow=False)
        return _ended(sub, response or NO_RESPONSE, None, None)
    assert answer is not None
    params = {"requestId": sub.ref.get("requestId"), "content": response, "isPartial": False}
    services.push(conn.connection_id, _notification("gateway.stream", params))
    frames: list[Any] = []
    for payload in approval_answers.settle(services, answer, follow=True):
        frames += encode(services, answer.sub, payload)
    return frames


class _UnreadableError(Exception):
    """An attachment's file could not be read (the message says which and why)."""


def _media(services: Services, conn: Connection, attachments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A query's attachments as a run's media (the entries `chat.send` stores as a channel's are): an uploaded
    artifact as it is; a file named by its path read only for a client of the local gateway's Unix socket (see the
    module docstring), its bytes then stored in the session's media like a channel's attachment. Raises
    `_UnreadableError` for a path that is refused or a file that cannot be read."""
    if not attachments:
        return []
    # the Unix socket, its peer the gateway's user
    local = services.capabilities.own_machine and bool(conn.extra.get("local"))
    return [_attachment(services, item, local) for item in attachments]


NOT_HERE = (
    "Cannot read attachment {path}: this gateway reads a file named by its path only for a client on its own Unix "
    "socket; upload the file first (POST /api/artifacts/) and attach it as artifact:{{id}}, as orbital xeno-bridge does"
)
IN_DATA_DIR = "Cannot read attachment {path}: it is in the gateway's data directory"


def _attachment(services: Services, item: dict[str, Any], local: bool) -> dict[str, Any]:
    path = str(item["path"])
    kind = MEDIA_TYPES[item["type"]]
    given_name = item.get("fileName")
    name = given_name if isinstance(given_name, str) and given_name.strip() else Path(path).name or path
    given_mime = item.get("mimeType")
    mime = given_mime.strip() if isinstance(given_mime, str) and given_mime.strip() else None
    entry: dict[str, Any] = {"type": kind, "filename": name}
    if path.startswith(artifacts.REFERENCE):
        return _uploaded(services, entry, path[len(artifacts.REFERENCE) :], mime)
    if not local:
        raise _UnreadableError(NOT_HERE.format(path=path))
    if kind == "video":  # never shown to a model (the stored message keeps only the fact)
        entry["mimeType"] = mime or _mime_of(name, b"")
        return entry
    body, size = _read(path, services.settings.data_dir)
    entry["size"] = size
    if body is None:
        entry["mimeType"] = mime or _mime_of(name, b"")
        entry["error"] = media_store.too_large_error(size)
        return entry
    entry["type"], entry["mimeType"] = sniff.stored_kind(kind, body[:64], mime, name)
    entry["data"] = base64.b64encode(body).decode("ascii")
    return entry


def _uploaded(services: Services, entry: dict[str, Any], artifact_id: str, mime: str | None) -> dict[str, Any]:
    """An attachment the client uploaded first (`artifact:{id}`, what `orbital xeno-bridge` sends): the stored
    artifact is the run's media as it is, without a copy. xeno sockets hold the gateway's own credential, which
    reads every artifact."""
    found = artifacts.head(services.workspace, artifact_id)
    if found is None:
        raise _UnreadableError(f"Cannot read attachment {artifacts.REFERENCE}{artifact_id}: no such artifact")
    entry["mimeType"] = mime or found.content_type
    entry["size"] = found.size_bytes
    if found.filename and entry["filename"] == f"{artifacts.REFERENCE}{artifact_id}":
        entry["filename"] = found.filename
    if entry["type"] != "video":  # never shown to a model (the stored message keeps only the fact)
        entry["r2Key"] = keys.media_object(artifact_id)
    return entry


def _read(text: str, data_dir: str | None) -> tuple[bytes | None, int]:
    """The bytes of the regular file at `text` and its size (None for the bytes of a file over the media limit,
    which is not read). A path that resolves into `data_dir` is refused. Raises `_UnreadableError`."""
    path = Path(text)
    if not path.is_absolute():
        raise _UnreadableError(f"Cannot read attachment {text}: the path is not absolute")
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise _UnreadableError(
            f"Cannot read attachment {text}: {getattr(exc, 'strerror', None) or 'not found'}"
        ) from None
    if data_dir and _inside(resolved, Path(data_dir)):
        raise _UnreadableError(IN_DATA_DIR.format(path=text))
    try:
        # the resolved path, its last part not a link (one swapped in since): a FIFO must not block either
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(resolved, flags)
    except OSError as exc:
        raise _UnreadableError(f"Cannot read attachment {text}: {exc.strerror or type(exc).__name__}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _UnreadableError(f"Cannot read attachment {text}: not a regular file")
        if info.st_size > media_store.MAX_MEDIA_BYTES:
            return None, info.st_size
        chunks: list[bytes] = []
        size = 0
        while size <= media_store.MAX_MEDIA_BYTES:
            chunk = os.read(fd, min(1 << 20, media_store.MAX_MEDIA_BYTES + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise _UnreadableError(f"Cannot read attachment {text}: {exc.strerror or type(exc).__name__}") from None
    finally:
        os.close(fd)
    if size > media_store.MAX_MEDIA_BYTES:  # it grew while being read
        return None, size
    return b"".join(chunks), size


def _inside(path: Path, directory: Path) -> bool:
    """Whether the resolved `path` is `directory` (resolved too) or under it."""
    try:
        root = directory.resolve()
    except (OSError, RuntimeError):
        root = directory
    return path == root or root in path.parents


def _mime_of(name: str, body: bytes) -> str:
    return sniff.guess_mime(body[:64], name) or "application/octet-stream"


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
    """What a xeno socket gets for one event of its run: its reply or its error when the run ends; before that
    nothing, as in xeno, unless `xeno.partials` is true in the configuration: then the reply's text so far as a
    `gateway.stream {isPartial: true}`, at most every `PARTIAL_INTERVAL_S`."""
    if sub.scratch.get("closed") or approval_answers.held(sub, payload):
        return []
    state = payload.get("state")
    if state == "paused":  # the prompt is the query's reply: it ends, and the next query can answer it
        approval_answers.end_turn(services, sub)
        return _ended(sub, approval_answers.prompt_of(payload) or NO_RESPONSE, None, None, now=services.now_ms())
    if state == "delta":
        text = payload.get("text")
        if sub.ref.get("kind") != "query" or not isinstance(text, str) or not _partials_on(services, sub):
            return []
        return _partial(sub, text, time.monotonic())
    if state in NEW_MESSAGE:
        _restart_partials(sub)
        return []
    if state == "final":
        message = payload.get("message")
        reply = text_of(message) if isinstance(message, dict) else ""
        return _ended(
            sub, reply or NO_RESPONSE, None, message if isinstance(message, dict) else {}, now=services.now_ms()
        )
    if state == "error":
        return _ended(sub, None, str(payload.get("error") or "The run failed"), None, now=services.now_ms())
    return []


NEW_MESSAGE = frozenset({"partial", "tool", "usage"})
"""Events after which the model's next text is a new message (its partials start again from nothing)."""
PARTIAL_INTERVAL_S = 0.5


def _partials_on(services: Services, sub: Subscription) -> bool:
    """`xeno.partials` (read once per step of the run)."""
    on = sub.scratch.get("partials")
    if on is None:
        section = services.config.effective().get("xeno")
        on = isinstance(section, dict) and section.get("partials") is True
        sub.scratch["partials"] = on
    return bool(on)


def _partial(sub: Subscription, text: str, now: float) -> list[Any]:
    """A delta of the reply: the text so far (xeno's `content` is cumulative: its console replaces what it shows),
    unless one was sent less than `PARTIAL_INTERVAL_S` ago (the final stream carries whatever came since).

    The text so far lives in the subscription's scratch, in memory for the step whose model call streams it (the
    deltas of one model call reach the same audience, hence the same subscription); a run's next step streams a
    new message, which starts from nothing, as the final reply is the last message's text."""
    scratch = sub.scratch
    so_far = str(scratch.get("text") or "") + text
    scratch["text"] = so_far
    last = scratch.get("sentAt")
    if isinstance(last, float) and now - last < PARTIAL_INTERVAL_S:
        return []
    scratch["sentAt"] = now
    content = so_far if len(so_far) <= FINAL_CHARS else so_far[:FINAL_CHARS]
    params = {"requestId": sub.ref.get("requestId"), "content": content, "isPartial": True}
    return [_notification("gateway.stream", params)]


def _restart_partials(sub: Subscription) -> None:
    sub.scratch.pop("text", None)
    sub.scratch.pop("sentAt", None)


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
