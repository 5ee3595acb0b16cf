"""Heartbeat rules (spec §10 with fix F8): intervals, per-agent settings, active hours, and what of a heartbeat reply
reaches a channel.

Pure functions over the effective configuration; the current time is always passed in (`now_ms`, epoch
milliseconds). The engine (`orbital.engines.heartbeat`) owns the state and the runs.

* `parse_every` reads GSV's duration strings exactly as GSV did: the first `(\\d+)h`, `(\\d+)m` and `(\\d+)s` found
  anywhere are summed, nothing else counts (`"1d"` and `"90"` are 0, `"500ms"` is 500 minutes). 0 disables.
* Active hours: start inclusive, end exclusive, `start > end` spans midnight. The zone is UTC for an absent or
  `"local"` timezone (the clock a Lambda runs on), the configured `userTimezone` for `"user"` (F8; GSV ignored it),
  or the named IANA zone; an unknown name reads as UTC.
* Replies (F8): an acknowledgement — a reply containing `HEARTBEAT_OK` with at most 300 other characters — is not
  delivered; anything else is, however short, once the token and the separators around it are stripped. The same
  alert is not delivered twice within 24 hours.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orbital.domain import timefmt
from orbital.domain.config import DEFAULT_HEARTBEAT_PROMPT, default_agent_id
from orbital.domain.ids import normalize_agent_id

ACK_TOKEN = "HEARTBEAT_OK"
ACK_MAX_EXTRA_CHARS = 300
"""A reply containing the token with at most this many other characters is an acknowledgement."""
DEDUPE_WINDOW_MS = 24 * 60 * 60 * 1000
DEFAULT_TARGET = "last"
TARGET_NONE = "none"
SESSION_SUFFIX = "heartbeat:system:internal"

REASON_INTERVAL = "interval"
REASON_MANUAL = "manual"

_HOURS = re.compile(r"(\d+)h")
_MINUTES = re.compile(r"(\d+)m")
_SECONDS = re.compile(r"(\d+)s")
_CLOCK = re.compile(r"^\s*(\d{1,2})(?::(\d{2}))?\s*$")


@dataclass(frozen=True)
class HeartbeatSettings:
    every_ms: int
    """0: heartbeats are off for the agent."""
    prompt: str
    target: str
    """`last`, `none`, or a channel name."""
    active_hours: Mapping[str, Any] | None
    """`{start: "HH:MM", end: "HH:MM", timezone?}`, or None (any time)."""


# --- intervals --------------------------------------------------------------------------------------------------------


def parse_every(text: Any) -> int:
    """Milliseconds of a duration string such as `30m`, `1h30m` or `45s`; 0 (off) for anything without one."""
    if not isinstance(text, str) or text in ("", "0", "0m"):
        return 0
    total = 0
    for pattern, unit_ms in ((_HOURS, 3_600_000), (_MINUTES, 60_000), (_SECONDS, 1000)):
        found = pattern.search(text)
        if found:
            total += int(found.group(1)) * unit_ms
    return total


def next_heartbeat_at(now_ms: int, every_ms: int) -> int | None:
    """When the next heartbeat is due after `now_ms`; None when heartbeats are off."""
    return now_ms + every_ms if every_ms > 0 else None


# --- settings ---------------------------------------------------------------------------------------------------------


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _agent_entries(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    listed = _as_dict(config.get("agents")).get("list")
    return [e for e in listed if isinstance(e, dict)] if isinstance(listed, list) else []


def agent_ids(config: Mapping[str, Any]) -> list[str]:
    """The agents that get heartbeats: the ids of `agents.list` as written (first occurrence of each), or the default
    agent when the list names none."""
    ids: list[str] = []
    for entry in _agent_entries(config):
        raw = entry.get("id")
        if isinstance(raw, str) and raw.strip() and raw not in ids:
            ids.append(raw)
    return ids or [default_agent_id(dict(config))]


def _agent_heartbeat(config: Mapping[str, Any], agent_id: str) -> dict[str, Any]:
    """The agent's own `heartbeat` section: the entry with exactly this id, else one whose normalized id matches."""
    entries = _agent_entries(config)
    entry = next((e for e in entries if e.get("id") == agent_id), None)
    if entry is None:
        wanted = normalize_agent_id(agent_id)
        entry = next(
            (e for e in entries if isinstance(e.get("id"), str) and normalize_agent_id(e["id"]) == wanted),
            None,
        )
    return _as_dict((entry or {}).get("heartbeat"))


def effective_settings(config: Mapping[str, Any], agent_id: str) -> HeartbeatSettings:
    """`agents.defaultHeartbeat` shallow-merged with the agent's `heartbeat` (its keys replace whole values)."""
    merged = {**_as_dict(_as_dict(config.get("agents")).get("defaultHeartbeat")), **_agent_heartbeat(config, agent_id)}
    prompt = merged.get("prompt")
    target = merged.get("target")
    active = merged.get("activeHours")
    return HeartbeatSettings(
        every_ms=parse_every(merged.get("every")),
        prompt=prompt if isinstance(prompt, str) and prompt.strip() else DEFAULT_HEARTBEAT_PROMPT,
        target=target.strip() if isinstance(target, str) and target.strip() else DEFAULT_TARGET,
        active_hours=active if isinstance(active, dict) else None,
    )


