"""Coalescing of streamed text into `delta` events: each is a billed PostToConnection per client on AWS."""

from __future__ import annotations

import json
from typing import Any

from orbital.agent.events import DeltaStream


class Recorder:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send(self, payload: dict[str, Any]) -> int:
        self.sent.append(payload)
        return 1


def test_a_burst_becomes_one_event_then_the_rest_on_close() -> None:
    audience = Recorder()
    stream = DeltaStream(audience, "r1", interval=0.1, clock=lambda: 1000.0)  # time stands still
    for i in range(100):
        stream.text(f"{i},")
    stream.close()
    assert [e["state"] for e in audience.sent] == ["delta", "delta"]
    assert "".join(e["text"] for e in audience.sent) == "".join(f"{i}," for i in range(100))
    assert all(e["runId"] == "r1" for e in audience.sent)


def test_pieces_at_least_an_interval_apart_go_out_one_by_one() -> None:
    audience = Recorder()
    now = [0.0]

    def clock() -> float:
        now[0] += 0.1
        return now[0]

    stream = DeltaStream(audience, "r1", interval=0.1, clock=clock)
    for piece in ("a", "b", "c"):
        stream.text(piece)
    stream.close()
    assert [e["text"] for e in audience.sent] == ["a", "b", "c"]


def test_empty_pieces_and_reasoning_send_nothing() -> None:
    audience = Recorder()
    stream = DeltaStream(audience, "r1")
    stream.text("")
    stream.thinking("hmm")
    stream.close()
    assert audience.sent == []


def test_a_huge_piece_is_split_into_messages_that_fit() -> None:
    audience = Recorder()
    stream = DeltaStream(audience, "r1", clock=lambda: 1000.0)
    stream.text("é" * 40_000)
    stream.close()
    assert "".join(e["text"] for e in audience.sent) == "é" * 40_000
    assert all(len(e["text"].encode()) < 96 * 1024 for e in audience.sent)


def test_big_events_are_made_to_fit_and_small_ones_are_untouched() -> None:
    from orbital.agent.events import MAX_EVENT_BYTES, fit_event

    small = {
        "runId": "r",
        "state": "final",
        "message": {"role": "assistant", "content": [{"type": "text", "text": "hi"}]},
    }
    assert fit_event(small) is small
    big = {
        "runId": "r",
        "state": "partial",
        "message": {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "t" * 200_000},
                {"type": "text", "text": "x" * 300_000},
                {"type": "toolCall", "id": "c", "name": "gsv__WriteFile", "arguments": {"content": "y" * 100_000}},
            ],
        },
    }
    fitted = fit_event(big)
    assert len(json.dumps(fitted).encode()) <= MAX_EVENT_BYTES
    kinds = [b["type"] for b in fitted["message"]["content"]]
    assert kinds == ["text", "toolCall"]  # reasoning left out, the rest kept (shortened)
    assert "session.preview" in fitted["message"]["content"][0]["text"]
    assert big["message"]["content"][0]["type"] == "thinking"  # the original is not changed
    tools = fit_event({"runId": "r", "state": "tool", "tools": [{"id": "c", "name": "n", "arguments": "z" * 200_000}]})
    assert len(json.dumps(tools).encode()) <= MAX_EVENT_BYTES
