"""Wire frames of the GSV protocol (`req`, `res`, `evt`) and the binary transfer chunk format.

Frames are plain dicts: the dispatcher checks a request frame by hand (GSV's rules and error texts, spec §1.2) and
the helpers below build the replies and events, so no model class stands between the socket and the method."""

from __future__ import annotations

import json
import struct
from typing import Any

from orbital.protocol.jsontext import compact

PROTOCOL_VERSION = 1
SERVER_VERSION = "0.1.0"

MAX_MESSAGE_BYTES = 128 * 1024
"""API Gateway's limit for one WebSocket message, either way: a socket that sends more is closed (1009), and a post
of more is refused. The local gateway enforces it too; `hello-ok` advertises it (`features.limits`)."""
MAX_FRAME_BYTES = 32 * 1024
"""API Gateway's limit for one WebSocket frame: a longer text message must arrive as fragments (continuation
frames) of at most this many bytes each."""
FRAGMENT_BYTES = 30_000
"""What our clients put in one frame at most (a margin under `MAX_FRAME_BYTES`)."""


def limits() -> dict[str, int]:
    """What the gateway accepts from a peer, as `hello-ok.features.limits` tells it (the same on AWS and locally)."""
    return {"maxMessageBytes": MAX_MESSAGE_BYTES, "maxFrameBytes": MAX_FRAME_BYTES}


def ok_frame(frame_id: Any, payload: Any) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "res", "id": frame_id, "ok": True}
    if payload is not None:
        frame["payload"] = payload
    return frame


def error_frame(frame_id: Any, error: dict[str, Any]) -> dict[str, Any]:
    return {"type": "res", "id": frame_id, "ok": False, "error": error}


def event_frame(event: str, payload: Any = None) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "evt", "event": event}
    if payload is not None:
        frame["payload"] = payload
    return frame


_compact_json = compact(ensure_ascii=False)


def encode(frame: dict[str, Any]) -> str:
    """The frame as compact JSON (what `json.dumps(frame, separators=(",", ":"), ensure_ascii=False)` gives,
    without building an encoder each time)."""
    return _compact_json(frame)


def _oversize(frame: dict[str, Any], text: str, limit: int) -> dict[str, Any] | None:
    if frame.get("type") != "res" or len(text) * 4 <= limit:  # at most 4 bytes a character: surely small enough
        return None
    size = len(text.encode("utf-8"))
    if size <= limit:
        return None
    return too_large(frame, size, limit)


def too_large(frame: dict[str, Any], size: int, limit: int) -> dict[str, Any]:
    """The 413 error reply that replaces a reply of `size` bytes, over `limit`, to the same request."""
    message = f"Reply too large to send: {size} bytes (the limit is {limit}); ask for less (a range or a limit)"
    return error_frame(frame.get("id"), {"code": 413, "message": message})


def encode_sendable(frame: dict[str, Any], limit: int) -> str:
    """`frame` encoded; a reply whose UTF-8 encoding exceeds `limit` bytes (API Gateway refuses a WebSocket message
    over 128 KB, and its caller would wait forever) is replaced by a 413 error reply to the same request."""
    text = encode(frame)
    instead = _oversize(frame, text, limit)
    return text if instead is None else encode(instead)


REPLY_BUDGET_BYTES = 96_000
"""What the items of a growing list in one reply may take (JSON), so the reply fits API Gateway's 128 KB per
WebSocket message with room for the rest of the frame."""


def fit(items: list[Any], *, newest_last: bool = False, budget: int = REPLY_BUDGET_BYTES) -> tuple[list[Any], bool]:
    """The items that fit `budget` bytes of JSON, keeping the newest (the end of the list when `newest_last`, else
    its start), and whether some were left out. At least one item is kept (a single oversize one is left to the
    413 of `encode_sendable`)."""
    order = reversed(items) if newest_last else iter(items)
    kept: list[Any] = []
    used = 0
    for item in order:
        used += len(json.dumps(item, separators=(",", ":"), ensure_ascii=False, default=str).encode()) + 1
        if used > budget and kept:
            break
        kept.append(item)
    if len(kept) == len(items):
        return items, False
    return (kept[::-1] if newest_last else kept), True


def fragments(text: str, limit: int = FRAGMENT_BYTES) -> str | list[str]:
    """`text` itself if its UTF-8 fits in one frame of `limit` bytes, else the pieces to send as the fragments of one
    message, each at most `limit` bytes and cut between characters (a websockets client sends a list that way)."""
    if len(text) * 4 <= limit:
        return text
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    pieces: list[str] = []
    start = 0
    while start < len(data):
        end = min(start + limit, len(data))
        while end < len(data) and data[end] & 0xC0 == 0x80:  # not inside a character
            end -= 1
        pieces.append(data[start:end].decode("utf-8"))
        start = end
    return pieces


def pack_chunk(transfer_id: int, data: bytes) -> bytes:
    """GSV binary frame: 4-byte little-endian transfer id, then the raw bytes."""
    return struct.pack("<I", transfer_id) + data


def unpack_chunk(frame: bytes) -> tuple[int, bytes] | None:
    if len(frame) < 4:
        return None
    (transfer_id,) = struct.unpack_from("<I", frame)
    return transfer_id, frame[4:]
