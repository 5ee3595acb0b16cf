"""A scripted fake LLM server on loopback, speaking four wire formats over real HTTP:

- OpenAI Chat Completions      POST {base}/v1/chat/completions          (SSE when "stream": true, else JSON)
- Anthropic Messages           POST {base}/v1/messages                  (SSE when "stream": true, else JSON)
- Gemini                       POST {base}/v1beta/models/{m}:streamGenerateContent?alt=sse  and  :generateContent
- Bedrock Converse             POST {base}/model/{id}/converse-stream   (AWS binary event stream)  and  /converse
- OpenAI audio transcription   POST {base}/v1/audio/transcriptions      (multipart in, `{"text": ...}` out)

Point the SDKs at it: OpenAI base URL `{base}/v1`; Anthropic, Gemini and Bedrock base URL `{base}`.

A test scripts one item per incoming request, whatever its wire format, in order:

    with FakeLLM() as llm:
        llm.script(
            reply("Hello", chunks=3),
            reply(tool_calls=[call("laptop__Bash", {"command": "ls"})]),
            error(503, retry_after=0),
            reply("slow", chunks=10, delay_per_chunk=0.2),
            hang(),
        )
        ... point a client at llm.base_url ...
        assert llm.requests[0].body["messages"] ...

Items:
- `reply(text, tool_calls=[call(...)], thinking=..., signature=..., redacted=..., usage={...}, stop=...,
  chunks=N, delay_per_chunk=s, end=..., hold_after=k)`: text (and thinking) in N chunks with an optional delay
  between them (`hold_after=k`: a stall after the k-th chunk until `release()` or the client leaves);
  tool calls with arguments split over several deltas; `end="drop"` closes the connection after the chunks,
  `end="hang"` stalls there, `end="error"` fails inside the stream the way the wire does (Anthropic error event,
  OpenAI/Gemini error chunk, Bedrock exception message);
- `error(status, message, code=..., retry_after=..., headers=..., body=...)`: an HTTP error in the wire's own
  error shape (Bedrock: x-amzn-ErrorType), with Retry-After when asked;
- `hang(max_s, then=None)`: no answer until `release()`, the client disconnects, or `max_s`; then `then` is
  served or the connection closed.

A transcription request (wire "transcription") takes the same items: a `reply(text)` answers `{"text": text}`, an
`error(...)` is sent in OpenAI's error shape. Its recorded `body` holds the multipart fields, the file as
`{"filename", "contentType", "size", "data"}`.

A `responder(request)` callable sees each request first and may return an item (None falls back to the script).
Unscripted requests get a 500 "fake LLM: no scripted reply". A streamed reply watches its client between chunks: a
request records `frames_total`, `frames_sent` and `disconnected` (the client closed the connection before the
last frame), and `ended` is set once its answer is over. `requests` records every request (method, path,
headers including secrets, parsed JSON body, wire, model, stream). `reset()` clears script, log and responder and
releases hangs; `release()` lets every request that already came in go on. Only 127.0.0.1 is used.
"""

from __future__ import annotations

import base64
import contextlib
import json
import select
import socket
import struct
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

NO_SCRIPT = "fake LLM: no scripted reply"
DEFAULT_USAGE = {"input": 12, "output": 7, "cacheRead": 0, "cacheWrite": 0}


# --- script items ------------------------------------------------------------------------------------------------


@dataclass
class Call:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str | None = None
    signature: str | None = None  # Gemini thoughtSignature on the functionCall part (base64)
    raw: str | None = None  # argument text sent instead of the JSON of `arguments` (e.g. invalid JSON)

    def argument_text(self) -> str:
        return self.raw if self.raw is not None else json.dumps(self.arguments)


@dataclass
class Reply:
    text: str | None = None
    tool_calls: list[Call] = field(default_factory=list)
    thinking: str | None = None
    signature: str | None = None
    redacted: str | None = None
    usage: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_USAGE))
    stop: str | None = None  # "stop" | "length" | "toolUse" | None (toolUse if there are tool calls, else stop)
    chunks: int = 3
    delay_per_chunk: float = 0.0
    end: str = "normal"  # "normal" | "drop" (close mid-stream) | "hang" (stall) | "error" (in-stream error event)
    hold_after: int | None = None  # streamed: stall after this many chunks until release() or the client leaves


