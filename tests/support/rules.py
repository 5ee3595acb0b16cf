"""A rule-following responder for the scripted fake LLM, as the dialects' acceptance checks describe their mock:

- the last user message `reply with exactly: X` → a reply `X`;
- `TOOL:name {json}` → a call of tool `name` with those arguments, then (once its result is in the request) a reply
  with the result's text (or X, when the result says `reply with exactly: X`), so a client-side tool's output comes
  back as the answer;
- anything else → a reply `ok`.

Install with `llm.responder = rules.respond` (a scripted item, if any, still wins when the responder returns None:
it never does, so script the exceptions with `llm.responder = None`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests.support.fake_llm import Item, Request, call, reply

_EXACT = re.compile(r"reply with exactly:\s*(.+)", re.DOTALL)
_TOOL = re.compile(r"^TOOL:(\S+)\s*(.*)$", re.DOTALL)


def _messages(request: Request) -> list[dict[str, Any]]:
    body = request.body if isinstance(request.body, dict) else {}
    found = body.get("messages")
    return found if isinstance(found, list) else []


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def respond(request: Request) -> Item:
    """The answer to one OpenAI-wire request (the dialect tests configure the `openai` provider)."""
    messages = _messages(request)
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":  # a tool's result came back: answer with it (or as it says)
        result = _text(last.get("content")).strip()
        told = _EXACT.search(result)
        return reply(told.group(1).strip() if told is not None else result or "ok")
    user = next((m for m in reversed(messages) if m.get("role") == "user"), {})
    text = _text(user.get("content")).strip()
    tool = _TOOL.match(text)
    if tool is not None:
        raw = tool.group(2).strip() or "{}"
        try:
            arguments = json.loads(raw)
        except ValueError:
            arguments = {}
        return reply(tool_calls=[call(tool.group(1), arguments if isinstance(arguments, dict) else {})])
    exact = _EXACT.search(text)
    if exact is not None:
        return reply(exact.group(1).strip())
    return reply("ok")
