"""Media types: the file extension a stored object gets for its type, the container format speech-to-text services are
told for a sound, the type S3 is told, and metadata text S3 accepts. Shared by channel attachments, uploaded artifacts
(which live in the same media store) and transcription."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

EXTENSIONS = {
    "image/jpeg": "jpg",
    "image/jpg": "jpg",
    "image/png": "png",
    "image/gif": "gif",
    "image/webp": "webp",
    "image/svg+xml": "svg",
    "audio/ogg": "ogg",
    "audio/opus": "opus",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
    "audio/mp4": "m4a",
    "audio/m4a": "m4a",
    "audio/x-m4a": "m4a",
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/webm": "webm",
    "audio/flac": "flac",
    "audio/x-flac": "flac",
    "audio/amr": "amr",
    "video/mp4": "mp4",
    "video/webm": "webm",
    "video/quicktime": "mov",
    "application/pdf": "pdf",
    "application/msword": "doc",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
}
"""File extension of a stored attachment by media type; anything else is stored as `.bin`."""

_METADATA_SAFE = " !#$&'()*+,-./:;=?@[]^_`{|}~"
"""Printable ASCII kept as is in object metadata (everything else is percent-encoded; `%` itself is encoded)."""
_METADATA_LIMIT = 512


def base_type(mime_type: Any) -> str:
    """`"Audio/OGG; codecs=opus"` → `"audio/ogg"`."""
    if not isinstance(mime_type, str):
        return ""
    return mime_type.split(";", 1)[0].strip().lower()


def extension(mime_type: Any) -> str:
    return EXTENSIONS.get(base_type(mime_type), "bin")


def audio_format(mime_type: Any) -> str | None:
    """The container format of a sound (an `audio/*` type or `video/mp4`) as OpenAI's file names and Amazon
    Transcribe's MediaFormat name it: its file extension, but `ogg` for Opus, which travels in Ogg. None for any
    other type."""
    base = base_type(mime_type)
    found = EXTENSIONS.get(base)
    if found is None or not (base.startswith("audio/") or base == "video/mp4"):
        return None
    return "ogg" if found == "opus" else found


def metadata_text(value: str) -> str:
    """A metadata value S3 accepts (ASCII only), reversible with `urllib.parse.unquote`, of bounded length."""
    encoded = quote(value, safe=_METADATA_SAFE)
    if len(encoded) > _METADATA_LIMIT:
        encoded = encoded[:_METADATA_LIMIT]
        cut = encoded.rfind("%", len(encoded) - 2)
        if cut != -1:  # do not leave half an escape at the end
            encoded = encoded[:cut]
    return encoded


def content_type(mime_type: Any) -> str:
    base = base_type(mime_type)
    if not base or not base.isascii() or "/" not in base or any(c.isspace() for c in base):
        return "application/octet-stream"
    return base
