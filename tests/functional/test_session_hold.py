"""A session held by work that is no run (WindieOS's `compact-history`): a stop does not end the hold (it ends by
itself), and a summary made of a history that was reset meanwhile never lands in the new one."""

from __future__ import annotations

from typing import Any

from orbital.agent import runs

KEY = "agent:main:windie:group:0123456789abcdef0123456789abcdef"


def _message(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def test_a_stop_leaves_a_hold_alone(services: Any) -> None:
    services.sessions.get_or_create_meta(KEY)
    assert runs.hold(services, KEY, "compact-1", 60_000, kind="compaction")
    assert runs.stop(services, KEY).was_running is False
    assert runs.stop(services, KEY, only="compact-1").was_running is False
    assert (runs.current_run(services, KEY) or {}).get("runId") == "compact-1"


def test_a_summary_of_a_reset_history_is_not_written_into_the_new_one(services: Any) -> None:
    sessions = services.sessions
    for text in ("one", "two", "three"):
        sessions.append_messages(KEY, [_message(text)])
    made_of = str(sessions.load_meta(KEY)["sessionId"])
    sessions.reset(KEY)
    sessions.append_messages(KEY, [_message("fresh")])
    summary = {"role": "user", "content": [{"type": "text", "text": "SUMMARY"}], "timestamp": 2}
    assert sessions.replace_oldest(KEY, 2, summary, session_id=made_of) == {"replaced": 0}
    assert [m["content"][0]["text"] for m in sessions.messages(KEY)] == ["fresh"]
    current = str(sessions.load_meta(KEY)["sessionId"])
    assert sessions.replace_oldest(KEY, 1, summary, session_id=current)["replaced"] == 1
