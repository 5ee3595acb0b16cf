"""A run's events as WindieOS's events of the turn that started it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orbital.agent import client_tools
from orbital.dialects import approval_answers
from orbital.dialects.detect import WINDIE
from orbital.dialects.windie.common import (
    MAX_EVENT_BYTES,
    router,
)
from orbital.dialects.windie.frames import _numbered
from orbital.domain.config import as_dict
from orbital.domain.messages import text_of
from orbital.store.subscriptions import Subscription

if TYPE_CHECKING:
    from orbital.ports.services import Services


def _cut(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore") + " [truncated: the whole of it is in the session's transcript]"


def _thinking_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if not isinstance(content, list):
        return ""
    return "".join(str(b.get("thinking") or "") for b in content if isinstance(b, dict) and b.get("type") == "thinking")


@router.run_events(WINDIE)
def encode(services: Services, sub: Subscription, payload: dict[str, Any]) -> list[Any]:
    """WindieOS's events for one event of a run (see the module docstring). Once `stop-query` dropped the
    subscription, nothing more: numbering an event finds it gone (`_numbered`)."""
    if sub.scratch.get("stopped") or sub.scratch.get("closed") or approval_answers.held(sub, payload):
        return []
    if payload.get("state") == "paused":  # the prompt is the turn's reply: it completes; the next query answers it
        prompt = approval_answers.prompt_of(payload)
        frames = _numbered(
            services,
            sub,
            [("streaming-response", {"text": prompt}), ("streaming-complete", {"final_response": prompt})],
        )
        approval_answers.end_turn(services, sub)
        return frames
    return _numbered(services, sub, _events_of(sub.ref, payload))


def _events_of(ref: dict[str, Any], payload: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    state = payload.get("state")
    if state == "delta":
        return [("streaming-response", {"text": str(payload.get("text") or "")})]
    if state == client_tools.CALL_STATE:
        body = {
            "tool_name": payload.get("toolName"),
            "parameters": as_dict(payload.get("arguments")),
            "request_id": payload.get("callId"),
            "metadata": {"tool_call_id": payload.get("toolCallId")},
        }
        return [("tool-call", body)]
    if state == "toolResult":
        if payload.get("onClient"):
            return []  # the client ran it: it has the result (a backend tool of the same name is reported)
        failed = bool(payload.get("isError"))
        output = _cut(str(payload.get("content") or ""), MAX_EVENT_BYTES // 2)
        body = {
            "tool_name": payload.get("toolName"),
            "success": not failed,
            "execution_time": 0,
            "output": output,
            "error": output if failed else None,
            "metadata": {"tool_call_id": payload.get("toolCallId")},
        }
        return [("tool-output", body)]
    if state == "usage":
        usage = as_dict(payload.get("usage"))
        prompt = int(usage.get("input") or 0) + int(usage.get("cacheRead") or 0) + int(usage.get("cacheWrite") or 0)
        output_tokens = int(usage.get("output") or 0)
        body = {
            "prompt_tokens": prompt,
            "visible_output_tokens": output_tokens,
            "thinking_tokens": None,
            "output_tokens_total": output_tokens,
            "total_tokens": int(usage.get("totalTokens") or prompt + output_tokens),
            "conversation_tokens": prompt + output_tokens,
            "usage_source": "provider",
        }
        return [("token-count", body)]
    if state == "final":
        message = as_dict(payload.get("message"))
        text = text_of(message)
        events: list[tuple[str, dict[str, Any]]] = []
        thinking = _thinking_of(message)
        if thinking:
            events.append(("llm-thought", {"status": _cut(thinking, MAX_EVENT_BYTES // 2)}))
        fits = len(text.encode()) <= MAX_EVENT_BYTES - 4096
        if fits:
            events.append(("assistant-message-full", {"content": text}))
        events.append(("streaming-complete", {"final_response": text} if fits else {}))
        return events
    if state == "error":
        reason = str(payload.get("error") or "The run failed")
        return [("error", {"message": _cut(reason, 4096), "turn_ref": ref.get("turn")})]
    return []
