"""Results too large for one message (pure; shared by the node and the gateway's own MCP calls).

The gateway accepts at most `maxMessageBytes` in one message (`hello-ok.features.limits`; API Gateway's 128 KB when a
gateway does not say), and closes a socket that sends more. A tool result that would not fit is

1. taken whole (`full_output`): the text the tool produced (Bash's and Process's `output`, Read's `content`,
   Process's `log`), the bytes of an image, or the JSON of any other result; at most `SAVE_MAX_BYTES` of it, cut with
   a marker beyond that (Bash's tail is kept, anything else's beginning);
2. saved in the agent workspace, at `gsv:tool-results/{callId}.{ext}` (a node's `NodeAgent` does that with a
   transfer; the agent step writes an MCP server's result itself, `orbital.tools.mcp_calls`), and
3. cut to fit (`fit_tool_result`): a preview with `truncated: true`, `fullOutput: {path, bytes}` and a `note` that
   says where the whole result is and how to read it in parts, or why it could not be saved. Bash's output keeps
   its tail, any other text its beginning (whole lines), lists their first items.

A `logs.result` keeps its newest lines that fit (`fit_logs_result`).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ENVELOPE_BYTES = 2048
"""Room for what is not `params` in the request that carries them, and for the larger frame the gateway may carry a
result on in (its reply to a client's tool.invoke, under the client's frame id)."""
SAVE_MAX_BYTES = 32 * 1024 * 1024
"""The most of one result that is saved; beyond it the saved file is cut, with a marker saying so."""
TAIL_FIELDS = frozenset({"output", "tail"})
"""Text fields whose end matters most (a command's output, and its last lines): cut from the front."""
TEXT_FIELDS = ("output", "content", "log")
"""Fields that hold what a tool produced, in the order they are looked for."""
IMAGE_EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp"}
NOT_FIELDS = frozenset({"truncated", "note", "fullOutput"})
"""Fields added to a cut result: never cut themselves."""


def encoded_size(params: Any) -> int:
    """The size of `params` in a request as the node sends it (`json.dumps` escapes every non-ASCII character, so
    characters are bytes), with room for the envelope."""
    return len(json.dumps(params)) + ENVELOPE_BYTES


def too_large(params: dict[str, Any], limit: int | None) -> bool:
    return limit is not None and encoded_size(params) > limit


@dataclass(frozen=True)
class FullOutput:
    """What of an oversized result is saved."""

    data: bytes
    extension: str
    size: int
    """The size of the whole output in bytes (more than `len(data)` when it was cut at `SAVE_MAX_BYTES`)."""


@dataclass(frozen=True)
class Saved:
    """How saving a full output went: where it is (`path`, `gsv:...`), or why it is not (`error`)."""

    output: FullOutput
    path: str | None = None
    error: str | None = None


def full_output(result: Any, cap: int = SAVE_MAX_BYTES) -> FullOutput:
    """The whole of a result, as the file to save."""
    if isinstance(result, dict):
        for name in TEXT_FIELDS:
            if isinstance(result.get(name), str):
                return _text_output(result[name], "txt", cap, tail=name in TAIL_FIELDS)
        image = _image(result.get("content"))
        if image is not None:
            return FullOutput(image[0], image[1], len(image[0]))
    if isinstance(result, str):
        return _text_output(result, "txt", cap, tail=False)
    return _text_output(json.dumps(result, ensure_ascii=False, indent=1), "json", cap, tail=False)


def _image(content: Any) -> tuple[bytes, str] | None:
    if not isinstance(content, list):
        return None
    for block in content:
        if isinstance(block, dict) and block.get("type") == "image" and isinstance(block.get("data"), str):
            extension = IMAGE_EXTENSIONS.get(str(block.get("mimeType")))
            if extension is None:
                return None
            try:
                return base64.b64decode(block["data"], validate=True), extension
            except (binascii.Error, ValueError):
                return None
    return None


def _text_output(text: str, extension: str, cap: int, *, tail: bool) -> FullOutput:
    data = text.encode("utf-8", "replace")
    size = len(data)
    if size <= cap:
        return FullOutput(data, extension, size)
    if tail:
        start = size - cap
        while start < size and data[start] & 0xC0 == 0x80:  # not inside a character
            start += 1
        marker = f"[orbital: cut here: the output was {size} bytes; this file keeps its last {size - start}]\n"
        return FullOutput(marker.encode() + data[start:], extension, size)
    end = cap
    while end > 0 and data[end] & 0xC0 == 0x80:
        end -= 1
    marker = f"\n[orbital: cut here: the output was {size} bytes; this file keeps its first {end}]\n"
    return FullOutput(data[:end] + marker.encode(), extension, size)


# -- fitting ----------------------------------------------------------------------------------------------------


def note_for(saved: Saved | None, tool: Any = None) -> str:
    """What a cut result says about the rest."""
    if saved is None:
        return "Only part of the result is shown: the whole is too large for one message."
    size = saved.output.size
    text = f"Only part of the result is shown: the whole is {size} bytes, too large for one message."
    if saved.path is not None and saved.output.extension in IMAGE_EXTENSIONS.values():
        text += (
            f" The image is saved in the agent workspace at {saved.path} (not text: gsv__Transfer copies it to a node)."
        )
    elif saved.path is not None:
        relative = saved.path.removeprefix("gsv:")
        text += (
            f" The full output is saved in the agent workspace at {saved.path}; read it in parts with gsv__ReadFile"
            f' (path "{relative}", offset and limit in bytes; `nextOffset` says where to go on), or workspace.read.'
        )
        if len(saved.output.data) < size:
            text += f" That file keeps {SAVE_MAX_BYTES // (1024 * 1024)} MiB of it (the rest is cut, as it says)."
    else:
        text += f" Saving the full output in the agent workspace failed: {saved.error}."
    if tool == "Read":
        text += " Read takes offset and limit (lines) to read on after the last line shown."
    return text


def fit_tool_result(
    params: dict[str, Any], limit: int | None, saved: Saved | None = None, tool: Any = None
) -> dict[str, Any]:
    """A tool.result within `limit` bytes: unchanged if it fits, else a preview of the result with a note (and,
    when it was saved, a pointer to the whole), or, for an error, its beginning."""
    if limit is None or encoded_size(params) <= limit:
        return params
    call_id = params.get("callId")
    if "result" not in params:
        error = params.get("error")
        return _fit_error(call_id, error if isinstance(error, str) else json.dumps(error), limit)
    result = params["result"]
    note = note_for(saved, tool)
    extra: dict[str, Any] = {"truncated": True, "note": note}
    if saved is not None and saved.path is not None:
        extra["fullOutput"] = {"path": saved.path, "bytes": len(saved.output.data)}

    def build(candidate: Any) -> dict[str, Any]:
        return {"callId": call_id, "result": candidate}

    fitted: Any = None
    if isinstance(result, dict):
        base = {**result, **extra}
        content = result.get("content")
        if isinstance(content, list):  # structured (an image): the note goes where the model reads it
            base["content"] = [_note_block(block, note) for block in content]
        fitted = _fit_fields(base, build, limit)
        if fitted is not None and isinstance(result.get("lines"), int) and isinstance(fitted.get("content"), str):
            shown = fitted["content"]
            fitted["lines"] = shown.count("\n") + 1 if shown else 0
    elif isinstance(result, str):
        fitted = _fit_text(result, lambda piece: build(f"{piece}\n\n[{note}]"), limit, tail=False)
        fitted = None if fitted is None else f"{fitted}\n\n[{note}]"
    elif isinstance(result, list):
        fitted = _fit_fields({"items": result, **extra}, build, limit)
    if fitted is None and fits(build(extra), limit):
        fitted = dict(extra)
    if fitted is not None:
        return build(fitted)
    message = f"Tool result too large to send ({encoded_size(params)} bytes; the gateway allows {limit}). {note}"
    return _fit_error(call_id, message, limit)


def fits(params: dict[str, Any], limit: int) -> bool:
    return encoded_size(params) <= limit


def _note_block(block: Any, note: str) -> Any:
    if isinstance(block, dict) and block.get("type") == "image":
        return {"type": "text", "text": f"[image ({block.get('mimeType')}) not shown] {note}"}
    return block


def _fit_error(call_id: Any, text: str, limit: int) -> dict[str, Any]:
    marker = f" [... cut: the error was {len(text.encode('utf-8', 'replace'))} bytes]"

    def build(piece: str) -> dict[str, Any]:
        return {"callId": call_id, "error": piece + marker}

    if fits({"callId": call_id, "error": text}, limit):
        return {"callId": call_id, "error": text}
    piece = _fit_text(text, build, limit, tail=False)
    return build(piece or "")


def _fit_fields(result: dict[str, Any], build: Callable[[Any], dict[str, Any]], limit: int) -> dict[str, Any] | None:
    """Shrink the text and list fields of `result` until it fits, the largest first: to the most that fits beside
    the others, or, when nothing of it does, to half its length before looking again. None if it cannot fit."""
    current = dict(result)
    while not fits(build(current), limit):
        sizes = [
            (len(json.dumps(value)), name)
            for name, value in current.items()
            if name not in NOT_FIELDS and isinstance(value, str | list) and value
        ]
        if not sizes:
            return None
        _, name = max(sizes)
        value = current[name]
        tail = name in TAIL_FIELDS

        def with_field(piece: Any, name: str = name) -> dict[str, Any]:
            return build({**current, name: piece})

        if isinstance(value, str):
            text = _fit_text(value, with_field, limit, tail=tail)
            half = len(value) // 2
            current[name] = text if text is not None else value[len(value) - half :] if tail and half else value[:half]
        else:
            count = _fit_count(len(value), _prefixes(value, with_field), limit)
            current[name] = value[:count] if count or fits(with_field([]), limit) else value[: len(value) // 2]
    return current


def _prefixes(items: list[Any], build: Callable[[Any], dict[str, Any]]) -> Callable[[int], dict[str, Any]]:
    return lambda n: build(items[:n])


def _fit_count(total: int, build: Callable[[int], dict[str, Any]], limit: int) -> int:
    """The largest n <= total for which build(n) fits (0 if none does)."""
    low, high = 0, total
    while low < high:
        mid = (low + high + 1) // 2
        if fits(build(mid), limit):
            low = mid
        else:
            high = mid - 1
    return low


def _fit_text(text: str, build: Callable[[str], dict[str, Any]], limit: int, *, tail: bool) -> str | None:
    """The longest beginning (or end, `tail`) of `text` for which build(piece) fits, cut at a line break when the
    piece holds one; None if not even an empty piece fits."""
    if not fits(build(""), limit):
        return None

    def piece(n: int) -> str:
        if tail:
            return text[len(text) - n :] if n else ""
        return text[:n]

    n = _fit_count(min(len(text), limit), lambda n: build(piece(n)), limit)
    kept = piece(n)
    if n < len(text):
        if tail and "\n" in kept[:-1]:
            kept = kept[kept.index("\n") + 1 :]
        elif not tail and "\n" in kept:
            kept = kept[: kept.rindex("\n")]
    return kept


def fit_logs_result(params: dict[str, Any], limit: int | None) -> dict[str, Any]:
    """Drop the oldest lines of a logs.result until it fits the connection's message limit."""
    lines = params.get("lines")
    if limit is None or not isinstance(lines, list) or encoded_size(params) <= limit:
        return params
    budget = limit - encoded_size({**params, "lines": []})
    kept: list[str] = []
    for line in reversed(lines):
        cost = len(json.dumps(line)) + 2
        if cost > budget:
            break
        budget -= cost
        kept.append(line)
    kept.reverse()
    return {**params, "lines": kept, "truncated": True}
