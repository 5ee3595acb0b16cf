"""The content of a stored user message built from a run's text and media (spec §5.3 `buildUserMessage`).

    build_user_content(services, config, text, media) -> str | list[block]

Without image, audio or document attachments the content is the text (`"[Empty message]"` when empty). Otherwise
it is a list of blocks, in this order:

* the text, unless empty or exactly `"[Media]"` (a channel's placeholder for a caption-less attachment);
* each image as a reference `{type:"image", r2Key, mimeType}` (inline `data` when it was never stored), hydrated
  before the model call (`orbital.agent.media`);
* each voice message as `"[Voice message transcription: …]"` — transcribed here when it is stored and has no
  transcription yet — or `"[Voice message received - transcription unavailable]"`, followed once per message by a
  note when no transcription service is usable at all;
* each document as `"[Document attached: {filename|document}{ (NKB)}, type: {mime}]"` (the model gets the note,
  not the file);
* an attachment that carries an `error` (too large, not stored) as `"[Attachment not available: {error}]"`.

Video is ignored entirely, and so is an image with neither a reference nor data; a list that would be empty is
`"[Media message]"`.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

from orbital.agent import transcribe as transcription

if TYPE_CHECKING:
    from orbital.ports.services import Services

log = logging.getLogger("orbital.agent.user_content")

EMPTY = "[Empty message]"
MEDIA_PLACEHOLDER = "[Media]"
MEDIA_FALLBACK = "[Media message]"
UNTRANSCRIBED = "[Voice message received - transcription unavailable]"
SHOWN_TYPES = frozenset({"image", "audio", "document"})


def transcribed(text: str) -> str:
    return f"[Voice message transcription: {text}]"


def unavailable(error: Any) -> str:
    return f"[Attachment not available: {error}]"


def document_note(entry: dict[str, Any]) -> str:
    """`[Document attached: report.pdf (12KB), type: application/pdf]`; the size rounded half up to whole KB and
    left out when unknown or zero."""
    name = entry.get("filename") or "document"
    size = entry.get("size")
    shown = ""
    if isinstance(size, int | float) and not isinstance(size, bool) and size and math.isfinite(size):
        shown = f" ({math.floor(size / 1024 + 0.5)}KB)"
    return f"[Document attached: {name}{shown}, type: {entry.get('mimeType')}]"


def _text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def _image(entry: dict[str, Any]) -> dict[str, Any] | None:
    """The image block of an attachment; None for one with neither a reference nor data (nothing to show)."""
    mime = entry.get("mimeType") or "image/png"
    if entry.get("r2Key"):
        return {"type": "image", "r2Key": entry["r2Key"], "mimeType": mime}
    if isinstance(entry.get("data"), str) and entry["data"]:
        return {"type": "image", "data": entry["data"], "mimeType": mime}
    return None


class _Voice:
    """Transcribes the voice messages of one message; knows once whether any transcriber is usable."""

    def __init__(self, services: Services | None, config: dict[str, Any]) -> None:
        self.services = services
        self.config = config
        self._reason: str | None = None
        self._checked = False
        self.noted = False

    def reason(self) -> str | None:
        if not self._checked:
            self._checked = True
            self._reason = (
                "no transcription service is available"
                if self.services is None
                else transcription.unavailable_reason(self.services, self.config)
            )
        return self._reason

    def blocks(self, entry: dict[str, Any]) -> list[dict[str, Any]]:
        given = entry.get("transcription")
        if isinstance(given, str) and given.strip():
            return [_text(transcribed(given.strip()))]
        if entry.get("error") and not entry.get("r2Key"):
            return [_text(unavailable(entry["error"]))]
        text = None
        if entry.get("r2Key") and self.reason() is None and self.services is not None:
            text = transcription.transcribe(
                self.services, self.config, str(entry["r2Key"]), str(entry.get("mimeType") or "")
            )
        if text:
            return [_text(transcribed(text))]
        out = [_text(UNTRANSCRIBED)]
        reason = self.reason()
        if reason and not self.noted:
            self.noted = True
            out.append(_text(f"({reason})"))
        return out


def build_user_content(
    services: Services | None, config: dict[str, Any] | None, text: str, media: list[dict[str, Any]] | None
) -> str | list[dict[str, Any]]:
    """Spec §5.3 with stored references (see the module docstring). `services` None: nothing is transcribed."""
    text = text or ""
    entries = [m for m in (media or []) if isinstance(m, dict) and m.get("type") in SHOWN_TYPES]
    if not entries:
        return text or EMPTY
    blocks: list[dict[str, Any]] = []
    if text and text != MEDIA_PLACEHOLDER:
        blocks.append(_text(text))
    for entry in entries:
        if entry["type"] == "image":
            block = _text(unavailable(entry["error"])) if _broken(entry) else _image(entry)
            if block is not None:
                blocks.append(block)
    voice = _Voice(services, config or {})
    for entry in entries:
        if entry["type"] == "audio":
            blocks.extend(voice.blocks(entry))
    for entry in entries:
        if entry["type"] == "document":
            blocks.append(_text(unavailable(entry["error"]) if _broken(entry) else document_note(entry)))
    return blocks or [_text(MEDIA_FALLBACK)]


def _broken(entry: dict[str, Any]) -> bool:
    """An attachment reported with an error and nothing to show in its place."""
    return bool(entry.get("error")) and not entry.get("r2Key") and not entry.get("data")
