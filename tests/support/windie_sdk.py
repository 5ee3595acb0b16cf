"""What the WindieOS TypeScript SDK accepts of the backend's events, as a check for tests.

The SDK turns every backend event it knows (`NORMALIZED`) that names a conversation (or an `error` that names a
turn) into a conversation event, then refuses it unless it passes the producer-sequence rule: it carries an integer
`sequence` above 0 (and, but for an `error`, a non-empty `event_id`); sequences are kept per key, the event's turn
(`payload.turn_ref` of an error first, then the top-level `turn_ref`) or else `conversation:{conversation_ref}`; an
`event_id` already seen under the key is skipped; otherwise the sequence must be exactly one more than the last one
of the key (the first is 1). A lower or equal one is "regressed", a higher one a "gap" (the SDK's "Backend stream
sequence gap before N").
"""

from __future__ import annotations

from typing import Any

NORMALIZED = frozenset(
    {
        "error",
        "trace-event",
        "query-accepted",
        "llm-thought",
        "streaming-response",
        "streaming-complete",
        "local-user-message",
        "system-prompt",
        "user-message-full",
        "assistant-message-full",
        "tool-schemas",
        "tool-call",
        "web-search-progress",
        "tool-output",
        "tool-bundle",
        "context-compaction-started",
        "context-compaction-completed",
        "context-compaction-failed",
        "token-count",
    }
)
"""The backend event types the SDK's normalizer turns into conversation events."""


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _turn_of(frame: dict[str, Any]) -> str | None:
    payload = frame.get("payload") if isinstance(frame.get("payload"), dict) else {}
    if frame.get("type") == "error" and _text(payload.get("turn_ref")):
        return _text(payload.get("turn_ref"))
    return _text(frame.get("turn_ref"))


class SequenceChecker:
    """Feed it every frame a socket received, in order (`see`); `errors` lists what the SDK would refuse."""

    def __init__(self) -> None:
        self.last: dict[str, int] = {}
        self.seen: dict[str, set[str]] = {}
        self.errors: list[str] = []
        self.checked = 0

    def see(self, frame: Any) -> None:
        if not isinstance(frame, dict) or frame.get("type") not in NORMALIZED:
            return
        turn = _turn_of(frame)
        conversation = _text(frame.get("conversation_ref"))
        if conversation is None and not (frame["type"] == "error" and turn):
            return  # the SDK drops it before any check
        self.checked += 1
        sequence = frame.get("sequence")
        event_id = _text(frame.get("event_id"))
        where = f"{frame['type']} {event_id or '(no event_id)'}"
        if frame["type"] != "error" and event_id is None:
            self.errors.append(f"{where}: Backend stream event missing event_id or sequence")
            return
        if isinstance(sequence, bool) or not isinstance(sequence, int) or sequence <= 0:
            self.errors.append(f"{where}: Backend stream event missing producer sequence")
            return
        key = turn or f"conversation:{conversation}"
        ids = self.seen.setdefault(key, set())
        if event_id is not None and event_id in ids:
            return
        last = self.last.get(key, 0)
        if sequence <= last:
            self.errors.append(f"{where}: Backend stream sequence regressed from {last} to {sequence}")
            return
        if sequence > last + 1:
            self.errors.append(f"{where}: Backend stream sequence gap before {sequence}")
        if event_id is not None:
            ids.add(event_id)
        self.last[key] = sequence


def sdk_refusals(frames: list[Any]) -> list[str]:
    """What the SDK would refuse of these frames (received in this order by one socket); [] when it takes them
    all."""
    checker = SequenceChecker()
    for frame in frames:
        checker.see(frame)
    return checker.errors
