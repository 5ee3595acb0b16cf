"""Content sniffing shared by the node's Read tool and transfers, the files xeno clients attach and the media the
gateway stores and serves: MIME from magic numbers, then from the file name.

Stored media take the type their bytes show, not the one a client declared (`checked_type`): bytes declared as an
image but not recognisably PNG, JPEG, GIF or WebP are kept as `application/octet-stream`, so nothing but an image is
ever stored or served as one (`image_type`)."""

from __future__ import annotations

import mimetypes

IMAGE_MIMES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
OCTET_STREAM = "application/octet-stream"
HEAD_BYTES = 64
"""How many leading bytes sniffing needs."""


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


def _base(mime: str | None) -> str:
    return (mime or "").split(";", 1)[0].strip().lower()


def checked_type(declared: str | None, head: bytes, name: str | None = None) -> str:
    """The type to store bytes starting with `head` under: what the bytes show when they are a known kind; else the
    declared type (or the name's), except that a claim to be an image the bytes do not bear out, or no type at all,
    is `application/octet-stream`."""
    sniffed = sniff_mime(head)
    if sniffed:
        return sniffed
    claimed = declared if declared and declared.strip() else None
    if claimed is None and name:
        claimed = mimetypes.guess_type(name, strict=False)[0]
    if not claimed or _base(claimed).startswith("image/"):
        return OCTET_STREAM
    return claimed.strip()


def stored_kind(kind: str, head: bytes, declared: str | None, name: str | None = None) -> tuple[str, str]:
    """An attachment's kind and type as stored: `checked_type`, and an "image" whose bytes are not one becomes a
    "document" (the model is told a file was attached; nothing shows it as a picture)."""
    mime = checked_type(declared, head, name)
    if kind == "image" and mime not in IMAGE_MIMES:
        return "document", mime
    return kind, mime


def image_type(head: bytes) -> str | None:
    """The type to serve bytes starting with `head` as an image: PNG, JPEG, GIF or WebP as sniffed (whatever was
    declared); None when they are none of these, and must not be served as an image."""
    sniffed = sniff_mime(head)
    return sniffed if sniffed in IMAGE_MIMES else None


def human_size(size: int) -> str:
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / (1024 * 1024):.1f} MB"
