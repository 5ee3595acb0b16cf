"""OpenAI Chat Completions (official `openai` SDK), streaming, for OpenAI and every compatible server.

Stored → wire: system prompt as a system (or, for OpenAI reasoning models, developer) message; user text/images as
content parts; assistant text and tool_calls (same ids; thinking is not sent back: the API takes none); each tool
result as a `role:"tool"` message in call order, and the images of a group of tool results in one user message
right after them. Thinking level → `reasoning_effort` for reasoning models only (o-series, gpt-5*). Streamed
`reasoning_content`/`reasoning` deltas of compatible servers come back as (unsigned) thinking blocks.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import TYPE_CHECKING, Any

from orbital.agent.providers._clients import sdk_client
from orbital.agent.providers._convert import (
    EMPTY_USER,
    Assembler,
    data_url,
    incremental,
    made,
    prepare,
    usage,
    user_blocks,
)
from orbital.agent.providers._errors import IncompleteStreamError
from orbital.agent.providers._resolve import bare_model, max_tokens
from orbital.agent.providers._types import THINKING_BUDGETS, ModelRequest, ProviderInfo

if TYPE_CHECKING:
    from orbital.agent.providers._runner import Attempt

API = "openai-completions"

STOP_REASONS = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "toolUse",
    "function_call": "toolUse",
    "content_filter": "error",
}
TOOL_IMAGES_NOTE = "Attached image(s) from tool result:"
EMPTY_RESULT = "(no output)"

_REASONING_MODEL = re.compile(r"^(o[1-9]|gpt-5)")


def _new_client(info: ProviderInfo) -> Any:
    import openai

    return openai.OpenAI(
        api_key=info.api_key,
        base_url=info.base_url or None,
        max_retries=0,
        default_headers=info.headers or None,
    )


def is_reasoning_model(model: str) -> bool:
    return bool(_REASONING_MODEL.match(bare_model(model)))


def reasoning_effort(request: ModelRequest) -> str | None:
    """The `reasoning_effort` to send, or None (thinking off, or a model that does not take one)."""
    level = request.thinking_level()
    if level is None or not is_reasoning_model(request.model):
        return None
    if level == "xhigh":
        return "high"
    if level == "minimal" and not bare_model(request.model).startswith("gpt-5"):
        return "low"
    return level


def _parts(blocks: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if all(b["type"] == "text" for b in blocks):
        return "\n".join(b["text"] for b in blocks)
    return [
        {"type": "text", "text": b["text"]}
        if b["type"] == "text"
        else {"type": "image_url", "image_url": {"url": data_url(b)}}
        for b in blocks
    ]


def wire_messages(request: ModelRequest, system_role: str = "system") -> list[dict[str, Any]]:
    system = [{"role": system_role, "content": request.system}] if request.system else []
    return [*system, *incremental(request, API, lambda part: _history(request, part))]


def _history(request: ModelRequest, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    images: list[dict[str, Any]] = []

    def flush_images() -> None:
        if images:
            out.append({"role": "user", "content": [{"type": "text", "text": TOOL_IMAGES_NOTE}, *images]})
            images.clear()

    for message in prepare(messages, keep_tools=bool(request.tools)):
        role = message["role"]
        if role != "toolResult":
            flush_images()
        if role == "user":
            out.append(made(request, "openai.user", message, _user))
        elif role == "toolResult":
            result, result_images = made(request, "openai.result", message, _tool_result)
            images.extend(result_images)
            out.append(result)
        else:
            wire = made(request, "openai.assistant", message, _assistant)
            if wire is not None:
                out.append(wire)
    flush_images()
    return out


def _user(message: dict[str, Any]) -> dict[str, Any]:
    blocks = user_blocks(message)
    return {"role": "user", "content": _parts(blocks) if blocks else EMPTY_USER}


def _tool_result(message: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A tool result's `tool` message, and its images (sent in a user message after the group's results)."""
    blocks = user_blocks(message)
    text = "\n".join(b["text"] for b in blocks if b["type"] == "text")
    images = [{"type": "image_url", "image_url": {"url": data_url(b)}} for b in blocks if b["type"] == "image"]
    return {"role": "tool", "tool_call_id": message["toolCallId"], "content": text or EMPTY_RESULT}, images


