"""What the gateway reads out of a stored message (GSV's message shapes: `content` a string or a list of blocks)."""

from __future__ import annotations

from typing import Any


def text_of(message: dict[str, Any]) -> str:
    """The message's text: its string content, or its text blocks joined (tool calls, images and thinking left out)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


def gateway_note(text: str, reason: str, now_ms: int) -> dict[str, Any]:
    """An assistant message the gateway writes itself (an iteration cap, a budget, a spend alert): `model` says why,
    no usage."""
    return {
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "api": "orbital",
        "provider": "orbital",
        "model": reason,
        "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0, "cost": {}},
        "stopReason": "stop",
        "timestamp": now_ms,
    }
