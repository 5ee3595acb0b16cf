"""Shared message handling: tidy stored history before it is translated to a wire format, and assemble one stored
assistant message from a stream of deltas."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from orbital.agent.providers._errors import EmptyResponseError

if TYPE_CHECKING:
    from orbital.agent.providers._types import ModelRequest

T = TypeVar("T")

NO_RESULT = "No result provided"
EMPTY_USER = "[Empty message]"


def made(request: ModelRequest, kind: str, message: dict[str, Any], make: Callable[[dict[str, Any]], T]) -> T:
    """`make(message)`: a message's wire form (`kind` names the form and whatever else it depends on), kept in the
    request's memo for the session's next call. What it returns is shared: never change it."""
    memo = request.memo
    return make(message) if memo is None else memo.get(kind, message, make)


def incremental(
    request: ModelRequest,
    api: str,
    convert: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
    *,
    starts_after: Callable[[dict[str, Any]], bool] = lambda entry: True,
) -> list[dict[str, Any]]:
    """`convert(request.messages)`, where the leading messages converted for the session's previous call are not
    converted again (their wire entries are kept in the request's memo).

    `convert` is a provider's conversion of a run of messages (`prepare`, then its own loop). The history is cut
    before its last user message: `prepare` starts afresh there (the tool results before it are complete), so the
    conversion of the whole is the conversion of the part before the cut followed by that of the rest, provided the
    rest's first entry does not merge into the last entry before the cut (`starts_after(entry)`: a new user entry
    may follow it; for formats that merge consecutive entries of one role, an assistant's). Only the history's own
    messages are kept: the cut is never after a copy (an image's bytes hydrated into it), so image bytes are not
    held with the history. The kept entries are shared, never changed."""
    messages = request.messages
    memo = request.memo
    if memo is None:
        return convert(messages)
    kind = f"prefix:{api}:{request.provider}:{request.model}:{bool(request.tools)}"
    start, kept = memo.prefix(kind, messages)
    entries: list[dict[str, Any]] = list(kept) if kept else []
    cut = start
    for index in range(start, len(messages)):
        message = messages[index]
        if not memo.owns(message):
            break
        if index > start and message.get("role") == "user":
            cut = index
    if cut == start:
        return [*entries, *convert(messages[start:])]
    head = convert(messages[start:cut])
    if head and not starts_after(head[-1]):  # the part after the cut would merge into it: no cut here
        return [*entries, *convert(messages[start:])]
    before = [*entries, *head]
    memo.keep_prefix(kind, messages, cut, before)
    return [*before, *convert(messages[cut:])]


def user_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A user or toolResult message's content as a list of text/image blocks (empty text dropped)."""
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        usable = block.get("text") if kind == "text" else block.get("data") if kind == "image" else None
        if isinstance(usable, str) and usable:
            blocks.append(block)
        elif kind == "image":
            blocks.append({"type": "text", "text": "[Image no longer available]"})
    return blocks


def tool_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "toolCall" and b.get("id")]


def prepare(messages: list[dict[str, Any]], *, keep_tools: bool = True) -> list[dict[str, Any]]:
    """History ready for any wire format.

    - assistant messages that ended in an error, or carry nothing, are left out, except the gateway's traces of
      runs that were stopped or failed, which become a short assistant text ("[No reply to this message: …]");
    - every tool call gets a result: the results that follow an assistant message are put in that message's call
      order, a missing one becomes an error result "No result provided", a result for no known call is left out;
    - with `keep_tools=False` (a call without tools) tool calls and results become plain text, as providers refuse
      tool blocks when no tools are declared.
    """
    out: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []  # tool calls of the last assistant message, in call order
    results: dict[str, dict[str, Any]] = {}

    def flush() -> None:
        for call in pending:
            result = results.get(call["id"]) or {
                "role": "toolResult",
                "toolCallId": call["id"],
                "toolName": call.get("name", ""),
                "content": [{"type": "text", "text": NO_RESULT}],
                "isError": True,
            }
            out.append(result)
        pending.clear()
        results.clear()

    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "toolResult":
            call_id = str(message.get("toolCallId") or "")
            if any(call["id"] == call_id for call in pending) and call_id not in results:
                results[call_id] = message
            continue
        flush()
        if role == "assistant":
            if message.get("stopReason") in ("error", "aborted"):
                if message.get("api") == GATEWAY_API:  # a run's trace: the model sees a short turn of its own
                    out.append(_trace_turn(message))
                continue
            content = message.get("content")
            if not isinstance(content, list) or not content:
                continue
            out.append(message)
            pending.extend(tool_calls(message))
        elif role == "user":
            out.append(message)
    flush()
    return out if keep_tools else [_flatten_tools(m) for m in out]


GATEWAY_API = "orbital"
"""The `api` of messages the gateway writes itself (`orbital.agent.runs.end_trace`)."""


def _trace_turn(message: dict[str, Any]) -> dict[str, Any]:
    """A run's trace (`end_trace`: it was stopped, or failed) as the assistant turn the model is shown, so a user
    message that got no reply is not followed by another user message."""
    why = str(message.get("errorMessage") or "no reply")
    return {
        **message,
        "content": [{"type": "text", "text": f"[No reply to this message: {why}]"}],
        "stopReason": "stop",
    }


def _flatten_tools(message: dict[str, Any]) -> dict[str, Any]:
    role = message.get("role")
    if role == "toolResult":
        text = "\n".join(b["text"] for b in user_blocks(message) if b.get("type") == "text")
        prefix = "Tool error" if message.get("isError") else "Tool result"
        return {"role": "user", "content": f"[{prefix} ({message.get('toolName', '')})]: {text}"}
    if role == "assistant" and tool_calls(message):
        content: list[dict[str, Any]] = []
        for block in message.get("content") or []:
            if isinstance(block, dict) and block.get("type") == "toolCall":
                args = json.dumps(block.get("arguments") or {}, ensure_ascii=False)
                content.append({"type": "text", "text": f"[Called tool {block.get('name', '')} with {args}]"})
            else:
                content.append(block)
        return {**message, "content": content}
    return message


def parse_arguments(raw: str) -> dict[str, Any]:
    """Streamed tool arguments as a dict: {} when empty, {"_raw": text} when they are not a JSON object."""
    if not raw or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": raw}


def usage(input: int = 0, output: int = 0, cache_read: int = 0, cache_write: int = 0, total: int | None = None) -> dict:
    values = [max(0, int(v or 0)) for v in (input, output, cache_read, cache_write)]
    return {
        "input": values[0],
        "output": values[1],
        "cacheRead": values[2],
        "cacheWrite": values[3],
        "totalTokens": int(total) if total else sum(values),
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
    }


class Assembler:
    """Collects streamed blocks (keyed by the provider's block index) into one stored assistant message, passing
    visible text and thinking on to `emit` as they arrive."""

    def __init__(self, api: str, provider: str, model: str, emit: Callable[[str, str], None]) -> None:
        self.api = api
        self.provider = provider
        self.model = model
        self.emit = emit
        self.content: list[dict[str, Any]] = []
        self._open: dict[Any, dict[str, Any]] = {}
        self._raw_args: dict[int, str] = {}  # id(block) → argument fragments
        self.usage = usage()
        self.stop_reason: str | None = None

    def _block(self, key: Any, kind: str) -> dict[str, Any]:
        block = self._open.get(key)
        if block is None or block.get("type") != kind:
            block = {"type": kind}
            if kind == "text":
                block["text"] = ""
            elif kind == "thinking":
                block["thinking"] = ""
            self.content.append(block)
            self._open[key] = block
        return block

    def text(self, delta: str, key: Any = "text") -> None:
        if not delta:
            return
        self._block(key, "text")["text"] += delta
        self.emit("text", delta)

    def thinking(self, delta: str = "", key: Any = "thinking", signature: str | None = None) -> None:
        block = self._block(key, "thinking")
        if delta:
            block["thinking"] += delta
            self.emit("thinking", delta)
        if signature:
            block["thinkingSignature"] = block.get("thinkingSignature", "") + signature

    def set_signature(self, signature: str, key: Any = "thinking") -> None:
        """Replace (not extend) the signature of a thinking block."""
        self._block(key, "thinking")["thinkingSignature"] = signature

    def redacted_thinking(self, data: str, key: Any) -> None:
        block = {"type": "thinking", "thinking": "", "redacted": True, "data": data}
        self.content.append(block)
        self._open[key] = block

    def tool_call(self, key: Any, call_id: str, name: str, arguments: Any = None, **extra: Any) -> dict[str, Any]:
        block: dict[str, Any] = {"type": "toolCall", "id": call_id, "name": name, "arguments": {}}
        block.update({k: v for k, v in extra.items() if v is not None})
        self.content.append(block)
        self._open[key] = block
        if isinstance(arguments, dict):
            block["arguments"] = arguments
        elif isinstance(arguments, str):
            self._raw_args[id(block)] = arguments
        return block

    def tool_args(self, fragment: str, key: Any) -> None:
        block = self._open.get(key)
        if block is None or block.get("type") != "toolCall" or not fragment:
            return
        self._raw_args[id(block)] = self._raw_args.get(id(block), "") + fragment

    def open_block(self, key: Any) -> dict[str, Any] | None:
        return self._open.get(key)

    def close(self, key: Any) -> None:
        self._open.pop(key, None)

    def finish(self, stop_reason: str | None = None) -> dict[str, Any]:
        """The stored assistant message. Raises EmptyResponseError when nothing came back."""
        content: list[dict[str, Any]] = []
        for block in self.content:
            kind = block.get("type")
            if kind == "toolCall":
                raw = self._raw_args.get(id(block))
                if raw is not None:
                    block["arguments"] = parse_arguments(raw)
            elif not _worth_keeping(block):
                continue
            content.append(block)
        if not content:
            raise EmptyResponseError("LLM returned empty response")
        reason = stop_reason or self.stop_reason or "stop"
        if reason == "stop" and any(b.get("type") == "toolCall" for b in content):
            reason = "toolUse"
        return {
            "role": "assistant",
            "content": content,
            "api": self.api,
            "provider": self.provider,
            "model": self.model,
            "usage": self.usage,
            "stopReason": reason,
            "timestamp": int(time.time() * 1000),
        }


def _worth_keeping(block: dict[str, Any]) -> bool:
    if block.get("type") == "text":
        return bool(block.get("text"))
    if block.get("type") == "thinking":
        return bool(block.get("thinking") or block.get("thinkingSignature") or block.get("redacted"))
    return True


def same_origin(message: dict[str, Any], api: str, provider: str) -> bool:
    """Whether an assistant message came from this wire API and provider (its signed blocks are valid here)."""
    return message.get("api") == api and message.get("provider") == provider


def data_url(block: dict[str, Any]) -> str:
    return f"data:{block.get('mimeType') or 'image/png'};base64,{block.get('data', '')}"