@dataclass
class ErrorReply:
    status: int
    message: str | None = None
    code: str | None = None
    retry_after: float | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None  # sent verbatim (JSON-encoded unless bytes/str) instead of the wire's error shape


@dataclass
class Hang:
    max_s: float = 30.0
    then: Reply | ErrorReply | None = None


Item = Reply | ErrorReply | Hang


def call(
    name: str,
    arguments: dict[str, Any] | None = None,
    id: str | None = None,
    signature: str | None = None,
    raw: str | None = None,
) -> Call:
    return Call(name, dict(arguments or {}), id, signature, raw)


def reply(
    text: str | None = None,
    *,
    tool_calls: list[Call] | tuple[Call, ...] = (),
    thinking: str | None = None,
    signature: str | None = None,
    redacted: str | None = None,
    usage: dict[str, int] | None = None,
    stop: str | None = None,
    chunks: int = 3,
    delay_per_chunk: float = 0.0,
    end: str = "normal",
    hold_after: int | None = None,
) -> Reply:
    """A model answer. `thinking` gets `signature` (default "c2lnLWZha2U=", base64 so every wire takes it)."""
    if thinking is not None and signature is None:
        signature = "c2lnLWZha2U="
    merged = dict(DEFAULT_USAGE)
    merged.update(usage or {})
    return Reply(
        text, list(tool_calls), thinking, signature, redacted, merged, stop, chunks, delay_per_chunk, end, hold_after
    )


def error(
    status: int,
    message: str | None = None,
    *,
    code: str | None = None,
    retry_after: float | None = None,
    headers: dict[str, str] | None = None,
    body: Any = None,
) -> ErrorReply:
    return ErrorReply(status, message, code, retry_after, dict(headers or {}), body)


def hang(max_s: float = 30.0, then: Reply | ErrorReply | None = None) -> Hang:
    return Hang(max_s, then)


# --- recorded requests -------------------------------------------------------------------------------------------


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    raw: bytes
    wire: str | None  # "openai" | "anthropic" | "google" | "bedrock" | None
    model: str | None
    stream: bool
    frames_total: int = 0
    """A streamed reply: how many frames it was scripted to send (set when its stream starts)."""
    frames_sent: int = 0
    disconnected: bool = False
    """The client closed the connection while the streamed reply still had frames to send."""
    ended: threading.Event = field(default_factory=threading.Event, repr=False)
    """Set when the answer is over (all sent, or the client went away)."""

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


def _wire(path: str) -> tuple[str | None, str | None, bool | None]:
    """(wire, model from the path, streaming from the path) for a POST path."""
    if path.endswith("/audio/transcriptions"):
        return "transcription", None, False
    if path.endswith("/chat/completions"):
        return "openai", None, None
    if path.endswith("/messages"):
        return "anthropic", None, None
    if "/models/" in path and ":" in path.rsplit("/", 1)[-1]:
        model, _, action = path.rsplit("/models/", 1)[-1].rpartition(":")
        return "google", model, action == "streamGenerateContent"
    if path.startswith("/model/") and (path.endswith("/converse-stream") or path.endswith("/converse")):
        model = unquote(path[len("/model/") :].rsplit("/", 1)[0])
        return "bedrock", model, path.endswith("/converse-stream")
    return None, None, None


def _form_fields(content_type: str, raw: bytes) -> dict[str, Any] | None:
    """The fields of a multipart/form-data body; file parts as `{filename, contentType, size, data}`."""
    from email.parser import BytesParser
    from email.policy import HTTP

    if not content_type.lower().startswith("multipart/form-data"):
        return None
    message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
    if not message.is_multipart():
        return None
    fields: dict[str, Any] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            continue
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        filename = part.get_filename()
        if filename is None:
            fields[name] = data.decode("utf-8", "replace")
        else:
            fields[name] = {
                "filename": filename,
                "contentType": part.get_content_type(),
                "size": len(data),
                "data": data,
            }
    return fields


