"""Inbound channel attachments into the session's media store (spec §12.3 step 9, §12.6).

    store_attachments(services, session_key, media) -> media

An inbound attachment is `{type: "image"|"audio"|"document"|"video", mimeType, data?: base64, filename?, size?,
duration?, transcription?, error?}`. Each one that carries `data` is written to `media/{sessionKey}/{uuid}.{ext}` and
comes back as a reference, `{type, mimeType, r2Key, filename?, size, duration?, transcription?}`, so a run input
never carries the bytes. Attachments over 25 MB are not stored and come back with `error: "Media file too large
(X.XMB > 25MB limit)"`; one that cannot be decoded or stored comes back without its data and with an `error` note.
A stored attachment takes the type its bytes show (`sniff.stored_kind`): one declared as an image whose bytes are
none is stored as a document of type `application/octet-stream`. Video is passed on without its data and never
stored: the model is never shown video (§5.3). Entries without data
(already stored, or reported broken by the channel) are passed on unchanged.
"""

from __future__ import annotations

import base64
import binascii
import logging
import math
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from orbital.domain import sniff
from orbital.domain.media_types import content_type, extension, metadata_text
from orbital.store import keys

if TYPE_CHECKING:
    from orbital.ports.services import Services

log = logging.getLogger("orbital.channels.media")

MAX_MEDIA_BYTES = 25 * 1024 * 1024
"""Attachments larger than this are refused (spec §12.6)."""

KEPT_FIELDS = ("filename", "duration", "transcription")
"""Optional fields carried over from an inbound attachment to its stored reference."""

NOT_STORED = "Media could not be stored"
NOT_DECODED = "Media data could not be decoded"


def too_large_error(size: int) -> str:
    return f"Media file too large ({size / (1024 * 1024):.1f}MB > 25MB limit)"


def _number(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return int(value)


def _estimated_size(data: str) -> int:
    """The decoded size of base64 text, from its length (line breaks aside) without decoding it."""
    return (len(data) - data.count("\n") - data.count("\r")) * 3 // 4


def _decode(data: str) -> bytes:
    """Base64 text (a `data:` URL's payload too), whitespace ignored; raises ValueError when it is not base64."""
    if data.startswith("data:") and "," in data[:256]:
        data = data.split(",", 1)[1]
    return base64.b64decode("".join(data.split()), validate=True)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _without_data(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k != "data"}


def _refused(entry: dict[str, Any], error: str, size: int | None) -> dict[str, Any]:
    out = _without_data(entry)
    out.pop("r2Key", None)
    if size is not None:
        out["size"] = size
    out["error"] = error
    return out


def _store_one(services: Services, session_key: str, entry: dict[str, Any]) -> dict[str, Any]:
    data = entry["data"]
    mime = entry.get("mimeType")
    declared = _number(entry.get("size"))
    if not isinstance(data, str):
        return _refused(entry, NOT_DECODED, declared)
    # refuse before decoding: a declared size or the text's length already tells
    if declared is not None and declared > MAX_MEDIA_BYTES:
        return _refused(entry, too_large_error(declared), declared)
    estimate = _estimated_size(data)
    if estimate > MAX_MEDIA_BYTES + 2:
        return _refused(entry, too_large_error(estimate), estimate)
    try:
        body = _decode(data)
    except (binascii.Error, ValueError):
        return _refused(entry, NOT_DECODED, declared)
    if len(body) > MAX_MEDIA_BYTES:
        return _refused(entry, too_large_error(len(body)), len(body))

    filename = entry.get("filename")
    kind, mime = sniff.stored_kind(str(entry.get("type")), body[: sniff.HEAD_BYTES], _text(mime), _text(filename))
    key = keys.session_media(session_key, f"{uuid.uuid4()}.{extension(mime)}")
    metadata = {
        "uploadedAt": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "sessionKey": metadata_text(session_key),
    }
    if isinstance(filename, str) and filename:
        metadata["originalFilename"] = metadata_text(filename)
    try:
        services.workspace.put(key, body, content_type=content_type(mime), metadata=metadata)
    except Exception as exc:
        log.warning("storing a %s attachment of %s failed: %s", entry.get("type"), session_key, type(exc).__name__)
        return _refused(entry, NOT_STORED, len(body))

    stored: dict[str, Any] = {"type": kind, "mimeType": mime, "r2Key": key}
    for name in KEPT_FIELDS:
        if entry.get(name) is not None:
            stored[name] = entry[name]
    stored["size"] = len(body)
    return stored


def store_attachments(services: Services, session_key: str, media: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Store every attachment that carries inline data and return the list with references in their place (see the
    module docstring). Never raises for a single attachment: a failure becomes that entry's `error`."""
    out: list[dict[str, Any]] = []
    for entry in media or []:
        if not isinstance(entry, dict):
            continue
        if entry.get("type") == "video":
            out.append(_without_data(entry))
        elif entry.get("data") is None:
            out.append(dict(entry))
        elif entry.get("r2Key"):  # stored already: the inline copy is not needed
            out.append(_without_data(entry))
        else:
            out.append(_store_one(services, session_key, entry))
    return out
