"""Context compaction and memory extraction helpers (spec §7.6, §7.7; stored message shapes §5.3).

When a conversation nears the model's context window, the older messages are summarized by the model and replaced
by one user message holding the summary; the most recent messages stay verbatim. Durable facts found on the way
("memories") are appended to the agent's daily memory file. The same extraction runs before a session reset.

The steps, all pure here (the caller makes the model calls and the storage writes):

1. `should_compact` decides, from the provider's last reported input tokens or from an estimate.
2. `split_old_and_recent` keeps the newest messages within `keepRecentTokens`; `chunk_messages` cuts the rest
   into pieces of at most a quarter of the window.
3. Each chunk is summarized in turn (`summarize_prompt`, `parse_summary_reply`) with a rolling summary. If that
   fails, it is retried with oversized chunks replaced by `large_block_note`; if that fails too, the summary is
   `plaintext_summary`.
4. `summary_message_text` is the text of the replacing message; `append_memories` extends the memory file.

Token counts are estimates: a message's compact JSON length (in UTF-16 units, as a browser would count) divided by
four, plus a 20% margin.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

SUMMARY_PREFIX = "[Conversation summary from automatic context compaction]\n\n"
TOOL_TEXT_LIMIT = 2000
TRUNCATION_MARK = "\n[...truncated]"
CHUNK_SHARE = 0.25
"""A summarizer chunk holds at most this share of the context window."""
OVERSIZE_SHARE = 0.5
"""Chunks above this share of the window are skipped (partial tier, memory extraction)."""
SOURCE_COMPACTION = "context compaction"
SOURCE_RESET = "session reset"

DEFAULT_RESERVE_TOKENS = 20000
DEFAULT_KEEP_RECENT_TOKENS = 20000

Message = Mapping[str, Any]

# --- token estimates -----------------------------------------------------------------------------------------------


def _utf16_length(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _estimate(length: int) -> int:
    return math.ceil(length / 4 * 1.2)


def estimate_text_tokens(text: str) -> int:
    return _estimate(_utf16_length(text))


def message_json(msg: Any) -> str:
    """The message serialized the way a JavaScript gateway would: compact separators, non-ASCII kept."""
    return json.dumps(msg, separators=(",", ":"), ensure_ascii=False, default=str)


def estimate_message_tokens(msg: Any) -> int:
    return _estimate(_utf16_length(message_json(msg)))


def estimate_context_tokens(msgs: Iterable[Any]) -> int:
    return sum(estimate_message_tokens(m) for m in msgs)


def _blocks(msg: Message) -> list[Any]:
    content = msg.get("content")
    return content if isinstance(content, list) else []


def count_image_blocks(msgs: Iterable[Message]) -> int:
    """Image blocks across the messages (string contents have none)."""
    return sum(
        1 for msg in msgs for block in _blocks(msg) if isinstance(block, Mapping) and block.get("type") == "image"
    )


# --- serialization for the summarizer ------------------------------------------------------------------------------


def _content_text(msg: Message) -> str:
    content = msg.get("content")
    if isinstance(content, str):
        return content
    texts = [
        str(block.get("text") or "")
        for block in _blocks(msg)
        if isinstance(block, Mapping) and block.get("type") == "text"
    ]
    return "\n".join(t for t in texts if t)


def _tool_call_names(msg: Message) -> list[str]:
    return [
        str(block.get("name"))
        for block in _blocks(msg)
        if isinstance(block, Mapping) and block.get("type") == "toolCall" and block.get("name")
    ]


def serialize_messages_for_summary(msgs: Iterable[Message]) -> str:
    """One line per message: `[user]: …`, `[assistant]: …`, `[assistant tool calls]: a, b`, `[tool result: name]: …`
    (tool output beyond 2000 characters is cut). Reasoning blocks and images are left out."""
    lines: list[str] = []
    for msg in msgs:
        role = msg.get("role")
        text = _content_text(msg)
        if role == "user":
            if text:
                lines.append(f"[user]: {text}")
        elif role == "assistant":
            if text:
                lines.append(f"[assistant]: {text}")
            names = _tool_call_names(msg)
            if names:
                lines.append(f"[assistant tool calls]: {', '.join(names)}")
        elif role == "toolResult":
            if len(text) > TOOL_TEXT_LIMIT:
                text = text[:TOOL_TEXT_LIMIT] + TRUNCATION_MARK
            lines.append(f"[tool result: {msg.get('toolName')}]: {text}")
    return "\n".join(lines)


# --- settings and the decision -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompactionSettings:
    enabled: bool = True
    reserve_tokens: int = DEFAULT_RESERVE_TOKENS
    keep_recent_tokens: int = DEFAULT_KEEP_RECENT_TOKENS
    extract_memories: bool = True


def _count(value: Any, default: int) -> int:
    """A non-negative token count from an unvalidated config value (numbers or numeric strings)."""
    if isinstance(value, bool) or value is None:
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return math.floor(number) if math.isfinite(number) and number >= 0 else default


def compaction_settings(config: Mapping[str, Any]) -> CompactionSettings:
    """The `compaction` section of the effective config, with defaults for anything missing or malformed."""
    section = config.get("compaction")
    raw: Mapping[str, Any] = section if isinstance(section, Mapping) else {}
    enabled, extract = raw.get("enabled"), raw.get("extractMemories")
    return CompactionSettings(
        enabled=enabled if isinstance(enabled, bool) else True,
        reserve_tokens=_count(raw.get("reserveTokens"), DEFAULT_RESERVE_TOKENS),
        keep_recent_tokens=_count(raw.get("keepRecentTokens"), DEFAULT_KEEP_RECENT_TOKENS),
        extract_memories=extract if isinstance(extract, bool) else True,
    )


def should_compact(
    messages: Sequence[Any],
    window: int,
    settings: CompactionSettings,
    last_input_tokens: int | None = None,
    system_estimate: int = 0,
    messages_estimate: int | None = None,
) -> bool:
    """Whether the context exceeds `window - reserveTokens`. The provider's last reported input token count is
    trusted when there is one; otherwise the messages (plus the system prompt estimate) are estimated, or their
    estimate is taken as given (`messages_estimate`: `estimate_context_tokens(messages)` kept by the caller). Two
    messages or fewer are never compacted."""
    if not settings.enabled or len(messages) <= 2:
        return False
    threshold = window - settings.reserve_tokens
    if last_input_tokens is not None and last_input_tokens > 0:
        return last_input_tokens > threshold
    counted = estimate_context_tokens(messages) if messages_estimate is None else messages_estimate
    return counted + system_estimate > threshold


# --- splitting and chunking ----------------------------------------------------------------------------------------


def split_old_and_recent(messages: Sequence[Any], keep_recent_tokens: int) -> tuple[list[Any], list[Any]]:
    """(old, recent): recent is the longest tail whose estimate stays within `keep_recent_tokens`, never including
    the first message, so a non-empty conversation always has something to summarize."""
    total = 0
    start = len(messages)
    for index in range(len(messages) - 1, 0, -1):
        tokens = estimate_message_tokens(messages[index])
        if total + tokens > keep_recent_tokens:
            break
        total += tokens
        start = index
    return list(messages[:start]), list(messages[start:])


def chunk_messages(messages: Sequence[Any], budget: int) -> list[list[Any]]:
    """Consecutive groups whose estimates fit `budget`, filled greedily; a message larger than the budget ends up
    alone in its chunk."""
    chunks: list[list[Any]] = []
    current: list[Any] = []
    size = 0
    for msg in messages:
        tokens = estimate_message_tokens(msg)
        if current and size + tokens > budget:
            chunks.append(current)
            current, size = [], 0
        current.append(msg)
        size += tokens
    if current:
        chunks.append(current)
    return chunks


def chunk_budget(window: int) -> int:
    return math.floor(window * CHUNK_SHARE)


def is_oversized(chunk: Sequence[Any], window: int) -> bool:
    return estimate_context_tokens(chunk) > window * OVERSIZE_SHARE


@dataclass
class CompactionPlan:
    old: list[Any]
    recent: list[Any]
    chunks: list[list[Any]]
    image_count: int
    """Images among the old messages, mentioned in the summary since they cannot be summarized."""


def plan_compaction(messages: Sequence[Any], window: int, settings: CompactionSettings) -> CompactionPlan | None:
    """What a compaction would summarize and keep; None when there is nothing old to summarize."""
    old, recent = split_old_and_recent(messages, settings.keep_recent_tokens)
    if not old:
        return None
    return CompactionPlan(old, recent, chunk_messages(old, chunk_budget(window)), count_image_blocks(old))


def chunk_text(chunk: Sequence[Message], window: int, partial: bool = False) -> str:
    """A chunk as the summarizer sees it. In the partial tier, an oversized chunk is replaced by a short note."""
    if partial and is_oversized(chunk, window):
        return large_block_note(estimate_context_tokens(chunk))
    return serialize_messages_for_summary(chunk)


def extraction_chunks(messages: Sequence[Any], window: int) -> list[list[Any]]:
    """The chunks memory extraction reads: the usual chunking, minus chunks above half the window."""
    return [c for c in chunk_messages(messages, chunk_budget(window)) if not is_oversized(c, window)]


# --- texts ---------------------------------------------------------------------------------------------------------


def _js_round(value: float) -> int:
    return math.floor(value + 0.5)


def large_block_note(tokens: int) -> str:
    return f"[Large message block (~{_js_round(tokens / 1000)}K tokens) omitted from summary]"


def plaintext_summary(n_messages: int, n_images: int) -> str:
    """The last-resort summary when the model could not summarize at all."""
    images = f" Included {n_images} image(s)." if n_images > 0 else ""
    return (
        f"[Context contained {n_messages} messages that were compacted. "
        f"Summary unavailable due to size limits.{images}]"
    )


def image_note(image_count: int) -> str:
    if image_count <= 0:
        return ""
    return f"\n\n[The summarized messages contained {image_count} image(s); they are no longer in context.]"


def summary_message_text(summary: str, image_count: int) -> str:
    """The text of the user message that replaces the summarized messages."""
    return f"{SUMMARY_PREFIX}{summary}{image_note(image_count)}"


def summary_message(summary: str, image_count: int, timestamp: int) -> dict[str, Any]:
    return {"role": "user", "content": summary_message_text(summary, image_count), "timestamp": timestamp}


def is_summary_message(msg: Message) -> bool:
    content = msg.get("content")
    return msg.get("role") == "user" and isinstance(content, str) and content.startswith(SUMMARY_PREFIX)


_SUMMARY_TAG = re.compile(r"<summary>(.*?)</summary>", re.DOTALL | re.IGNORECASE)
_MEMORIES_TAG = re.compile(r"<memories>(.*?)</memories>", re.DOTALL | re.IGNORECASE)


def parse_summary_reply(text: str) -> tuple[str, str]:
    """(summary, memories) from the summarizer's reply. Without a `<summary>` block the whole reply (minus any
    memories block) is the summary; without a `<memories>` block there are none."""
    memories_match = _MEMORIES_TAG.search(text)
    memories = memories_match.group(1).strip() if memories_match else ""
    summary_match = _SUMMARY_TAG.search(text)
    summary = summary_match.group(1) if summary_match else _MEMORIES_TAG.sub("", text)
    return summary.strip(), memories


def join_memories(parts: Iterable[str]) -> str:
    """Memories gathered chunk by chunk, one block per line group."""
    return "\n".join(p.strip() for p in parts if p and p.strip())


def append_memories(existing: str | None, memories: str, when_utc: datetime, source: str) -> str:
    """The memory file with a `### Extracted from {source} (HH:MM UTC)` block appended. Naive datetimes are taken
    as UTC. Blank memories leave the file as it was."""
    if not memories.strip():
        return existing or ""
    moment = when_utc if when_utc.tzinfo is None else when_utc.astimezone(UTC)
    header = f"### Extracted from {source} ({moment:%H:%M} UTC)"
    return f"{(existing or '').rstrip()}\n\n{header}\n\n{memories.strip()}\n"


def memory_file_date(when_utc: datetime) -> str:
    """The `YYYY-MM-DD` of the daily memory file (`memory/{date}.md`) for a moment."""
    moment = when_utc if when_utc.tzinfo is None else when_utc.astimezone(UTC)
    return f"{moment:%Y-%m-%d}"


_MEMORY_GUIDANCE = """Memories are facts worth keeping beyond this conversation: the user's preferences and \
decisions, facts about people, projects and systems, commitments and deadlines, and lessons learned. Write each as \
one short markdown bullet (`- ...`). Leave out small talk, anything only relevant to the moment, secrets such as \
passwords or API keys, and facts already listed under "Already recorded"."""