# --- the server --------------------------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that drops a kept-alive connection is not an error of the script (no traceback on stderr)."""
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeLLM:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._script: deque[Item] = deque()
        self._requests: list[Request] = []
        self._release = threading.Condition()
        self._generation = 0
        self._stopping = threading.Event()
        self.responder: Callable[[Request], Item | None] | None = None
        self.disconnects = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle
    def start(self) -> FakeLLM:
        handler = _make_handler(self)
        server = _Server(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        server.block_on_close = False
        self._server = server
        self._stopping.clear()
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self.release()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "not started"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # scripting
    def script(self, *items: Item) -> FakeLLM:
        with self._lock:
            self._script.extend(items)
        return self

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self._requests.clear()
            self.responder = None
            self.disconnects = 0
        self.release()

    def release(self) -> None:
        """Let every reply to a request that has already come in go on (now, or when it reaches its hang)."""
        with self._release:
            self._generation += 1
            self._release.notify_all()

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._script)

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> list[Request]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.requests) >= count:
                return self.requests
            time.sleep(0.01)
        raise AssertionError(f"fake LLM: expected {count} requests, got {len(self.requests)}")

    # internals used by the handler
    def _record(self, request: Request) -> None:
        with self._lock:
            self._requests.append(request)

    def _next(self, request: Request) -> Item | None:
        responder = self.responder
        if responder is not None:
            item = responder(request)
            if item is not None:
                return item
        with self._lock:
            return self._script.popleft() if self._script else None

    def _generation_now(self) -> int:
        with self._release:
            return self._generation

    def _wait(self, seconds: float, start: int, sock: socket.socket | None = None) -> str:
        """Wait up to `seconds`; "released" (release() or stop() since generation `start`, i.e. since the request
        came in), "disconnected" (the client went away), or "timeout"."""
        deadline = time.monotonic() + seconds
        while True:
            if self._stopping.is_set():
                return "released"
            if sock is not None and _gone(sock):
                with self._lock:
                    self.disconnects += 1
                return "disconnected"
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            with self._release:
                if self._generation != start:
                    return "released"
                self._release.wait(min(left, 0.02))

    def _wait_or_gone(self, seconds: float, sock: socket.socket) -> bool:
        """A delay between chunks of a stream that watches the client: True as soon as it has closed the
        connection (counted in `disconnects`), False after `seconds` or when the server stops."""
        deadline = time.monotonic() + seconds
        while not self._stopping.is_set():
            if _gone(sock):
                with self._lock:
                    self.disconnects += 1
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._stopping.wait(min(left, 0.01))
        return False


def _gone(sock: socket.socket) -> bool:
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


# --- rendering helpers -------------------------------------------------------------------------------------------


def _pieces(text: str, n: int) -> list[str]:
    if not text:
        return []
    n = max(1, min(n, len(text)))
    size, extra = divmod(len(text), n)
    out, pos = [], 0
    for i in range(n):
        step = size + (1 if i < extra else 0)
        out.append(text[pos : pos + step])
        pos += step
    return out


def _stop(item: Reply) -> str:
    return item.stop or ("toolUse" if item.tool_calls else "stop")


def _call_id(prefix: str, index: int, given: str | None) -> str:
    return given or f"{prefix}{index}_{int(time.time() * 1000) % 100000}"