def session_key(agent_id: str) -> str:
    """The agent's heartbeat session, apart from every conversation: `agent:{agentId}:heartbeat:system:internal`."""
    return f"agent:{normalize_agent_id(agent_id)}:{SESSION_SUFFIX}"


# --- active hours -----------------------------------------------------------------------------------------------------


def _clock_minutes(value: Any) -> int | None:
    """`"08:30"` → 510; `"24:00"` (the end of the day) → 1440; anything else → None."""
    if not isinstance(value, str):
        return None
    found = _CLOCK.match(value)
    if not found:
        return None
    hours, minutes = int(found.group(1)), int(found.group(2) or 0)
    if minutes > 59 or hours > 24 or (hours == 24 and minutes):
        return None
    return hours * 60 + minutes


def active_hours_zone(active_hours: Mapping[str, Any], user_tz: Any) -> str:
    """The IANA zone the window is read in: UTC for none or `local`, `user_tz` for `user`, else the named zone (UTC
    when unknown)."""
    name = active_hours.get("timezone")
    if not isinstance(name, str) or not name.strip() or name.strip().lower() == "local":
        return timefmt.DEFAULT_TIMEZONE
    if name.strip().lower() == "user":
        return timefmt.resolve_timezone(user_tz)
    return timefmt.resolve_timezone(name)


def within_active_hours(active_hours: Mapping[str, Any] | None, now_ms: int, user_tz: Any) -> bool:
    """Whether `now_ms` falls in the window. No window, or one whose start or end cannot be read, means any time;
    a window whose start equals its end covers the whole day."""
    if not isinstance(active_hours, Mapping):
        return True
    start = _clock_minutes(active_hours.get("start"))
    end = _clock_minutes(active_hours.get("end"))
    if start is None or end is None or start == end:
        return True
    local = datetime.fromtimestamp(now_ms / 1000, timefmt.zone(active_hours_zone(active_hours, user_tz)))
    minutes = local.hour * 60 + local.minute
    if start < end:
        return start <= minutes < end
    return minutes >= start or minutes < end


# --- delivery ---------------------------------------------------------------------------------------------------------


def resolve_delivery(target: str, last_active: Mapping[str, Any] | None, agent_id: str) -> dict[str, Any] | None:
    """Where a heartbeat reply goes: nowhere for `none`; the last-active conversation for `last`; for a channel
    name, the last-active conversation only when it is on that channel. None when there is nothing to deliver to."""
    if target == TARGET_NONE or not last_active:
        return None
    channel = last_active.get("channel")
    if not isinstance(channel, str) or not channel:
        return None
    if target != DEFAULT_TARGET and channel != target:
        return None
    peer = last_active.get("peer")
    return {
        "kind": "heartbeat",
        "agentId": agent_id,
        "channel": channel,
        "accountId": last_active.get("accountId"),
        "peer": dict(peer) if isinstance(peer, Mapping) else None,
    }


def _is_separator(char: str) -> bool:
    return char in ":-" or char.isspace()


def _strip_separators(text: str) -> str:
    """`text` without the runs of `:`, `-` and whitespace at its ends."""
    start, end = 0, len(text)
    while start < end and _is_separator(text[start]):
        start += 1
    while end > start and _is_separator(text[end - 1]):
        end -= 1
    return text[start:end]


def filter_reply(text: Any) -> str | None:
    """The text of a heartbeat reply to deliver, or None. `HEARTBEAT_OK` at either end and the runs of `:`, `-` and
    whitespace at both ends are stripped; a reply that contained the token and has at most 300 characters left is an
    acknowledgement (None), and so is a reply with nothing left. Anything else is an alert and is delivered."""
    if not isinstance(text, str):
        return None
    cleaned = text.strip()
    if cleaned.startswith(ACK_TOKEN):
        cleaned = cleaned[len(ACK_TOKEN) :]
    if cleaned.endswith(ACK_TOKEN):
        cleaned = cleaned[: -len(ACK_TOKEN)]
    cleaned = _strip_separators(cleaned)
    if not cleaned:
        return None
    if ACK_TOKEN in text and len(cleaned) <= ACK_MAX_EXTRA_CHARS:
        return None
    return cleaned


def is_duplicate(text: str, last_text: Any, last_sent_at: Any, now_ms: int) -> bool:
    """Whether `text` is the alert last delivered (compared trimmed) and that was less than 24 hours ago."""
    if not isinstance(last_text, str) or isinstance(last_sent_at, bool) or not isinstance(last_sent_at, int | float):
        return False
    return text.strip() == last_text.strip() and now_ms - last_sent_at < DEDUPE_WINDOW_MS