def summarize_prompt(serialized_chunk: str, previous_summary: str | None, previous_memories: str | None) -> str:
    """The request for one summarizer step: fold the next part of the conversation into the rolling summary and
    pick out memories."""
    parts = [
        "You are compacting the history of a conversation between a user and an AI assistant so that it can "
        "continue within a limited context window. Work only from the text given; do not answer or continue the "
        "conversation.",
    ]
    if previous_summary and previous_summary.strip():
        parts.append(
            "Summary of the earlier part of the conversation:\n<previous_summary>\n"
            f"{previous_summary.strip()}\n</previous_summary>"
        )
    if previous_memories and previous_memories.strip():
        parts.append(f"Already recorded:\n<recorded_memories>\n{previous_memories.strip()}\n</recorded_memories>")
    parts.append(f"Next part of the conversation:\n<conversation>\n{serialized_chunk}\n</conversation>")
    parts.append(
        "Write an updated summary that covers the previous summary (if any) and this part together. Keep what the "
        "assistant needs to carry on: the user's goals and requests, decisions made, important facts and results, "
        "files, commands and tools involved, open questions and unfinished work. Be concise and factual; prefer "
        "concrete names and values over general statements.\n\n"
        f"{_MEMORY_GUIDANCE}\n\n"
        "Reply in exactly this form:\n<summary>\nthe updated summary\n</summary>\n<memories>\nnew memories, or "
        "nothing\n</memories>"
    )
    return "\n\n".join(parts)


def memories_prompt(serialized_chunk: str, known_memories: str | None = None) -> str:
    """The request for memory extraction alone (before a session reset)."""
    parts = [
        "The following conversation between a user and an AI assistant is about to be archived. Pick out what "
        "the assistant should remember afterwards. Work only from the text given; do not answer or continue the "
        "conversation.",
    ]
    if known_memories and known_memories.strip():
        parts.append(f"Already recorded:\n<recorded_memories>\n{known_memories.strip()}\n</recorded_memories>")
    parts.append(f"Conversation:\n<conversation>\n{serialized_chunk}\n</conversation>")
    parts.append(
        f"{_MEMORY_GUIDANCE}\n\n"
        "Reply in exactly this form, with nothing between the tags when there is nothing worth keeping:\n"
        "<memories>\nthe memories\n</memories>"
    )
    return "\n\n".join(parts)


def parse_memories_reply(text: str) -> str:
    """The `<memories>` block of an extraction reply ("" when absent)."""
    return parse_summary_reply(text)[1]