_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_BEDROCK_ERRORS = {
    400: "ValidationException",
    401: "UnrecognizedClientException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}


def _error_body(wire: str | None, item: ErrorReply) -> tuple[Any, dict[str, str]]:
    message = item.message or f"fake LLM error {item.status}"
    headers: dict[str, str] = {}
    if wire == "anthropic":
        kind = item.code or _ANTHROPIC_ERRORS.get(item.status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}, headers
    if wire == "google":
        status = item.code or _GOOGLE_STATUS.get(item.status, "UNKNOWN")
        return {"error": {"code": item.status, "message": message, "status": status}}, headers
    if wire == "bedrock":
        code = item.code or _BEDROCK_ERRORS.get(item.status, "InternalServerException")
        headers["x-amzn-ErrorType"] = f"{code}:http://internal.amazon.com/coral/com.amazon.bedrock/"
        return {"message": message}, headers
    kind = "invalid_request_error" if item.status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": item.code}}, headers


def _event_stream_message(event_type: str, payload: dict[str, Any], message_type: str = "event") -> bytes:
    """One message of the AWS binary event-stream encoding (prelude + CRC, string headers, payload, CRC)."""
    kind_header = ":event-type" if message_type == "event" else ":exception-type"
    headers = [(kind_header, event_type), (":content-type", "application/json"), (":message-type", message_type)]
    encoded = b""
    for name, value in headers:
        raw_name, raw_value = name.encode(), value.encode()
        encoded += bytes([len(raw_name)]) + raw_name + b"\x07" + struct.pack(">H", len(raw_value)) + raw_value
    body = json.dumps(payload).encode()
    total = 12 + len(encoded) + len(body) + 4
    prelude = struct.pack(">II", total, len(encoded))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + encoded + body
    return message + struct.pack(">I", zlib.crc32(message))


# --- the four wire formats: a stream is a list of raw frames (bytes) with pauses between the text chunks ----------

_PAUSE = object()  # marker in a frame list: wait delay_per_chunk here


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def _openai_stream(item: Reply, request: Request) -> list[Any]:
    model = request.body.get("model") if isinstance(request.body, dict) else "fake"
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    frames: list[Any] = [chunk({"role": "assistant", "content": ""})]
    for piece in _pieces(item.thinking or "", item.chunks):
        frames += [chunk({"reasoning_content": piece}), _PAUSE]
    for piece in _pieces(item.text or "", item.chunks):
        frames += [chunk({"content": piece}), _PAUSE]
    for i, tc in enumerate(item.tool_calls):
        cid = _call_id("call_", i, tc.id)
        frames.append(
            chunk(
                {
                    "tool_calls": [
                        {"index": i, "id": cid, "type": "function", "function": {"name": tc.name, "arguments": ""}}
                    ]
                }
            )
        )
        for piece in _pieces(tc.argument_text(), 3):
            frames.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    finish = {"stop": "stop", "length": "length", "toolUse": "tool_calls"}.get(_stop(item), "stop")
    if item.end != "normal":
        return [*frames, item.end]
    frames.append(chunk({}, finish))
    options = request.body.get("stream_options") if isinstance(request.body, dict) else None
    if isinstance(options, dict) and options.get("include_usage"):
        u = item.usage
        usage = {
            "prompt_tokens": u["input"] + u["cacheRead"],
            "completion_tokens": u["output"],
            "total_tokens": u["input"] + u["cacheRead"] + u["output"],
            "prompt_tokens_details": {"cached_tokens": u["cacheRead"]},
        }
        frames.append(_sse({**base, "choices": [], "usage": usage}))
    frames.append(b"data: [DONE]\n\n")
    return frames


def _openai_json(item: Reply, request: Request) -> dict[str, Any]:
    u = item.usage
    message: dict[str, Any] = {"role": "assistant", "content": item.text}
    if item.tool_calls:
        message["tool_calls"] = [
            {
                "id": _call_id("call_", i, tc.id),
                "type": "function",
                "function": {"name": tc.name, "arguments": tc.argument_text()},
            }
            for i, tc in enumerate(item.tool_calls)
        ]
    finish = {"stop": "stop", "length": "length", "toolUse": "tool_calls"}.get(_stop(item), "stop")
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.body.get("model") if isinstance(request.body, dict) else "fake",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": u["input"] + u["cacheRead"],
            "completion_tokens": u["output"],
            "total_tokens": u["input"] + u["cacheRead"] + u["output"],
            "prompt_tokens_details": {"cached_tokens": u["cacheRead"]},
        },
    }


