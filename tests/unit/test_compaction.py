"""Context compaction helpers (spec §7.6, §7.7, §5.3; acceptance rows §15.9)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from orbital.domain import compaction as cp


def user(text: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": 1700000000000}


def assistant(text: str = "", tool_calls: tuple[str, ...] = ()) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if text:
        content.append({"type": "text", "text": text})
    content += [{"type": "toolCall", "id": f"call_{n}", "name": n, "arguments": {}} for n in tool_calls]
    return {"role": "assistant", "content": content, "stopReason": "stop", "timestamp": 1700000000001}


def tool_result(name: str, text: str) -> dict[str, Any]:
    return {
        "role": "toolResult",
        "toolCallId": "call_1",
        "toolName": name,
        "content": [{"type": "text", "text": text}],
        "isError": False,
        "timestamp": 1700000000002,
    }


def image_user() -> dict[str, Any]:
    return user(
        [{"type": "text", "text": "look"}, {"type": "image", "r2Key": "media/k/x.png", "mimeType": "image/png"}]
    )


SETTINGS = cp.CompactionSettings()
DISABLED = cp.CompactionSettings(enabled=False)


# --- §15.9 token estimates ------------------------------------------------------------------------------------------


def test_estimate_message_tokens_formula():
    msg = user("Hello, world!")
    expected = math.ceil(len(json.dumps(msg, separators=(",", ":"))) / 4 * 1.2)
    assert cp.estimate_message_tokens(msg) == expected > 0


def test_longer_messages_estimate_larger():
    assert cp.estimate_message_tokens(user("A" * 10000)) > cp.estimate_message_tokens(user("Hi"))


def test_estimates_match_javascript_serialization():
    # non-ASCII stays as is; characters outside the BMP count twice, like JavaScript string lengths
    msg = {"role": "user", "content": "é🐙"}
    assert cp.message_json(msg) == '{"role":"user","content":"é🐙"}'
    assert cp.estimate_message_tokens(msg) == math.ceil((len(cp.message_json(msg)) + 1) / 4 * 1.2)
    assert cp.estimate_text_tokens("abcd" * 10) == 12
    assert cp.estimate_text_tokens("") == 0


def test_estimate_context_tokens():
    msgs = [user("one"), assistant("two"), user("three")]
    assert cp.estimate_context_tokens(msgs) == sum(cp.estimate_message_tokens(m) for m in msgs)
    assert cp.estimate_context_tokens([]) == 0


def test_count_image_blocks():
    assert cp.count_image_blocks([user([{"type": "text", "text": "hi"}]), assistant("hello")]) == 0
    assert cp.count_image_blocks([image_user(), image_user(), assistant("nice")]) == 2
    assert cp.count_image_blocks([user("just text")]) == 0


# --- §15.9 serialization --------------------------------------------------------------------------------------------


def test_serialize_user_and_assistant():
    text = cp.serialize_messages_for_summary([user("What is 2+2?"), assistant("The answer is 4.")])
    assert "[user]: What is 2+2?" in text
    assert "[assistant]: The answer is 4." in text


def test_serialize_tool_result():
    text = cp.serialize_messages_for_summary([tool_result("gsv__ReadFile", "file contents here")])
    assert "[tool result: gsv__ReadFile]:" in text and "file contents here" in text


def test_serialize_truncates_long_tool_results():
    text = cp.serialize_messages_for_summary([tool_result("mac__Bash", "X" * 5000)])
    assert "[...truncated]" in text and len(text) < 5000
    assert text == "[tool result: mac__Bash]: " + "X" * 2000 + "\n[...truncated]"
    exact = cp.serialize_messages_for_summary([tool_result("t", "Y" * 2000)])
    assert "truncated" not in exact


def test_serialize_tool_calls_and_mixed_content():
    msgs = [
        image_user(),
        assistant("Checking.", ("gsv__ReadFile", "mac__Bash")),
        assistant("", ("gsv__WriteFile",)),
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hidden"}, {"type": "text", "text": "ok"}]},
        user(""),
    ]
    assert cp.serialize_messages_for_summary(msgs) == "\n".join(
        [
            "[user]: look",
            "[assistant]: Checking.",
            "[assistant tool calls]: gsv__ReadFile, mac__Bash",
            "[assistant tool calls]: gsv__WriteFile",
            "[assistant]: ok",
        ]
    )


# --- §15.9 shouldCompact --------------------------------------------------------------------------------------------


def big(n: int, size: int = 2000) -> list[dict[str, Any]]:
    return [user("x" * size) for _ in range(n)]


def test_should_compact_disabled():
    assert cp.should_compact(big(100, 5000), 100_000, DISABLED) is False


def test_should_compact_small_conversations():
    assert cp.should_compact([user("hi"), assistant("hello")], 200_000, SETTINGS) is False
    assert cp.should_compact([user("hi"), assistant("hello")], 100, SETTINGS) is False  # ≤ 2 messages


def test_should_compact_by_estimate():
    assert cp.should_compact(big(20), 5000, SETTINGS) is True
    assert cp.should_compact([user("a"), assistant("b"), user("c")], 1_000_000, SETTINGS) is False


def test_should_compact_trusts_last_input_tokens():
    three = [user("a"), assistant("b"), user("c")]
    assert cp.should_compact(three, 100_000, SETTINGS, last_input_tokens=90_000) is True  # threshold 80k
    assert cp.should_compact(big(20), 200_000, SETTINGS, last_input_tokens=50_000) is False
    assert cp.should_compact(three, 100_000, SETTINGS, 80_000) is False  # strictly greater


@pytest.mark.parametrize("msgs", [big(20), [user("a"), assistant("b"), user("c")]])
@pytest.mark.parametrize("window", [5000, 1_000_000])
def test_zero_or_missing_last_input_falls_back_to_estimation(msgs, window):
    omitted = cp.should_compact(msgs, window, SETTINGS)
    assert cp.should_compact(msgs, window, SETTINGS, last_input_tokens=0) == omitted
    assert cp.should_compact(msgs, window, SETTINGS, last_input_tokens=None) == omitted


def test_system_prompt_estimate_counts_only_without_last_input():
    msgs = [user("a"), assistant("b"), user("c")]
    settings = cp.CompactionSettings(reserve_tokens=100)
    window = cp.estimate_context_tokens(msgs) + 500
    assert cp.should_compact(msgs, window, settings) is False
    assert cp.should_compact(msgs, window, settings, system_estimate=600) is True
    assert cp.should_compact(msgs, 100_000, SETTINGS, last_input_tokens=50_000, system_estimate=999_999) is False


# --- §15.9 splitOldAndRecent ----------------------------------------------------------------------------------------


def test_split_keeps_at_least_one_old_message():
    msgs = [user("one"), assistant("two"), user("three")]
    old, recent = cp.split_old_and_recent(msgs, cp.estimate_context_tokens(msgs) + 1000)
    assert len(old) + len(recent) == 3 and len(old) >= 1
    assert old == [msgs[0]] and recent == msgs[1:]


def test_split_two_messages():
    old, recent = cp.split_old_and_recent([user("a"), assistant("b")], 1_000_000)
    assert len(old) >= 1 and len(recent) >= 1


def test_split_respects_budget():
    msgs = [user(f"{i}" + "m" * 500) for i in range(10)]
    one = cp.estimate_message_tokens(msgs[0])
    old, recent = cp.split_old_and_recent(msgs, one + 1)
    assert len(recent) <= 2 and len(old) >= 8


def test_split_preserves_order():
    msgs = [user(f"message {i}") for i in range(5)]
    two = cp.estimate_message_tokens(msgs[3]) + cp.estimate_message_tokens(msgs[4])
    old, recent = cp.split_old_and_recent(msgs, two + 1)
    assert old + recent == msgs
    assert recent == msgs[3:]


def test_split_stops_at_the_first_message_that_does_not_fit():
    msgs = [user("a"), user("x" * 4000), user("b"), user("c")]
    budget = cp.estimate_message_tokens(msgs[2]) + cp.estimate_message_tokens(msgs[3]) + 5
    old, recent = cp.split_old_and_recent(msgs, budget)
    assert recent == msgs[2:] and old == msgs[:2]
    assert cp.split_old_and_recent([], 100) == ([], [])


# --- §15.9 chunkMessages --------------------------------------------------------------------------------------------


def test_chunk_everything_fits():
    msgs = [user("a"), assistant("b")]
    assert cp.chunk_messages(msgs, cp.estimate_context_tokens(msgs) + 1000) == [msgs]


def test_chunk_splits_by_budget():
    msgs = [user(f"message number {i}") for i in range(10)]
    budget = cp.estimate_message_tokens(msgs[0]) * 2 + 1
    chunks = cp.chunk_messages(msgs, budget)
    assert len(chunks) > 1
    assert sum(len(c) for c in chunks) == 10
    assert [m for c in chunks for m in c] == msgs
    assert all(cp.estimate_context_tokens(c) <= budget for c in chunks)


def test_chunk_huge_message_alone():
    short_a, huge, short_b = user("short"), user("H" * 100_000), user("short")
    chunks = cp.chunk_messages([short_a, huge, short_b], cp.estimate_message_tokens(short_a) * 2)
    assert [huge] in chunks
    assert chunks == [[short_a], [huge], [short_b]]


def test_chunk_empty():
    assert cp.chunk_messages([], 1000) == []


def test_plan_and_partial_tier_helpers():
    msgs = [user("old " * 50), assistant("old reply"), image_user(), user("recent")]
    settings = cp.CompactionSettings(keep_recent_tokens=cp.estimate_message_tokens(msgs[-1]))
    plan = cp.plan_compaction(msgs, 100_000, settings)
    assert plan is not None
    assert plan.old == msgs[:3] and plan.recent == msgs[3:] and plan.image_count == 1
    assert plan.chunks == [msgs[:3]]
    assert cp.plan_compaction([], 100_000, settings) is None
    assert cp.chunk_budget(100_001) == 25_000
    huge = [user("Z" * 40_000)]
    tokens = cp.estimate_context_tokens(huge)
    assert cp.chunk_text(huge, 10_000, partial=True) == cp.large_block_note(tokens)
    assert cp.chunk_text(huge, 10_000).startswith("[user]: ZZZ")
    assert cp.chunk_text(huge, 1_000_000, partial=True).startswith("[user]: ZZZ")
    assert cp.extraction_chunks([*huge, user("small")], 20_000) == [[user("small")]]


# --- texts ----------------------------------------------------------------------------------------------------------


def test_summary_texts():
    assert cp.summary_message_text("Short.", 0) == "[Conversation summary from automatic context compaction]\n\nShort."
    with_images = cp.summary_message_text("Short.", 2)
    assert with_images.startswith("[Conversation summary from automatic context compaction]\n\nShort.\n\n")
    assert "2 image(s)" in with_images
    msg = cp.summary_message("S", 0, 5)
    assert msg == {"role": "user", "content": cp.SUMMARY_PREFIX + "S", "timestamp": 5}
    assert cp.is_summary_message(msg) and not cp.is_summary_message(user("S"))


def test_plaintext_summary_and_large_block_note():
    assert cp.plaintext_summary(12, 0) == (
        "[Context contained 12 messages that were compacted. Summary unavailable due to size limits.]"
    )
    assert cp.plaintext_summary(3, 2) == (
        "[Context contained 3 messages that were compacted. Summary unavailable due to size limits. "
        "Included 2 image(s).]"
    )
    assert cp.large_block_note(62_400) == "[Large message block (~62K tokens) omitted from summary]"
    assert cp.large_block_note(1_500) == "[Large message block (~2K tokens) omitted from summary]"


def test_parse_summary_reply():
    reply = "Sure.\n<summary>\n The gist. \n</summary>\n<memories>\n- likes tea\n</memories>"
    assert cp.parse_summary_reply(reply) == ("The gist.", "- likes tea")
    assert cp.parse_summary_reply("  Just prose.  ") == ("Just prose.", "")
    assert cp.parse_summary_reply("Prose.\n<memories>- fact</memories>") == ("Prose.", "- fact")
    assert cp.parse_summary_reply("<summary>S</summary>") == ("S", "")
    assert cp.parse_memories_reply("<memories>\n- a\n</memories>") == "- a"
    assert cp.parse_memories_reply("nothing") == ""


def test_prompts_ask_for_the_tags_the_parser_reads():
    prompt = cp.summarize_prompt("[user]: hi", "Earlier summary.", "- known fact")
    assert "[user]: hi" in prompt and "Earlier summary." in prompt and "- known fact" in prompt
    assert "<summary>" in prompt and "</summary>" in prompt and "<memories>" in prompt
    first = cp.summarize_prompt("[user]: hi", None, "")
    assert "previous_summary" not in first and "recorded_memories" not in first
    extraction = cp.memories_prompt("[user]: hi")
    assert "[user]: hi" in extraction and "<memories>" in extraction and "<summary>" not in extraction
    assert "- known" in cp.memories_prompt("[user]: hi", known_memories="- known")


def test_compaction_settings_defaults_and_junk():
    assert cp.compaction_settings({}) == cp.CompactionSettings(True, 20000, 20000, True)
    assert cp.compaction_settings({"compaction": "nope"}) == cp.CompactionSettings()
    junk = {"enabled": "yes", "reserveTokens": "abc", "keepRecentTokens": -5, "extractMemories": None}
    assert cp.compaction_settings({"compaction": junk}) == cp.CompactionSettings()
    custom = {"enabled": False, "reserveTokens": "1500", "keepRecentTokens": 4000.7, "extractMemories": False}
    assert cp.compaction_settings({"compaction": custom}) == cp.CompactionSettings(False, 1500, 4000, False)
    assert cp.compaction_settings({"compaction": {"reserveTokens": float("inf"), "keepRecentTokens": True}}) == (
        cp.CompactionSettings()
    )


def test_append_memories():
    when = datetime(2026, 2, 20, 9, 5, tzinfo=UTC)
    assert cp.append_memories("# Notes\n\n- old\n\n \n", "- new", when, cp.SOURCE_COMPACTION) == (
        "# Notes\n\n- old\n\n### Extracted from context compaction (09:05 UTC)\n\n- new\n"
    )
    assert cp.append_memories(None, "- a", when, cp.SOURCE_RESET) == (
        "\n\n### Extracted from session reset (09:05 UTC)\n\n- a\n"
    )
    berlin = when.astimezone(timezone(timedelta(hours=1)))
    assert "(09:05 UTC)" in cp.append_memories("", "- a", berlin, cp.SOURCE_RESET)
    assert "(09:05 UTC)" in cp.append_memories("", "- a", when.replace(tzinfo=None), cp.SOURCE_RESET)
    assert cp.append_memories("keep", "  ", when, cp.SOURCE_RESET) == "keep"
    assert cp.memory_file_date(datetime(2026, 2, 20, 23, 30, tzinfo=timezone(timedelta(hours=-2)))) == "2026-02-21"
    assert cp.join_memories(["- a\n", "", "  ", "- b"]) == "- a\n- b"
