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
)


class _Management:
    """The management API client's part a post uses: what it was asked to send."""

    class exceptions:
        class GoneException(Exception):
            pass

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def post_to_connection(self, ConnectionId: str, Data: bytes) -> None:
        self.sent.append(Data)


def _posted(frame: dict[str, object], limit: int) -> bytes:
    from orbital.aws.push import ManagementApiSender

    sender = ManagementApiSender("http://127.0.0.1:1", max_bytes=limit)
    management = _Management()
    sender._client = management  # type: ignore[assignment]
    assert sender.post("c1", frame)
    (data,) = management.sent
    return data


def test_a_reply_within_the_limit_is_sent_as_it_is() -> None:
    frame = ok_frame("r1", {"content": "x" * 1000})
    assert encode_sendable(frame, 2000) == encode(frame)
    assert json.loads(_posted(frame, 2000)) == frame


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
    assert json.loads(_posted(error_frame("r3", {"code": 500, "message": "m" * 2000}), 1500))["error"]["code"] == 413


def test_a_post_is_measured_as_it_is_sent() -> None:
    """A post escapes every non-ASCII character: a reply whose UTF-8 would fit but whose post would not is a 413,
    with the size of the post; one that fits goes as it is, encoded once."""
    frame = ok_frame("r4", {"content": "é" * 300})  # 600 bytes of UTF-8, 1,800 escaped
    posted = _posted(frame, 1500)
    size = len(json.dumps(frame, separators=(",", ":")).encode())
    assert len(encode_sendable(frame, 1500).encode()) < 1500 < size
    assert json.loads(posted)["error"] == {
        "code": 413,
        "message": f"Reply too large to send: {size} bytes (the limit is 1500); ask for less (a range or a limit)",
    }
    assert _posted(frame, 2000) == json.dumps(frame, separators=(",", ":")).encode()


def test_events_are_left_alone() -> None:
    frame = event_frame("chat", {"text": "x" * 5000})
    assert json.loads(_posted(frame, 1000)) == frame
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