def _anthropic_blocks(item: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if item.redacted is not None:
        blocks.append({"type": "redacted_thinking", "data": item.redacted})
    if item.thinking is not None:
        blocks.append({"type": "thinking", "thinking": item.thinking, "signature": item.signature or ""})
    if item.text:
        blocks.append({"type": "text", "text": item.text})
    for i, tc in enumerate(item.tool_calls):
        block = {"type": "tool_use", "id": _call_id("toolu_", i, tc.id), "name": tc.name, "input": tc.arguments}
        blocks.append({**block, "_raw": tc.argument_text()})
    return blocks


_ANTHROPIC_STOP = {"stop": "end_turn", "length": "max_tokens", "toolUse": "tool_use"}


def _anthropic_stream(item: Reply, request: Request) -> list[Any]:
    u = item.usage
    model = request.body.get("model") if isinstance(request.body, dict) else "fake"
    start_usage = {
        "input_tokens": u["input"],
        "output_tokens": 1,
        "cache_read_input_tokens": u["cacheRead"],
        "cache_creation_input_tokens": u["cacheWrite"],
    }
    message: dict[str, Any] = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": start_usage,
    }
    frames: list[Any] = [_sse({"type": "message_start", "message": message}, "message_start")]
    frames.append(_sse({"type": "ping"}, "ping"))
    for index, block in enumerate(_anthropic_blocks(item)):
        kind = block["type"]
        start: dict[str, Any]
        if kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
        elif kind == "text":
            start = {"type": "text", "text": ""}
        elif kind == "tool_use":
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        else:
            start = block
        frames.append(
            _sse({"type": "content_block_start", "index": index, "content_block": start}, "content_block_start")
        )

        def delta(d: dict[str, Any], index: int = index) -> bytes:
            return _sse({"type": "content_block_delta", "index": index, "delta": d}, "content_block_delta")

        if kind == "thinking":
            for piece in _pieces(block["thinking"], item.chunks):
                frames += [delta({"type": "thinking_delta", "thinking": piece}), _PAUSE]
            if block["signature"]:
                frames.append(delta({"type": "signature_delta", "signature": block["signature"]}))
        elif kind == "text":
            for piece in _pieces(block["text"], item.chunks):
                frames += [delta({"type": "text_delta", "text": piece}), _PAUSE]
        elif kind == "tool_use":
            for piece in _pieces(block["_raw"], 3):
                frames.append(delta({"type": "input_json_delta", "partial_json": piece}))
        frames.append(_sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
    if item.end != "normal":
        return [*frames, item.end]
    frames.append(
        _sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": _ANTHROPIC_STOP.get(_stop(item), "end_turn"), "stop_sequence": None},
                "usage": {"output_tokens": u["output"]},
            },
            "message_delta",
        )
    )
    frames.append(_sse({"type": "message_stop"}, "message_stop"))
    return frames


def _anthropic_json(item: Reply, request: Request) -> dict[str, Any]:
    u = item.usage
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": request.body.get("model") if isinstance(request.body, dict) else "fake",
        "content": [{k: v for k, v in b.items() if k != "_raw"} for b in _anthropic_blocks(item)],
        "stop_reason": _ANTHROPIC_STOP.get(_stop(item), "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": u["input"],
            "output_tokens": u["output"],
            "cache_read_input_tokens": u["cacheRead"],
            "cache_creation_input_tokens": u["cacheWrite"],
        },
    }


def _google_usage(item: Reply) -> dict[str, int]:
    u = item.usage
    return {
        "promptTokenCount": u["input"] + u["cacheRead"],
        "cachedContentTokenCount": u["cacheRead"],
        "candidatesTokenCount": u["output"],
        "totalTokenCount": u["input"] + u["cacheRead"] + u["output"],
    }


def _google_calls(item: Reply) -> list[dict[str, Any]]:
    parts = []
    for tc in item.tool_calls:
        fc: dict[str, Any] = {"name": tc.name, "args": tc.arguments}
        if tc.id:
            fc["id"] = tc.id
        part: dict[str, Any] = {"functionCall": fc}
        if tc.signature:
            part["thoughtSignature"] = tc.signature
        parts.append(part)
    return parts


def _google_finish(item: Reply) -> str:
    return "MAX_TOKENS" if _stop(item) == "length" else "STOP"


def _google_stream(item: Reply, request: Request) -> list[Any]:
    model = request.model or "fake"

    def chunk(parts: list[dict[str, Any]] | None, finish: bool = False) -> bytes:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts or []}, "index": 0}
        data: dict[str, Any] = {"candidates": [candidate], "modelVersion": model}
        if finish:
            candidate["finishReason"] = _google_finish(item)
            data["usageMetadata"] = _google_usage(item)
        return f"data: {json.dumps(data)}\r\n\r\n".encode()

    frames: list[Any] = []
    thoughts = _pieces(item.thinking or "", item.chunks)
    for i, piece in enumerate(thoughts):
        part: dict[str, Any] = {"text": piece, "thought": True}
        if i == len(thoughts) - 1 and item.signature:
            part["thoughtSignature"] = item.signature
        frames += [chunk([part]), _PAUSE]
    for piece in _pieces(item.text or "", item.chunks):
        frames += [chunk([{"text": piece}]), _PAUSE]
    if item.end != "normal":
        return [*frames, item.end]
    calls = _google_calls(item)
    frames.append(chunk(calls, finish=True))
    return frames


