"""Anthropic Messages API (official `anthropic` SDK), streaming.

Stored → wire: user text/images; consecutive tool results → one user turn of tool_result blocks (images inside,
is_error); assistant text, tool_use (same ids, made safe for the API's id pattern), and thinking blocks only when
they came from this API and provider with a signature (redacted ones as redacted_thinking). Thinking level →
`thinking={"type":"enabled","budget_tokens":N}` with max_tokens raised above the budget. Prompt caching marks the
system prompt and the newest turn when talking to Anthropic itself.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from orbital.agent.providers._clients import sdk_client
from orbital.agent.providers._convert import (
    EMPTY_USER,
    Assembler,
    incremental,
    made,
    prepare,
    same_origin,
    usage,
    user_blocks,
)
from orbital.agent.providers._errors import IncompleteStreamError
from orbital.agent.providers._resolve import max_tokens
from orbital.agent.providers._types import THINKING_BUDGETS, ModelRequest, ProviderInfo

if TYPE_CHECKING:
    from orbital.agent.providers._runner import Attempt

API = "anthropic-messages"

STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "toolUse",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "error",
}

# Largest output per model family (thinking budgets must fit below it).
_OUTPUT_CAPS: tuple[tuple[str, int], ...] = (
    (r"opus-4(-0|-1|-2025|$)|opus-4-1", 32_000),
    (r"claude", 64_000),
)
_NO_THINKING = re.compile(r"claude-(instant|2|3-(5-)?(haiku|sonnet|opus)|3-opus|3-haiku)", re.IGNORECASE)


def _new_client(info: ProviderInfo) -> Any:
    import anthropic

    return anthropic.Anthropic(
        api_key=info.api_key,
        base_url=info.base_url or None,
        max_retries=0,
        default_headers=info.headers or None,
    )


def safe_id(call_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", str(call_id))[:64] or "call"


def _image(block: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": block.get("mimeType") or "image/png", "data": block["data"]},
    }


def _content(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": b["text"]} if b["type"] == "text" else _image(b) for b in blocks]


def _append(out: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    if not blocks:
        return
    if out and out[-1]["role"] == role:
        out[-1]["content"].extend(blocks)
    else:
        out.append({"role": role, "content": list(blocks)})


def wire_messages(request: ModelRequest) -> list[dict[str, Any]]:
    return incremental(request, API, lambda part: _history(request, part), starts_after=_assistant_entry)


def _assistant_entry(entry: dict[str, Any]) -> bool:
    return bool(entry["role"] == "assistant")


def _history(request: ModelRequest, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in prepare(messages, keep_tools=bool(request.tools)):
        role = message["role"]
        if role == "user":
            _append(out, "user", made(request, "anthropic.user", message, _user))
        elif role == "toolResult":
            _append(out, "user", made(request, "anthropic.result", message, _tool_result))
        elif same_origin(message, API, request.provider):
            _append(out, "assistant", made(request, "anthropic.assistant.own", message, _own_assistant))
        else:
            _append(out, "assistant", made(request, "anthropic.assistant", message, _assistant))
    return out


def _user(message: dict[str, Any]) -> list[dict[str, Any]]:
    return _content(user_blocks(message)) or [{"type": "text", "text": EMPTY_USER}]


def _tool_result(message: dict[str, Any]) -> list[dict[str, Any]]:
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": safe_id(message["toolCallId"])}
    content = _content(user_blocks(message))
    if content:
        result["content"] = content
    if message.get("isError"):
        result["is_error"] = True
    return [result]


def _own_assistant(message: dict[str, Any]) -> list[dict[str, Any]]:
    """An assistant message of this API and provider: its signed thinking goes back."""
    return _assistant(message, True)


def _assistant(message: dict[str, Any], same: bool = False) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for block in message.get("content") or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            blocks.append({"type": "text", "text": block["text"]})
        elif kind == "thinking" and same:
            if block.get("redacted") and block.get("data"):
                blocks.append({"type": "redacted_thinking", "data": block["data"]})
            elif block.get("thinkingSignature"):
                blocks.append(
                    {
                        "type": "thinking",
                        "thinking": block.get("thinking") or "",
                        "signature": block["thinkingSignature"],
                    }
                )
        elif kind == "toolCall":
            args = block.get("arguments")
            blocks.append(
                {
                    "type": "tool_use",
                    "id": safe_id(block["id"]),
                    "name": block.get("name", ""),
                    "input": args if isinstance(args, dict) else {},
                }
            )
    return blocks


def wire_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for tool in tools:
        schema = tool.get("inputSchema")
        spec: dict[str, Any] = {
            "name": tool["name"],
            "input_schema": schema if isinstance(schema, dict) else {"type": "object", "properties": {}},
        }
        if tool.get("description"):
            spec["description"] = tool["description"]
        out.append(spec)
    return out


def _output_cap(model: str) -> int:
    for pattern, cap in _OUTPUT_CAPS:
        if re.search(pattern, model.lower()):
            return cap
    return 64_000


def thinking_params(request: ModelRequest, base_max: int) -> tuple[dict[str, Any] | None, int]:
    """(thinking parameter or None, max_tokens) for a level; the budget always fits below max_tokens."""
    level = request.thinking_level()
    if level is None or _NO_THINKING.search(request.model):
        return None, base_max
    budget = THINKING_BUDGETS[level]
    limit = min(base_max + budget, _output_cap(request.model))
    if budget >= limit:
        budget = max(1024, limit - 1024)
    return {"type": "enabled", "budget_tokens": budget}, limit


def build_params(request: ModelRequest, info: ProviderInfo) -> dict[str, Any]:
    thinking, limit = thinking_params(request, max_tokens(request.max_tokens, info))
    messages = wire_messages(request)
    params: dict[str, Any] = {"model": request.model, "max_tokens": limit, "messages": messages}
    caching = info.name == "anthropic"
    if request.system:
        system: dict[str, Any] = {"type": "text", "text": request.system}
        if caching:
            system["cache_control"] = {"type": "ephemeral"}
        params["system"] = [system]
    if caching and messages and messages[-1]["role"] == "user" and messages[-1]["content"]:
        content = messages[-1]["content"]  # a copy: the entries before it may be kept for the next call
        messages[-1] = {
            **messages[-1],
            "content": [*content[:-1], {**content[-1], "cache_control": {"type": "ephemeral"}}],
        }
    if request.tools:
        params["tools"] = wire_tools(request.tools)
    if thinking:
        params["thinking"] = thinking
    return params


def run(attempt: Attempt) -> dict[str, Any]:
    request = attempt.request
    client = sdk_client(attempt.info, _new_client)
    stream = client.messages.create(**build_params(request, attempt.info), stream=True, timeout=attempt.timeout)
    attempt.on_close(stream.close, response=getattr(stream, "response", None))
    asm = Assembler(API, request.provider, request.model, attempt.emit)
    counts = {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0}
    finished = False
    with stream:
        for event in stream:
            if attempt.stopped():
                break
            kind = getattr(event, "type", None)
            if kind == "message_start":
                _count(counts, getattr(event.message, "usage", None))
                attempt.usage_seen(
                    usage(counts["input"], counts["output"], counts["cache_read"], counts["cache_write"])
                )
            elif kind == "content_block_start":
                _start(asm, event.index, event.content_block)
            elif kind == "content_block_delta":
                _delta(asm, event.index, event.delta)
            elif kind == "message_delta":
                reason = getattr(event.delta, "stop_reason", None)
                if reason:
                    asm.stop_reason = STOP_REASONS.get(reason, "stop")
                _count(counts, getattr(event, "usage", None))
                attempt.usage_seen(
                    usage(counts["input"], counts["output"], counts["cache_read"], counts["cache_write"])
                )
            elif kind == "message_stop":
                finished = True
    if not finished:
        raise IncompleteStreamError("the Anthropic stream ended before message_stop")
    asm.usage = usage(counts["input"], counts["output"], counts["cache_read"], counts["cache_write"])
    return asm.finish()


def _count(counts: dict[str, int], raw: Any) -> None:
    if raw is None:
        return
    for name, attr in (
        ("input", "input_tokens"),
        ("output", "output_tokens"),
        ("cache_read", "cache_read_input_tokens"),
        ("cache_write", "cache_creation_input_tokens"),
    ):
        value = getattr(raw, attr, None)
        if isinstance(value, int):
            counts[name] = value


def _start(asm: Assembler, index: int, block: Any) -> None:
    kind = getattr(block, "type", None)
    if kind == "text":
        asm.text(getattr(block, "text", "") or "", index)
    elif kind == "thinking":
        asm.thinking(getattr(block, "thinking", "") or "", index, getattr(block, "signature", None) or None)
    elif kind == "redacted_thinking":
        asm.redacted_thinking(getattr(block, "data", "") or "", index)
    elif kind == "tool_use":
        given = getattr(block, "input", None)
        asm.tool_call(index, block.id, block.name, given if isinstance(given, dict) and given else None)


def _delta(asm: Assembler, index: int, delta: Any) -> None:
    kind = getattr(delta, "type", None)
    if kind == "text_delta":
        asm.text(delta.text, index)
    elif kind == "thinking_delta":
        asm.thinking(delta.thinking, index)
    elif kind == "signature_delta":
        asm.thinking("", index, signature=delta.signature)
    elif kind == "input_json_delta":
        asm.tool_args(delta.partial_json, index)
