"""Amazon Bedrock Converse API (boto3 `bedrock-runtime` converse_stream), with IAM credentials.

Stored → wire: user text/images; consecutive tool results → one user turn of toolResult blocks (images inside,
status "error" for errors); assistant text, toolUse (same ids, made safe for the API), and reasoningContent blocks
only when they came from this API and provider with a signature. Thinking level → additionalModelRequestFields
`thinking` for Anthropic models only. The client comes from `orbital.aws.clients.model_client` (no botocore
retries: the provider layer has the one policy).
"""

from __future__ import annotations

import base64
import re
from typing import TYPE_CHECKING, Any

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
from orbital.agent.providers._types import ModelRequest, ProviderInfo
from orbital.agent.providers.anthropic import safe_id, thinking_params
from orbital.aws.clients import model_client

if TYPE_CHECKING:
    from orbital.agent.providers._runner import Attempt

API = "bedrock-converse-stream"
EMPTY_RESULT = "(no output)"

STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "toolUse",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "guardrail_intervened": "error",
    "content_filtered": "error",
}
IMAGE_FORMATS = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/jpg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}


def is_anthropic_model(model: str) -> bool:
    return bool(re.search(r"anthropic|claude", model, re.IGNORECASE))


def _decode(value: str) -> bytes:
    try:
        return base64.b64decode(value, validate=False)
    except ValueError:
        return value.encode()


def _block(block: dict[str, Any]) -> dict[str, Any]:
    if block["type"] == "text":
        return {"text": block["text"]}
    fmt = IMAGE_FORMATS.get(str(block.get("mimeType") or "").lower())
    if fmt is None:
        return {"text": f"[Image of unsupported type {block.get('mimeType')}]"}
    return {"image": {"format": fmt, "source": {"bytes": _decode(block["data"])}}}


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
            _append(out, "user", made(request, "bedrock.user", message, _user))
        elif role == "toolResult":
            _append(out, "user", made(request, "bedrock.result", message, _tool_result))
        elif same_origin(message, API, request.provider):
            _append(out, "assistant", made(request, "bedrock.assistant.own", message, _own_assistant))
        else:
            _append(out, "assistant", made(request, "bedrock.assistant", message, _assistant))
    return out


def _user(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [_block(b) for b in user_blocks(message)] or [{"text": EMPTY_USER}]


def _tool_result(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = [_block(b) for b in user_blocks(message)] or [{"text": EMPTY_RESULT}]
    result = {
        "toolUseId": safe_id(message["toolCallId"]),
        "content": content,
        "status": "error" if message.get("isError") else "success",
    }
    return [{"toolResult": result}]


def _own_assistant(message: dict[str, Any]) -> list[dict[str, Any]]:
    """An assistant message of this API and provider: its signed reasoning goes back."""
    return _assistant(message, True)


def _assistant(message: dict[str, Any], same: bool = False) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for block in message.get("content") or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            blocks.append({"text": block["text"]})
        elif kind == "thinking" and same:
            if block.get("redacted") and block.get("data"):
                blocks.append({"reasoningContent": {"redactedContent": _decode(block["data"])}})
            elif block.get("thinkingSignature"):
                reasoning = {"text": block.get("thinking") or "", "signature": block["thinkingSignature"]}
                blocks.append({"reasoningContent": {"reasoningText": reasoning}})
        elif kind == "toolCall":
            args = block.get("arguments")
            use = {"toolUseId": safe_id(block["id"]), "name": block.get("name", ""), "input": args or {}}
            if not isinstance(use["input"], dict):
                use["input"] = {}
            blocks.append({"toolUse": use})
    return blocks


def wire_tools(tools: list[dict[str, Any]]) -> dict[str, Any]:
    specs = []
    for tool in tools:
        schema = tool.get("inputSchema")
        spec: dict[str, Any] = {
            "name": tool["name"],
            "inputSchema": {"json": schema if isinstance(schema, dict) else {"type": "object", "properties": {}}},
        }
        if tool.get("description"):
            spec["description"] = tool["description"]
        specs.append({"toolSpec": spec})
    return {"tools": specs}


def build_params(request: ModelRequest, info: ProviderInfo) -> dict[str, Any]:
    limit = max_tokens(request.max_tokens, info)
    thinking = None
    if is_anthropic_model(request.model):
        thinking, limit = thinking_params(request, limit)
    params: dict[str, Any] = {
        "modelId": request.model,
        "messages": wire_messages(request),
        "inferenceConfig": {"maxTokens": limit},
    }
    if request.system:
        params["system"] = [{"text": request.system}]
    if request.tools:
        params["toolConfig"] = wire_tools(request.tools)
    if thinking:
        params["additionalModelRequestFields"] = {"thinking": thinking}
    return params


def run(attempt: Attempt) -> dict[str, Any]:
    request, info = attempt.request, attempt.info
    client = model_client("bedrock-runtime", endpoint_url=info.base_url, region=info.region)
    response = client.converse_stream(**build_params(request, info))
    stream = response["stream"]
    attempt.on_close(stream.close)
    asm = Assembler(API, request.provider, request.model, attempt.emit)
    finished = False
    try:
        for event in stream:
            if attempt.stopped():
                break
            if "contentBlockStart" in event:
                start = event["contentBlockStart"]
                use = (start.get("start") or {}).get("toolUse")
                if use:
                    asm.tool_call(start.get("contentBlockIndex", 0), use.get("toolUseId", ""), use.get("name", ""), "")
            elif "contentBlockDelta" in event:
                _delta(asm, event["contentBlockDelta"])
            elif "messageStop" in event:
                asm.stop_reason = STOP_REASONS.get(event["messageStop"].get("stopReason", ""), "stop")
                finished = True
            elif "metadata" in event:
                raw = event["metadata"].get("usage") or {}
                asm.usage = usage(
                    raw.get("inputTokens", 0),
                    raw.get("outputTokens", 0),
                    raw.get("cacheReadInputTokens", 0),
                    raw.get("cacheWriteInputTokens", 0),
                    raw.get("totalTokens"),
                )
                attempt.usage_seen(asm.usage)
    finally:
        stream.close()
    if not finished:
        raise IncompleteStreamError("the Bedrock stream ended before messageStop")
    return asm.finish()


def _delta(asm: Assembler, event: dict[str, Any]) -> None:
    index = event.get("contentBlockIndex", 0)
    delta = event.get("delta") or {}
    if "text" in delta:
        asm.text(delta["text"], index)
    elif "toolUse" in delta:
        asm.tool_args((delta["toolUse"] or {}).get("input", ""), index)
    elif "reasoningContent" in delta:
        reasoning = delta["reasoningContent"] or {}
        if "text" in reasoning:
            asm.thinking(reasoning["text"], index)
        if reasoning.get("signature"):
            asm.thinking("", index, signature=reasoning["signature"])
        if reasoning.get("redactedContent"):
            data = reasoning["redactedContent"]
            asm.redacted_thinking(
                base64.b64encode(data).decode("ascii") if isinstance(data, bytes) else str(data), index
            )