def _google_json(item: Reply, request: Request) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if item.thinking is not None:
        thought: dict[str, Any] = {"text": item.thinking, "thought": True}
        if item.signature:
            thought["thoughtSignature"] = item.signature
        parts.append(thought)
    if item.text:
        parts.append({"text": item.text})
    parts += _google_calls(item)
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": _google_finish(item), "index": 0}
        ],
        "usageMetadata": _google_usage(item),
        "modelVersion": request.model or "fake",
    }


_BEDROCK_STOP = {"stop": "end_turn", "length": "max_tokens", "toolUse": "tool_use"}


def _bedrock_usage(item: Reply) -> dict[str, int]:
    u = item.usage
    return {
        "inputTokens": u["input"],
        "outputTokens": u["output"],
        "totalTokens": u["input"] + u["output"] + u["cacheRead"] + u["cacheWrite"],
        "cacheReadInputTokens": u["cacheRead"],
        "cacheWriteInputTokens": u["cacheWrite"],
    }


def _bedrock_stream(item: Reply, request: Request) -> list[Any]:
    ev = _event_stream_message
    frames: list[Any] = [ev("messageStart", {"role": "assistant"})]
    index = 0
    if item.thinking is not None or item.redacted is not None:
        if item.redacted is not None:
            data = base64.b64encode(item.redacted.encode()).decode()
            frames.append(
                ev(
                    "contentBlockDelta",
                    {"contentBlockIndex": index, "delta": {"reasoningContent": {"redactedContent": data}}},
                )
            )
        for piece in _pieces(item.thinking or "", item.chunks):
            frames += [
                ev("contentBlockDelta", {"contentBlockIndex": index, "delta": {"reasoningContent": {"text": piece}}}),
                _PAUSE,
            ]
        if item.signature and item.thinking is not None:
            frames.append(
                ev(
                    "contentBlockDelta",
                    {"contentBlockIndex": index, "delta": {"reasoningContent": {"signature": item.signature}}},
                )
            )
        frames.append(ev("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    if item.text:
        for piece in _pieces(item.text, item.chunks):
            frames += [ev("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": piece}}), _PAUSE]
        frames.append(ev("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    for i, tc in enumerate(item.tool_calls):
        use = {"toolUseId": _call_id("tooluse_", i, tc.id), "name": tc.name}
        frames.append(ev("contentBlockStart", {"contentBlockIndex": index, "start": {"toolUse": use}}))
        for piece in _pieces(tc.argument_text(), 3):
            frames.append(ev("contentBlockDelta", {"contentBlockIndex": index, "delta": {"toolUse": {"input": piece}}}))
        frames.append(ev("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    if item.end != "normal":
        return [*frames, item.end]
    frames.append(ev("messageStop", {"stopReason": _BEDROCK_STOP.get(_stop(item), "end_turn")}))
    frames.append(ev("metadata", {"usage": _bedrock_usage(item), "metrics": {"latencyMs": 5}}))
    return frames


def _bedrock_json(item: Reply, request: Request) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if item.thinking is not None:
        text = {"text": item.thinking, **({"signature": item.signature} if item.signature else {})}
        content.append({"reasoningContent": {"reasoningText": text}})
    if item.text:
        content.append({"text": item.text})
    for i, tc in enumerate(item.tool_calls):
        use = {"toolUseId": _call_id("tooluse_", i, tc.id), "name": tc.name, "input": tc.arguments}
        content.append({"toolUse": use})
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": _BEDROCK_STOP.get(_stop(item), "end_turn"),
        "usage": _bedrock_usage(item),
        "metrics": {"latencyMs": 5},
    }


def _stream_error(wire: str) -> bytes:
    """The wire's own way of failing inside a stream that already answered 200 (an overload / throttle)."""
    if wire == "anthropic":
        return _sse({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "error")
    if wire == "google":
        return _sse({"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}})
    if wire == "bedrock":
        return _event_stream_message("throttlingException", {"message": "Too many requests"}, "exception")
    return _sse({"error": {"message": "The server is overloaded", "type": "server_error", "code": None}})


_STREAMS: dict[str, Callable[[Reply, Request], list[Any]]] = {
    "openai": _openai_stream,
    "anthropic": _anthropic_stream,
    "google": _google_stream,
    "bedrock": _bedrock_stream,
}
_JSONS: dict[str, Callable[[Reply, Request], dict[str, Any]]] = {
    "openai": _openai_json,
    "anthropic": _anthropic_json,
    "google": _google_json,
    "bedrock": _bedrock_json,
}
_CONTENT_TYPES = {
    "openai": "text/event-stream",
    "anthropic": "text/event-stream",
    "google": "text/event-stream",
    "bedrock": "application/vnd.amazon.eventstream",
}


# --- the request handler -----------------------------------------------------------------------------------------


def _make_handler(llm: FakeLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "FakeLLM/1"
        _generation = 0

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._send_json(404, {"error": {"message": "fake LLM: only POST is served"}})

        def do_POST(self) -> None:
            try:
                self._serve()
            except (TimeoutError, BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
                self.close_connection = True

        def _serve(self) -> None:
            url = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            wire, model, stream = _wire(url.path)
            if wire == "transcription":
                body = _form_fields(self.headers.get("Content-Type") or "", raw)
                model = body.get("model") if isinstance(body, dict) else None
            if wire in ("openai", "anthropic"):
                stream = bool(isinstance(body, dict) and body.get("stream"))
                model = body.get("model") if isinstance(body, dict) else None
            request = Request(
                "POST",
                url.path,
                parse_qs(url.query),
                {k.lower(): v for k, v in self.headers.items()},
                body,
                raw,
                wire,
                model,
                bool(stream),
            )
            if wire is None:
                self._send_json(404, {"error": {"message": f"fake LLM: unknown path {url.path}"}})
                return
            self._generation = llm._generation_now()
            llm._record(request)
            item = llm._next(request)
            if item is None:
                item = ErrorReply(500, NO_SCRIPT)
            self._answer(item, request)

        def _answer(self, item: Item, request: Request) -> None:
            try:
                self._answer_item(item, request)
            finally:
                request.ended.set()

        def _answer_item(self, item: Item, request: Request) -> None:
            if isinstance(item, Hang):
                outcome = llm._wait(item.max_s, self._generation, self.connection)
                if outcome == "disconnected" or item.then is None:
                    self._drop()
                    return
                item = item.then
            if isinstance(item, ErrorReply):
                self._error(item, request)
            elif request.wire == "transcription":
                self._send_json(200, {"text": item.text or ""})
            elif request.stream:
                self._stream(item, request)
            else:
                self._send_json(200, _JSONS[str(request.wire)](item, request))

        def _error(self, item: ErrorReply, request: Request) -> None:
            body, headers = _error_body(request.wire, item)
            if item.body is not None:
                body = item.body
            headers.update(item.headers)
            if item.retry_after is not None:
                headers["Retry-After"] = f"{item.retry_after:g}"
            self._send_json(item.status, body, headers)

        def _send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            if isinstance(body, bytes):
                data = body
            elif isinstance(body, str):
                data = body.encode()
            else:
                data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

        def _stream(self, item: Reply, request: Request) -> None:
            frames = list(_STREAMS[str(request.wire)](item, request))
            request.frames_total = sum(1 for frame in frames if isinstance(frame, bytes))
            self.send_response(200)
            self.send_header("Content-Type", _CONTENT_TYPES[str(request.wire)])
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            self.wfile.flush()
            pauses = 0
            for frame in frames:
                if frame is _PAUSE:
                    pauses += 1
                    held = pauses == item.hold_after
                    if held and llm._wait(30.0, self._generation, self.connection) == "disconnected":
                        request.disconnected = True
                        self._drop()
                        return
                    if llm._wait_or_gone(item.delay_per_chunk, self.connection):
                        request.disconnected = True
                        self._drop()
                        return
                elif frame == "drop":
                    self._drop()
                    return
                elif frame == "error":
                    self._chunk(_stream_error(str(request.wire)))
                    break
                elif frame == "hang":
                    llm._wait(30.0, self._generation, self.connection)
                    self._drop()
                    return
                else:
                    self._chunk(frame)
                    request.frames_sent += 1
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _drop(self) -> None:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.wfile.flush()
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    return Handler


@contextlib.contextmanager
def running() -> Iterator[FakeLLM]:
    """`with running() as llm:` — a started server, stopped on exit."""
    llm = FakeLLM().start()
    try:
        yield llm
    finally:
        llm.stop()
