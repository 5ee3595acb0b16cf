"""Google Gemini (official `google-genai` SDK), `generate_content_stream`.

Stored → wire: user text/images as parts; assistant → role "model" with text, signed thoughts of this API and
provider (`thought` + `thoughtSignature`), and function calls carrying their `thoughtSignature` back; tool results
→ functionResponse parts (`{"output": text}` or `{"error": text}`) in call order, their images as inline parts of the
same turn. Thinking level → `thinking_config` (token budget for Gemini 2.x, thinking level for Gemini 3) with
`include_thoughts`. Call ids the API did not give are made up with a "gcall_" prefix and never sent back.

The contents are made in the request body's own JSON form (what the SDK would make of them: parts with camelCase
names, bytes as URL-safe base64) and go as `http_options.extra_body`, which replaces the SDK's (a one-part
placeholder): the SDK builds a model object of every part and converts it back, about 0.3 ms a message, a cost that
grew with the history on every call.
"""

from __future__ import annotations

import base64
import functools
import re
import uuid
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
from orbital.agent.providers._resolve import bare_model, max_tokens
from orbital.agent.providers._types import THINKING_BUDGETS, ModelRequest, ProviderInfo

if TYPE_CHECKING:
    from orbital.agent.providers._runner import Attempt

API = "google-generative-ai"
MADE_UP_ID = "gcall_"
MAX_BUDGET = 24576
# Gemini 3 refuses function calls without a signature in the current turn; calls made by another provider have none.
SKIP_SIGNATURE = base64.urlsafe_b64encode(b"skip_thought_signature_validator").decode("ascii")
PLACEHOLDER = [{"role": "user", "parts": [{"text": "(the conversation is in the request body)"}]}]
"""What the SDK is given as `contents`; the request body's own contents replace it (`extra_body`)."""

STOP_REASONS = {"STOP": "stop", "MAX_TOKENS": "length", "FINISH_REASON_UNSPECIFIED": "stop"}


def _new_client(info: ProviderInfo) -> Any:
    from google import genai
    from google.genai import types

    options = types.HttpOptions(
        base_url=info.base_url or None,
        headers=dict(info.headers) or None,
        retry_options=types.HttpRetryOptions(attempts=1),
    )
    return genai.Client(api_key=info.api_key, vertexai=False, http_options=options)


def _b64decode(value: str) -> bytes:
    try:
        return base64.b64decode(value, validate=False)
    except ValueError:
        return value.encode()


def _gemini3(model: str) -> bool:
    return bare_model(model).startswith("gemini-3")


def _append(out: list[dict[str, Any]], role: str, parts: list[dict[str, Any]]) -> None:
    if not parts:
        return
    if out and out[-1]["role"] == role:
        out[-1]["parts"].extend(parts)
    else:
        out.append({"role": role, "parts": list(parts)})


def _bytes(value: str) -> str:
    """Stored base64 (of an image, a signature) as the SDK sends bytes: URL-safe base64."""
    return base64.urlsafe_b64encode(_b64decode(value)).decode("ascii")


def _part(block: dict[str, Any]) -> dict[str, Any]:
    if block["type"] == "text":
        return {"text": block["text"]}
    return {"inlineData": {"mime_type": block.get("mimeType") or "image/png", "data": _bytes(block["data"])}}


def wire_contents(request: ModelRequest) -> list[dict[str, Any]]:
    """The `contents` of the request body (its JSON form)."""
    return incremental(request, API, lambda part: _history(request, part), starts_after=_model_entry)


def _model_entry(entry: dict[str, Any]) -> bool:
    return bool(entry["role"] == "model")


