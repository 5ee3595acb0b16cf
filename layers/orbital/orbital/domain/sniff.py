"""Content sniffing shared by the node's Read tool and transfers and the files xeno clients attach: MIME from magic
numbers, then from the file name."""

from __future__ import annotations

import mimetypes

IMAGE_MIMES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


def sniff_mime(head: bytes) -> str | None:
    """MIME type recognised from the first bytes of a file, or None."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(head) >= 12 and head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "image/webp"
    if head.startswith(b"%PDF-"):
        return "application/pdf"
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")):
        return "application/zip"
    if head.startswith(b"\x1f\x8b"):
        return "application/gzip"
    return None


def guess_mime(head: bytes, name: str) -> str | None:
    """Magic numbers first, then the extension; None when neither says anything."""
    return sniff_mime(head) or mimetypes.guess_type(name, strict=False)[0]


def human_size(size: int) -> str:
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / (1024 * 1024):.1f} MB"
