from __future__ import annotations

import json

from orbital.protocol.frames import encode, encode_sendable, error_frame, event_frame, ok_frame, sendable


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