def _history(request: ModelRequest, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    gemini3 = _gemini3(request.model)
    for message in prepare(messages, keep_tools=bool(request.tools)):
        role = message["role"]
        if role == "user":
            _append(out, "user", made(request, "google.user", message, _user))
        elif role == "toolResult":
            _append(out, "user", made(request, "google.result", message, _tool_result))
        else:
            same = same_origin(message, API, request.provider)
            kind = f"google.model.{'own' if same else 'other'}.{'3' if gemini3 else '2'}"
            _append(
                out, "model", made(request, kind, message, functools.partial(_model_parts, same=same, gemini3=gemini3))
            )
    return out


def _user(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [_part(b) for b in user_blocks(message)] or [{"text": EMPTY_USER}]


def _tool_result(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = user_blocks(message)
    text = "\n".join(b["text"] for b in blocks if b["type"] == "text")
    response: dict[str, Any] = {"name": message.get("toolName", ""), "response": {}}
    response["response"]["error" if message.get("isError") else "output"] = text
    call_id = str(message.get("toolCallId") or "")
    if call_id and not call_id.startswith(MADE_UP_ID):
        response["id"] = call_id
    parts: list[dict[str, Any]] = [{"functionResponse": response}]
    parts.extend(_part(b) for b in blocks if b["type"] == "image")
    return parts


def _model_parts(message: dict[str, Any], same: bool, gemini3: bool) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for block in message.get("content") or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            parts.append({"text": block["text"]})
        elif kind == "thinking" and same and block.get("thinkingSignature") and not block.get("redacted"):
            parts.append(
                {
                    "text": block.get("thinking") or "",
                    "thought": True,
                    "thoughtSignature": _bytes(block["thinkingSignature"]),
                }
            )
        elif kind == "toolCall":
            args = block.get("arguments")
            call: dict[str, Any] = {"name": block.get("name", ""), "args": args if isinstance(args, dict) else {}}
            if not str(block["id"]).startswith(MADE_UP_ID):
                call["id"] = block["id"]
            part: dict[str, Any] = {"functionCall": call}
            signature = block.get("thoughtSignature") if same else None
            if signature:
                part["thoughtSignature"] = _bytes(signature)
            elif gemini3:
                part["thoughtSignature"] = SKIP_SIGNATURE
            parts.append(part)
    return parts


def wire_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    declarations = []
    for tool in tools:
        schema = tool.get("inputSchema")
        declaration: dict[str, Any] = {
            "name": tool["name"],
            "parameters_json_schema": schema if isinstance(schema, dict) else {"type": "object", "properties": {}},
        }
        if tool.get("description"):
            declaration["description"] = tool["description"]
        declarations.append(declaration)
    return [{"function_declarations": declarations}]


def thinking_config(request: ModelRequest) -> dict[str, Any] | None:
    level = request.thinking_level()
    model = bare_model(request.model)
    if level is None:
        if re.match(r"gemini-2\.5-flash", model):
            return {"thinking_budget": 0}
        return None
    if _gemini3(model):
        return {"thinking_level": "LOW" if level in ("minimal", "low") else "HIGH", "include_thoughts": True}
    return {"thinking_budget": min(THINKING_BUDGETS[level], MAX_BUDGET), "include_thoughts": True}


def build_config(request: ModelRequest, info: ProviderInfo, timeout: float | None) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if request.system:
        config["system_instruction"] = request.system
    if request.tools:
        config["tools"] = wire_tools(request.tools)
    thinking = thinking_config(request)
    limit = max_tokens(request.max_tokens, info)
    if thinking is not None:
        config["thinking_config"] = thinking
        limit += int(thinking.get("thinking_budget") or 0)
    config["max_output_tokens"] = limit
    if timeout is not None:
        config["http_options"] = {"timeout": max(1, int(timeout * 1000))}
    return config


def request_config(request: ModelRequest, info: ProviderInfo, timeout: float | None) -> dict[str, Any]:
    """The call's `config`, carrying the contents in the body's own form (`http_options.extra_body`)."""
    config = build_config(request, info, timeout)
    config["http_options"] = {**config.get("http_options", {}), "extra_body": {"contents": wire_contents(request)}}
    return config


def run(attempt: Attempt) -> dict[str, Any]:
    request = attempt.request
    client = sdk_client(attempt.info, _new_client)
    chunks = client.models.generate_content_stream(
        model=request.model, contents=PLACEHOLDER, config=request_config(request, attempt.info, attempt.timeout)
    )
    attempt.on_close(chunks.close)
    asm = Assembler(API, request.provider, request.model, attempt.emit)
    finish: str | None = None
    calls = 0
    try:
        for chunk in chunks:
            if attempt.stopped():
                break
            meta = getattr(chunk, "usage_metadata", None)
            if meta is not None:
                asm.usage = _usage(meta)
                attempt.usage_seen(asm.usage)
            for candidate in (getattr(chunk, "candidates", None) or [])[:1]:
                content = getattr(candidate, "content", None)
                for part in getattr(content, "parts", None) or []:
                    calls += _part_in(asm, part, calls)
                reason = getattr(candidate, "finish_reason", None)
                if reason is not None:
                    finish = str(getattr(reason, "value", reason))
    finally:
        close = getattr(chunks, "close", None)
        if callable(close):
            close()
    if finish is None:
        raise IncompleteStreamError("the Gemini stream ended without a finish reason")
    return asm.finish(STOP_REASONS.get(finish, "error"))


def _signature(part: Any) -> str | None:
    raw = getattr(part, "thought_signature", None)
    if isinstance(raw, bytes) and raw:
        return base64.b64encode(raw).decode("ascii")
    if isinstance(raw, str) and raw:
        return raw
    return None


def _part_in(asm: Assembler, part: Any, calls: int) -> int:
    """Take one response part; returns 1 if it was a function call."""
    call = getattr(part, "function_call", None)
    if call is not None:
        args = getattr(call, "args", None)
        asm.tool_call(
            ("tool", calls),
            getattr(call, "id", None) or f"{MADE_UP_ID}{uuid.uuid4().hex[:20]}",
            getattr(call, "name", None) or "",
            args if isinstance(args, dict) else {},
            thoughtSignature=_signature(part),
        )
        return 1
    text = getattr(part, "text", None)
    if getattr(part, "thought", None):
        asm.thinking(text or "")
        signature = _signature(part)
        if signature:
            asm.set_signature(signature)
    elif isinstance(text, str) and text:
        asm.text(text)
    return 0


def _usage(meta: Any) -> dict[str, Any]:
    prompt = getattr(meta, "prompt_token_count", 0) or 0
    cached = getattr(meta, "cached_content_token_count", 0) or 0
    output = (getattr(meta, "candidates_token_count", 0) or 0) + (getattr(meta, "thoughts_token_count", 0) or 0)
    total = getattr(meta, "total_token_count", 0) or 0
    input_tokens = max(0, prompt - cached)
    return usage(input_tokens, output, cached, 0, total or input_tokens + output + cached)