def _assistant(message: dict[str, Any]) -> dict[str, Any] | None:
    text = ""
    calls = []
    for block in message.get("content") or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and block.get("text"):
            text += block["text"]
        elif block.get("type") == "toolCall":
            args = block.get("arguments")
            calls.append(
                {
                    "id": block["id"],
                    "type": "function",
                    "function": {
                        "name": block.get("name", ""),
                        "arguments": json.dumps(args if isinstance(args, dict) else {}, ensure_ascii=False),
                    },
                }
            )
    if not text and not calls:
        return None
    wire: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        wire["tool_calls"] = calls
    return wire


def wire_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for tool in tools:
        schema = tool.get("inputSchema")
        function: dict[str, Any] = {
            "name": tool["name"],
            "parameters": schema if isinstance(schema, dict) else {"type": "object", "properties": {}},
        }
        if tool.get("description"):
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    return out


def build_params(request: ModelRequest, info: ProviderInfo) -> dict[str, Any]:
    effort = reasoning_effort(request)
    native = info.name == "openai"
    system_role = "developer" if native and is_reasoning_model(request.model) else "system"
    params: dict[str, Any] = {
        "model": request.model,
        "messages": wire_messages(request, system_role),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    limit = max_tokens(request.max_tokens, info)
    if effort is not None:
        level = request.thinking_level() or "medium"
        limit += THINKING_BUDGETS[level]
        params["reasoning_effort"] = effort
    params["max_completion_tokens" if native else "max_tokens"] = limit
    if request.tools:
        params["tools"] = wire_tools(request.tools)
    return params


def run(attempt: Attempt) -> dict[str, Any]:
    request = attempt.request
    client = sdk_client(attempt.info, _new_client)
    params = build_params(request, attempt.info)
    # The SDK walks every parameter it is given against its type definitions, a cost that grows with the history
    # (about 0.15 ms a message); `params` is the wire's body already, so it goes as `extra_body`, which is sent as
    # given and takes precedence over the typed parameters (left empty here).
    stream = client.chat.completions.create(
        model=params["model"], messages=[], stream=True, extra_body=params, timeout=attempt.timeout
    )
    attempt.on_close(stream.close, response=getattr(stream, "response", None))
    asm = Assembler(API, request.provider, request.model, attempt.emit)
    finish: str | None = None
    with stream:
        for chunk in stream:
            if attempt.stopped():
                break
            raw_usage = getattr(chunk, "usage", None)
            if raw_usage is not None:
                asm.usage = _usage(raw_usage)
                attempt.usage_seen(asm.usage)
            for choice in getattr(chunk, "choices", None) or []:
                delta = getattr(choice, "delta", None)
                if delta is not None:
                    _delta(asm, delta)
                if getattr(choice, "finish_reason", None):
                    finish = choice.finish_reason
    if finish is None:
        raise IncompleteStreamError("the chat completion stream ended without a finish reason")
    return asm.finish(STOP_REASONS.get(finish, "stop"))


def _delta(asm: Assembler, delta: Any) -> None:
    reasoning = getattr(delta, "reasoning_content", None) or getattr(delta, "reasoning", None)
    if isinstance(reasoning, str) and reasoning:
        asm.thinking(reasoning)
    content = getattr(delta, "content", None)
    if isinstance(content, str) and content:
        asm.text(content)
    for position, call in enumerate(getattr(delta, "tool_calls", None) or []):
        index = call.index if isinstance(getattr(call, "index", None), int) else position
        key = ("tool", index)
        function = getattr(call, "function", None)
        name = getattr(function, "name", None) or ""
        block = asm.open_block(key)
        if block is None:
            block = asm.tool_call(key, call.id or f"call_{uuid.uuid4().hex[:24]}", name, "")
        else:
            if name and not block.get("name"):
                block["name"] = name
        fragment = getattr(function, "arguments", None)
        if isinstance(fragment, str) and fragment:
            asm.tool_args(fragment, key)


def _usage(raw: Any) -> dict[str, Any]:
    prompt = getattr(raw, "prompt_tokens", 0) or 0
    completion = getattr(raw, "completion_tokens", 0) or 0
    details = getattr(raw, "prompt_tokens_details", None)
    cached = (getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
    input_tokens = max(0, prompt - cached)
    return usage(input_tokens, completion, cached, 0, input_tokens + completion + cached)
