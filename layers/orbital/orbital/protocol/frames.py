"""Wire frames of the GSV protocol (`req`, `res`, `evt`) and the binary transfer chunk format."""

from __future__ import annotations

import json
import struct
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

PROTOCOL_VERSION = 1
SERVER_VERSION = "0.1.0"


class RequestFrame(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["req"]
    id: str | int
    method: str
    params: Any = None


class ErrorShape(BaseModel):
    code: int
    message: str
    details: Any = None
    retryable: bool | None = None


class ResponseFrame(BaseModel):
    type: Literal["res"] = "res"
    id: str | int | None
    ok: bool
    payload: Any = None
    error: ErrorShape | None = None


class EventFrame(BaseModel):
    type: Literal["evt"] = "evt"
    event: str
    payload: Any = None
    seq: int | None = None


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


def encode(frame: dict[str, Any]) -> str:
    return json.dumps(frame, separators=(",", ":"), ensure_ascii=False)


def _oversize(frame: dict[str, Any], text: str, limit: int) -> dict[str, Any] | None:
    if frame.get("type") != "res" or len(text) * 4 <= limit:  # at most 4 bytes a character: surely small enough
        return None
    size = len(text.encode("utf-8"))
    if size <= limit:
        return None
    message = f"Reply too large to send: {size} bytes (the limit is {limit}); ask for less (a range or a limit)"
    return error_frame(frame.get("id"), {"code": 413, "message": message})


def encode_sendable(frame: dict[str, Any], limit: int) -> str:
    """`frame` encoded; a reply whose UTF-8 encoding exceeds `limit` bytes (API Gateway refuses a WebSocket message
    over 128 KB, and its caller would wait forever) is replaced by a 413 error reply to the same request."""
    text = encode(frame)
    instead = _oversize(frame, text, limit)
    return text if instead is None else encode(instead)


def sendable(frame: dict[str, Any], limit: int) -> dict[str, Any]:
    """`frame`, or the 413 error reply that replaces a reply too large to send (see `encode_sendable`)."""
    if frame.get("type") != "res":
        return frame
    return _oversize(frame, encode(frame), limit) or frame


def pack_chunk(transfer_id: int, data: bytes) -> bytes:
    """GSV binary frame: 4-byte little-endian transfer id, then the raw bytes."""
    return struct.pack("<I", transfer_id) + data


def unpack_chunk(frame: bytes) -> tuple[int, bytes] | None:
    if len(frame) < 4:
        return None
    (transfer_id,) = struct.unpack_from("<I", frame)
    return transfer_id, frame[4:]
