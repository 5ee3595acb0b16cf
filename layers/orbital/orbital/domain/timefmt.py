"""Times as people read them (spec §8.4, §12.3 step 11, §15.5): in the user's timezone, 12-hour clock, with the zone's
abbreviation, so the agent and the user talk about the same wall-clock time.

Pure functions: the current time is always passed in. Timezone names are IANA names resolved through `zoneinfo`;
anything it does not know falls back to UTC instead of failing, because a typo in `userTimezone` must not break
message delivery.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

DEFAULT_TIMEZONE = "UTC"

_NUMERIC_ABBREVIATION = re.compile(r"^([+-])(\d{2})(\d{2})?$")
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_DURATION_UNITS = ((86_400_000, "day"), (3_600_000, "hour"), (60_000, "minute"), (1000, "second"))


def resolve_timezone(name: Any) -> str:
    """`name` (trimmed) when it is an IANA timezone this machine knows, else "UTC"."""
    if not isinstance(name, str) or not name.strip():
        return DEFAULT_TIMEZONE
    text = name.strip()
    try:
        ZoneInfo(text)
    except (ValueError, KeyError, OSError):  # malformed key, unknown zone (a KeyError), unreadable file
        return DEFAULT_TIMEZONE
    return text


def zone(name: Any) -> tzinfo:
    """The tzinfo of a timezone name, UTC when unknown."""
    resolved = resolve_timezone(name)
    return UTC if resolved == DEFAULT_TIMEZONE else ZoneInfo(resolved)


def _local(ms: float, tz: Any) -> datetime | None:
    if isinstance(ms, bool) or not isinstance(ms, int | float) or not math.isfinite(ms):
        return None
    try:
        return datetime.fromtimestamp(ms / 1000, zone(tz))
    except (OverflowError, ValueError, OSError):
        return None


def _zone_label(local: datetime) -> str:
    """The zone's abbreviation (`UTC`, `CST`, `GMT`); zones whose abbreviation is only an offset (`+03`) read as
    `GMT+3`, the way browsers show them."""
    abbreviation = local.tzname() or "UTC"
    match = _NUMERIC_ABBREVIATION.match(abbreviation)
    if not match:
        return abbreviation
    sign, hours, minutes = match.groups()
    label = f"GMT{sign}{int(hours)}"
    return f"{label}:{minutes}" if minutes and minutes != "00" else label


def _clock(local: datetime) -> str:
    hour = local.hour % 12 or 12
    return f"{hour}:{local.minute:02d} {'AM' if local.hour < 12 else 'PM'} {_zone_label(local)}"


def format_time_short(ms: float, tz: Any) -> str:
    """`3:30 PM UTC`: the time of day in `tz`."""
    local = _local(ms, tz)
    return _clock(local) if local else "Invalid Date"


def format_time_full(ms: float, tz: Any) -> str:
    """`Friday, February 13, 2026 — 3:30 PM UTC`: date and time in `tz`."""
    local = _local(ms, tz)
    if local is None:
        return "Invalid Date"
    date = f"{_WEEKDAYS[local.weekday()]}, {_MONTHS[local.month - 1]} {local.day}, {local.year}"
    return f"{date} — {_clock(local)}"


def format_envelope(
    text: str,
    channel: str,
    tz: Any,
    now_ms: float,
    peer_kind: str | None = None,
    sender: str | None = None,
) -> str:
    """The prefix a channel message gets before the agent sees it: `[whatsapp · 3:30 PM UTC] Hello`. In groups,
    channels and threads the sender is named too (`[whatsapp · 3:30 PM UTC · Alice] Hello`) so the agent can tell
    speakers apart; in a DM, or when the kind is unknown, the sender is implied and left out."""
    head = f"{channel} · {format_time_short(now_ms, tz)}"
    if peer_kind and peer_kind != "dm" and sender:
        head = f"{head} · {sender}"
    return f"[{head}] {text}"


def _number_text(value: float) -> str:
    """A number as JSON would print it (`1500`, not `1500.0`)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def format_duration_ms(ms: float) -> str:
    """`1 day`, `6 hours`, `15 minutes`, `30 seconds`: the largest unit that divides `ms` exactly, else `{ms} ms`."""
    if not isinstance(ms, bool) and isinstance(ms, int | float) and math.isfinite(ms) and ms > 0:
        for size, unit in _DURATION_UNITS:
            if ms % size == 0:
                count = int(ms // size)
                return f"{count} {unit}" if count == 1 else f"{count} {unit}s"
    return f"{_number_text(ms) if isinstance(ms, int | float) else ms} ms"


def _finite(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def schedule_human(schedule: Mapping[str, Any], user_tz: Any) -> str:
    """A schedule in words for the agent: `one-shot at …`, `every 15 minutes (anchor …)`, `cron "0 9 * * *" (UTC)`.
    A cron schedule without its own timezone shows the user's timezone, the one it will be read in when the gsv__Cron
    tool created it."""
    kind = schedule.get("kind")
    at: Any = schedule.get("atMs")
    every: Any = schedule.get("everyMs")
    anchor: Any = schedule.get("anchorMs")
    if kind == "at":
        return f"one-shot at {format_time_full(at, user_tz)}"
    if kind == "every":
        text = f"every {format_duration_ms(every)}"
        if _finite(anchor):
            return f"{text} (anchor {format_time_full(anchor, user_tz)})"
        return f"{text} (starting from creation time)"
    if kind == "cron":
        tz = schedule.get("tz") or resolve_timezone(user_tz)
        return f'cron "{schedule.get("expr", "")}" ({tz})'
    return f"unknown schedule kind {kind!r}"
