"""Client tools' results (`tool-result`, `tool-bundle-result`)."""

from __future__ import annotations

import base64
import binascii
import json
from typing import TYPE_CHECKING, Any

from orbital.agent import client_tools
from orbital.dialects.windie.common import (
    MAX_REF_CHARS,
    MAX_TOOL_IMAGE_BYTES,
    _InvalidFrameError,
    log,
)
from orbital.dialects.windie.frames import _WindieSocket
from orbital.domain import sniff
from orbital.domain.config import as_dict
from orbital.engines import deferred
from orbital.store import artifacts, keys

if TYPE_CHECKING:
    from orbital.ports.services import Services


def _tool_result(services: Services, sock: _WindieSocket, rid: Any, payload: dict[str, Any]) -> list[Any]:
    request_id = payload.get("request_id")
    if not isinstance(request_id, str) or not request_id or len(request_id) > MAX_REF_CHARS:
        raise _InvalidFrameError("request_id is required")
    found = deferred.get(services, request_id)
    owner = client_tools.owner(sock.conn.connection_id)
    if found is None or found.call.kind != deferred.CLIENT_TOOL or found.call.node_id != owner:
        raise _InvalidFrameError("Unknown request_id")
    if found.state != deferred.PENDING:
        return []  # late (timed out, stopped): dropped
    deferred.settle(services, request_id, _outcome(services, sock, payload))
    return []


def _outcome(services: Services, sock: _WindieSocket, payload: dict[str, Any]) -> dict[str, Any]:
    """A `tool-result` as a tool call's outcome: its output text, with the screenshot (an artifact, or inline, kept
    as one) as a reference to that artifact; `success: false` as an error."""
    data = as_dict(payload.get("data"))
    output = data.get("output")
    text = output if isinstance(output, str) else ("" if output is None else json.dumps(output, ensure_ascii=False))
    if payload.get("success") is not True:
        error = payload.get("error")
        message = error if isinstance(error, str) and error else text or "The tool failed on the client"
        return {"error": message}
    text = text or "(no output)"
    image, note = _result_image(services, sock, data)
    if note:
        text = f"{text}\n[{note}]"
    if image is None:
        return {"result": text}
    return {"result": {"content": [{"type": "text", "text": text}, image]}}


def _too_large(size: int) -> str:
    return f"screenshot left out: {size} bytes, over the {MAX_TOOL_IMAGE_BYTES} a model takes"


def _result_image(services: Services, sock: _WindieSocket, data: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """A tool result's screenshot as an image referencing an artifact (an inline one is stored as one first, owned
    by the socket's user), never its bytes: a tool result is stored with the session and sent with every later
    model call. (None, why) when there is none, or it is not usable: missing, not the user's, not an image, over
    `MAX_TOOL_IMAGE_BYTES`."""
    ref = data.get("screenshot_ref")
    if isinstance(ref, str):
        head = artifacts.head(services.workspace, ref)
        if head is not None and head.readable_by(sock.reader) and head.content_type.startswith("image/"):
            if head.size_bytes > MAX_TOOL_IMAGE_BYTES:
                return None, _too_large(head.size_bytes)
            return {"type": "image", "r2Key": keys.media_object(head.artifact_id), "mimeType": head.content_type}, ""
        log.warning("tool screenshot %s is not available; going on without it", ref[:80])
    inline = data.get("screenshot")
    if isinstance(inline, str) and inline:
        encoded = inline.split(",", 1)[-1] if inline.startswith("data:") else inline
        if len(encoded) > (MAX_TOOL_IMAGE_BYTES * 4) // 3 + 4:  # too large, without decoding it
            return None, _too_large(len(encoded) * 3 // 4)
        try:
            raw = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            log.warning("an inline tool screenshot was not base64; going on without it")
            return None, ""
        mime = sniff.sniff_mime(raw) or "image/png"
        if not mime.startswith("image/") or not raw:
            return None, ""
        if len(raw) > MAX_TOOL_IMAGE_BYTES:
            return None, _too_large(len(raw))
        owner = sock.reader or artifacts.PRIVATE_OWNER  # never public media: the client did not upload it
        saved = artifacts.save(services.workspace, raw, owner=owner, mime_type=mime, filename="tool-screenshot")
        return {"type": "image", "r2Key": keys.media_object(saved.artifact_id), "mimeType": saved.content_type}, ""
    return None, ""


def _bundle_result(services: Services, sock: _WindieSocket, rid: Any, payload: dict[str, Any]) -> list[Any]:
    return []  # bundles are never sent, so their results answer nothing
