"""Coalescing of streamed text into `delta` events: each is a billed PostToConnection per client on AWS."""

from __future__ import annotations

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
