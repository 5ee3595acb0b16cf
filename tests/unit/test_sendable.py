from __future__ import annotations

import json

from orbital.protocol.frames import (
    FRAGMENT_BYTES,
    MAX_FRAME_BYTES,
    encode,
    encode_sendable,
    error_frame,
    event_frame,
    fragments,
    ok_frame,
    sendable,
)


def test_a_reply_within_the_limit_is_sent_as_it_is() -> None:
    frame = ok_frame("r1", {"content": "x" * 1000})
    assert encode_sendable(frame, 2000) == encode(frame)
    assert sendable(frame, 2000) is frame


def test_a_reply_over_the_limit_becomes_a_413_for_the_same_request() -> None:
    frame = ok_frame("r2", {"content": "é" * 1000})  # 1,000 characters, 2,000 bytes
    size = len(encode(frame).encode())
    assert len(encode(frame)) < 1500 < size
    sent = json.loads(encode_sendable(frame, 1500))
    assert sent == {
        "type": "res",
        "id": "r2",
        "ok": False,
        "error": {
            "code": 413,
            "message": f"Reply too large to send: {size} bytes (the limit is 1500); ask for less (a range or a limit)",
        },
    }
    assert sendable(frame, 1500) == sent
    assert sendable(error_frame("r3", {"code": 500, "message": "m" * 2000}), 1500)["error"]["code"] == 413


def test_events_are_left_alone() -> None:
    frame = event_frame("chat", {"text": "x" * 5000})
    assert sendable(frame, 1000) is frame
    assert encode_sendable(frame, 1000) == encode(frame)


def test_text_within_one_frame_is_sent_whole() -> None:
    assert fragments("x" * FRAGMENT_BYTES) == "x" * FRAGMENT_BYTES
    assert fragments("é" * (FRAGMENT_BYTES // 2)) == "é" * (FRAGMENT_BYTES // 2)  # exactly the limit in bytes


def test_longer_text_is_cut_between_characters_under_the_frame_limit() -> None:
    for text in ("a" * 100_000, "é" * 50_001, "日本語" * 20_000, "a😀" * 30_000, "x" + "😀" * 20_000):
        pieces = fragments(text)
        assert isinstance(pieces, list) and len(pieces) > 1
        assert "".join(pieces) == text
        sizes = [len(p.encode("utf-8")) for p in pieces]
        assert max(sizes) <= FRAGMENT_BYTES < MAX_FRAME_BYTES
        assert min(sizes[:-1]) > FRAGMENT_BYTES - 4  # full frames but the last, cut at most a character short
