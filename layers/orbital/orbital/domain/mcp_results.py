"""An MCP tool result as the agent's result pipeline takes it (ADR 0045).

A node's `tool.result` carries `{content: [blocks]}` where a block is `{type: "text", text}` or `{type: "image",
data, mimeType}` (base64); the agent keeps the text, stores the images and saves a result over its limits
(`agent/tools.py`, `domain/tool_results.py`). `convert` gives an MCP `CallToolResult` (the SDK's model, or its
wire JSON) that shape, so a remote server's result and a node-hosted server's result go through the same pipeline:

- text blocks stay text; images (PNG, JPEG, GIF, WebP) stay images;
- audio, and images of another type, become a text line with their type and size (the pipeline keeps no audio);
- an embedded resource: its text under a line naming its URI; a binary one as an image when it is one, else a line
  with its URI, type and size;
- a resource link: a line with its name, URI and type;
- `structuredContent` is kept as it is, and given as JSON text when the result has no text of its own;
- `isError`: the result's text becomes the call's error.

Everything in a result comes from a stranger: it is data, never instructions, and sizes are capped here (text per
block, the error's length, the JSON of structured content); the 128 KB rules of the pipeline apply after.

Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""The image types the pipeline stores and models read."""
MAX_TEXT_CHARS = 4 * 1024 * 1024
"""The most text kept of one block (a longer one is cut with a marker)."""
MAX_ERROR_CHARS = 4000
"""The most of an error result's text that becomes the call's error."""
MAX_BLOCKS = 200
"""The most content blocks kept of one result."""
NO_CONTENT = "(the tool returned no content)"
FAILED = "the MCP tool reported an error without saying why"


def _size_text(size: int) -> str:
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def _decoded_size(data: str) -> int | None:
    """The size of base64 `data` once decoded, None when it is not base64."""
    try:
        return len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        return None


def _cut(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[… cut: {len(text) - limit} more characters]"


def _one_line(value: Any, limit: int = 300) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _binary(kind: str, data: Any, mime: Any, uri: str | None = None) -> dict[str, Any]:
    """An image block when `data` is a base64 image of a type the pipeline stores, else a line saying what it was."""
    mime_text = mime if isinstance(mime, str) and mime else "application/octet-stream"
    size = _decoded_size(data) if isinstance(data, str) else None
    if size is not None and mime_text.lower() in IMAGE_TYPES:
        return {"type": "image", "data": data, "mimeType": mime_text.lower()}
    where = f" {_one_line(uri)}" if uri else ""
    if size is None:
        return {"type": "text", "text": f"[{kind}{where}: {_one_line(mime_text, 100)}, not valid base64: not shown]"}
    return {
        "type": "text",
        "text": f"[{kind}{where}: {_one_line(mime_text, 100)}, {_size_text(size)}: not shown]",
    }


def _block(block: Any) -> dict[str, Any] | None:
    """One MCP content block as a pipeline block (None for something that is not a block)."""
    if not isinstance(block, dict):
        return None
    kind = block.get("type")
    if kind == "text":
        text = block.get("text")
        return {"type": "text", "text": _cut(text)} if isinstance(text, str) else None
    if kind == "image":
        return _binary("image", block.get("data"), block.get("mimeType"))
    if kind == "audio":
        return _binary("audio", block.get("data"), block.get("mimeType"))
    if kind == "resource":
        return _resource(block.get("resource"))
    if kind == "resource_link":
        name = _one_line(block.get("title") or block.get("name") or "resource")
        uri = _one_line(block.get("uri") or "")
        mime = block.get("mimeType")
        extra = f" ({_one_line(mime, 100)})" if isinstance(mime, str) and mime else ""
        return {"type": "text", "text": f"[resource link] {name}: {uri}{extra}"}
    return {"type": "text", "text": f"[{_one_line(kind, 40)} content: not shown]"}


def _resource(resource: Any) -> dict[str, Any] | None:
    if not isinstance(resource, dict):
        return None
    uri = str(resource.get("uri") or "")
    if isinstance(resource.get("text"), str):
        return {"type": "text", "text": f"[resource {_one_line(uri)}]\n{_cut(resource['text'])}"}
    if "blob" in resource:
        return _binary("resource", resource.get("blob"), resource.get("mimeType"), uri)
    return {"type": "text", "text": f"[resource {_one_line(uri)}: empty]"}


def wire(result: Any) -> dict[str, Any]:
    """The wire JSON of a `CallToolResult` (the SDK's model or already JSON)."""
    if isinstance(result, dict):
        return result
    dump = getattr(result, "model_dump", None)
    if callable(dump):
        found = dump(by_alias=True, mode="json", exclude_none=True)
        return found if isinstance(found, dict) else {}
    return {}


def convert(result: Any) -> tuple[dict[str, Any] | None, str | None]:
    """(result, error) for a `CallToolResult`: `({content, structuredContent?}, None)`, or `(None, the error's text)`
    when `isError` is set."""
    data = wire(result)
    raw = data.get("content")
    items = raw if isinstance(raw, list) else []
    blocks = [b for b in (_block(item) for item in items[:MAX_BLOCKS]) if b is not None]
    if len(items) > MAX_BLOCKS:
        blocks.append({"type": "text", "text": f"[… {len(items) - MAX_BLOCKS} more content blocks not shown]"})
    structured = data.get("structuredContent")
    if data.get("isError") is True:
        texts = [b["text"] for b in blocks if b["type"] == "text" and b["text"].strip()]
        if not texts and structured is not None:
            texts = [json.dumps(structured, ensure_ascii=False)]
        message = "\n".join(texts).strip() or FAILED
        return None, _cut(message, MAX_ERROR_CHARS)
    out: dict[str, Any] = {}
    if structured is not None:
        out["structuredContent"] = structured
        if not any(b["type"] == "text" for b in blocks):
            blocks.insert(0, {"type": "text", "text": _cut(json.dumps(structured, ensure_ascii=False, indent=1))})
    if not blocks:
        blocks = [{"type": "text", "text": NO_CONTENT}]
    out["content"] = blocks
    return out, None
