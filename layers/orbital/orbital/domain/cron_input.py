"""Schedules as an agent writes them, turned into stored schedules (spec §11.2 "human-friendly normalization").

Used only by the gsv__Cron tool: a model says `{"kind": "at", "at": "tomorrow 9:15am"}` or `{"kind": "every",
"everyHours": 6}` and means the user's timezone. The `cron.add` / `cron.update` RPCs take stored schedules verbatim
(`validate_schedule`), because clients such as the web UI already send `{kind, atMs|everyMs|expr, tz?}`.

Datetime text is read, in order, as: epoch seconds (10 digits), epoch milliseconds (11-16 digits), `in N unit`,
`today|tomorrow [at] H[:MM][am|pm]`, a date-time with an explicit zone (`Z`, `±HH:MM`, `±HHMM`, `UTC`, `GMT`), a local
ISO date-time `YYYY-MM-DD[(T| )H[:MM[:SS]]]` read as wall-clock time in the user's timezone, and finally other ISO
8601 or RFC 2822 forms (read in the user's timezone when they carry no zone). A wall-clock time that a
daylight-saving change skips is an error rather than a silent shift; one it repeats means its first occurrence.

Numeric schedule fields also accept numeric strings (`"everyMinutes": "15"`): models send them, and refusing would
only make the agent retry.
"""

from __future__ import annotations

import email.utils
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from orbital.domain.schedule import ScheduleError
from orbital.domain.timefmt import resolve_timezone, zone

_EPOCH_SECONDS = re.compile(r"^\d{10}$")
_EPOCH_MS = re.compile(r"^\d{11,16}$")
_RELATIVE = re.compile(
    r"^in\s+(\d+(?:\.\d+)?|\.\d+)\s*"
    r"(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?|d|days?)$",
    re.IGNORECASE,
)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DAY_WORD = re.compile(
    r"^(today|tomorrow)(?:\s+(?:at\s+)?(\d{1,2})(?::(\d{2}))?\s*(am|pm)?)?$",
    re.IGNORECASE,
)
_HAS_ZONE = re.compile(r"(?:Z|[+-]\d{2}:\d{2}|[+-]\d{4}|UTC|GMT)$", re.IGNORECASE)
_ZONED_ISO = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{1,2}):(\d{2})(?::(\d{2})(?:[.,](\d+))?)?)?\s*"
    r"(Z|UTC|GMT|[+-]\d{2}:?\d{2})$",
    re.IGNORECASE,
)
_LOCAL_ISO = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{1,2})(?::(\d{2})(?::(\d{2})(?:[.,](\d+))?)?)?)?$")
_NUMERIC_TEXT = re.compile(r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$")

_RELATIVE_FIELDS = (
    ("inMs", 1),
    ("delayMs", 1),
    ("inSeconds", 1000),
    ("inMinutes", 60_000),
    ("inHours", 3_600_000),
    ("inDays", 86_400_000),
)
_EVERY_FIELDS = (
    ("everyMs", 1),
    ("everySeconds", 1000),
    ("everyMinutes", 60_000),
    ("everyHours", 3_600_000),
    ("everyDays", 86_400_000),
)

EVERY_ERROR = "schedule.every requires everyMs or everyMinutes/everyHours (positive numbers)"
AT_ERROR = 'schedule.at requires atMs, at (datetime), or relative input such as "in 2 hours"'
IN_ERROR = 'schedule.in must use a relative duration like "in 2 hours" or "in 30 minutes"'


def _unparseable(text: str) -> ScheduleError:
    return ScheduleError(
        f'Unable to parse datetime "{text}". '
        'Use ISO datetime (recommended), "today/tomorrow", or relative "in N hours".'
    )


def _round_ms(value: float) -> int:
    """Half-up rounding to whole milliseconds (as JavaScript's Math.round)."""
    return math.floor(value + 0.5)


def _number(value: Any) -> float | None:
    """A finite number given as a number or numeric text; None when absent; NaN when present but not a number."""
    if value is None:
        return None
    if isinstance(value, bool):
        return math.nan
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else math.nan
    if isinstance(value, str) and _NUMERIC_TEXT.match(value):
        number = float(value)
        return number if math.isfinite(number) else math.nan
    return math.nan


def _instant(ms: float) -> int:
    return int(ms) if float(ms).is_integer() else _round_ms(ms)


def _wall_to_ms(wall: datetime, tz: tzinfo, text: str, tz_name: str) -> int:
    """The instant at which the clock in `tz` shows `wall` (naive); the first one when the clock shows it twice."""
    found: list[int] = []
    for fold in (0, 1):
        candidate = wall.replace(tzinfo=tz, fold=fold)
        ms = _round_ms(candidate.timestamp() * 1000)
        back = datetime.fromtimestamp(ms / 1000, tz).replace(tzinfo=None, fold=0)
        if back == wall:
            found.append(ms)
    if not found:
        raise ScheduleError(
            f'Local time "{text}" does not exist in {tz_name} (the clocks skip it for daylight saving time)'
        )
    return min(found)


def _relative_ms(text: str) -> int | None:
    match = _RELATIVE.match(text.strip())
    if not match:
        return None
    amount = float(match.group(1))
    unit = match.group(2).lower()
    key = "ms" if unit == "ms" or unit.startswith("milli") else unit[0]
    return _round_ms(amount * _UNIT_MS[key])


def _fraction_ms(digits: str | None) -> int:
    return int((digits or "0")[:3].ljust(3, "0"))


def _zoned(text: str) -> int | None:
    match = _ZONED_ISO.match(text)
    if match:
        year, month, day, hour, minute, second, fraction, zone_text = match.groups()
        label = zone_text.upper()
        if label in ("Z", "UTC", "GMT"):
            offset = timedelta(0)
        else:
            digits = label[1:].replace(":", "")
            offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
            if label[0] == "-":
                offset = -offset
        try:
            wall = datetime(
                int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0), tzinfo=UTC
            )
        except ValueError:
            return None
        return round((wall - offset).timestamp() * 1000) + _fraction_ms(fraction)
    try:
        parsed = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return round(parsed.timestamp() * 1000)


def _day_word(match: re.Match[str], tz: tzinfo, now_ms: int, text: str, tz_name: str) -> int | None:
    word, hour_text, minute_text, meridiem = match.groups()
    hour = int(hour_text) if hour_text else 0
    minute = int(minute_text) if minute_text else 0
    if meridiem:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if meridiem.lower() == "pm" else 0)
    elif hour > 23:
        return None
    if minute > 59:
        return None
    today = datetime.fromtimestamp(now_ms / 1000, tz).date()
    day = today + timedelta(days=1 if word.lower() == "tomorrow" else 0)
    return _wall_to_ms(datetime(day.year, day.month, day.day, hour, minute), tz, text, tz_name)


def _local_iso(match: re.Match[str], tz: tzinfo, text: str, tz_name: str) -> int | None:
    year, month, day, hour, minute, second, fraction = match.groups()
    try:
        wall = datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0))
    except ValueError:
        return None  # not a real calendar date or clock time
    return _wall_to_ms(wall, tz, text, tz_name) + _fraction_ms(fraction)


def _fallback(text: str, tz: tzinfo, tz_name: str) -> int | None:
    parsed: datetime | None = None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        try:
            parsed = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
    if parsed.tzinfo is None:
        whole = parsed.replace(microsecond=0)
        return _wall_to_ms(whole, tz, text, tz_name) + parsed.microsecond // 1000
    return round(parsed.timestamp() * 1000)


def parse_datetime_input(text: str, tz: Any, now_ms: int) -> int:
    """An instant (epoch ms) from what a person or model wrote; wall-clock forms are read in `tz` (an IANA name,
    UTC when unknown). Raises ScheduleError with GSV's message when nothing fits."""
    raw = text.strip() if isinstance(text, str) else ""
    tz_name = resolve_timezone(tz)
    local_zone = zone(tz_name)
    if _EPOCH_SECONDS.match(raw):
        return int(raw) * 1000
    if _EPOCH_MS.match(raw):
        return int(raw)
    delta = _relative_ms(raw)
    if delta is not None:
        return now_ms + delta
    result: int | None = None
    if match := _DAY_WORD.match(raw):
        result = _day_word(match, local_zone, now_ms, raw, tz_name)
    elif _HAS_ZONE.search(raw):
        result = _zoned(raw)
    elif match := _LOCAL_ISO.match(raw):
        result = _local_iso(match, local_zone, raw, tz_name)
    if result is None and raw:
        result = _fallback(raw, local_zone, tz_name)
    if result is None:
        raise _unparseable(text if isinstance(text, str) else str(text))
    return result


def _normalize_at(raw: Mapping[str, Any], tz: str, now_ms: int) -> dict[str, Any]:
    for key in ("atMs", "at"):
        value = raw.get(key)
        if key == "at" and isinstance(value, str):
            continue  # a string `at` is datetime text, read after the relative forms
        number = _number(value)
        if number is not None:
            if math.isnan(number):
                raise ScheduleError(f"schedule.{key} must be a finite number")
            return {"kind": "at", "atMs": _instant(number)}
    for key, unit_ms in _RELATIVE_FIELDS:
        number = _number(raw.get(key))
        if number is None:
            continue
        if math.isnan(number):
            raise ScheduleError(f"schedule.{key} must be a number")
        if number < 0:
            raise ScheduleError(f"schedule.{key} must be non-negative")
        return {"kind": "at", "atMs": now_ms + _round_ms(number * unit_ms)}
    relative = raw.get("in")
    if relative is not None:
        text = relative.strip() if isinstance(relative, str) else ""
        delta = _relative_ms(text)
        if delta is None and text:
            delta = _relative_ms(f"in {text}")  # "2 hours" is as clear as "in 2 hours"
        if delta is None:
            raise ScheduleError(IN_ERROR)
        return {"kind": "at", "atMs": now_ms + delta}
    for key in ("at", "when", "atIso"):
        value = raw.get(key)
        if isinstance(value, str) and value.strip():
            return {"kind": "at", "atMs": parse_datetime_input(value, tz, now_ms)}
    raise ScheduleError(AT_ERROR)


def _normalize_every(raw: Mapping[str, Any], tz: str, now_ms: int) -> dict[str, Any]:
    every_ms: int | None = None
    for key, unit_ms in _EVERY_FIELDS:
        number = _number(raw.get(key))
        if number is None:
            continue
        if math.isnan(number) or number <= 0:
            raise ScheduleError(EVERY_ERROR)
        every_ms = _round_ms(number * unit_ms)
        break
    if every_ms is None or every_ms <= 0:
        raise ScheduleError(EVERY_ERROR)
    schedule: dict[str, Any] = {"kind": "every", "everyMs": every_ms}
    anchor_ms: int | None = None
    for key in ("anchorMs", "anchor"):
        value = raw.get(key)
        if key == "anchor" and isinstance(value, str):
            continue
        number = _number(value)
        if number is not None:
            if math.isnan(number) or number < 0:
                raise ScheduleError("schedule.anchorMs must be a finite non-negative number")
            anchor_ms = _instant(number)
            break
    if anchor_ms is None:
        for key in ("anchor", "anchorAt", "startAt"):
            value = raw.get(key)
            if isinstance(value, str) and value.strip():
                anchor_ms = parse_datetime_input(value, tz, now_ms)
                break
    if anchor_ms is not None:
        schedule["anchorMs"] = anchor_ms
    return schedule


def _normalize_cron(raw: Mapping[str, Any], tz: str) -> dict[str, Any]:
    expr = raw.get("expr")
    if not isinstance(expr, str) or not expr.strip():
        raise ScheduleError("schedule.expr is required for kind=cron")
    given = raw.get("tz")
    own_tz = given.strip() if isinstance(given, str) else ""
    return {"kind": "cron", "expr": expr.strip(), "tz": own_tz or tz}


def normalize_schedule_input(raw: Any, user_tz: Any, now_ms: int) -> dict[str, Any]:
    """A stored schedule (`{kind, atMs}` / `{kind, everyMs, anchorMs?}` / `{kind, expr, tz}`) from the tool's
    friendlier input, times read in `user_tz`. Cron expressions themselves are checked later, when the job is
    validated, so their errors read the same on every path."""
    if not isinstance(raw, Mapping):
        raise ScheduleError("schedule must be an object")
    kind_value = raw.get("kind")
    if kind_value is None or (isinstance(kind_value, str) and not kind_value.strip()):
        raise ScheduleError("schedule.kind is required")
    kind = kind_value.strip().lower() if isinstance(kind_value, str) else kind_value
    tz = resolve_timezone(user_tz)
    if kind == "at":
        return _normalize_at(raw, tz, now_ms)
    if kind == "every":
        return _normalize_every(raw, tz, now_ms)
    if kind == "cron":
        return _normalize_cron(raw, tz)
    raise ScheduleError(f"Unsupported schedule.kind: {kind_value}")


def normalize_job_input(job: Any, user_tz: Any, now_ms: int) -> dict[str, Any]:
    """A new job from the tool: `name`, `schedule` and `spec` are required; the schedule is normalized, every other
    field is passed on for the service to check."""
    if not isinstance(job, Mapping) or not job.get("name") or not job.get("schedule") or not job.get("spec"):
        raise ScheduleError("cron add requires name, schedule, and spec")
    return {**job, "schedule": normalize_schedule_input(job["schedule"], user_tz, now_ms)}


def normalize_patch_input(patch: Any, user_tz: Any, now_ms: int) -> dict[str, Any]:
    """A job patch from the tool: an object, whose `schedule` (when given) is normalized."""
    if not isinstance(patch, Mapping):
        raise ScheduleError("cron update requires patch object")
    out = dict(patch)
    if patch.get("schedule") is not None:
        out["schedule"] = normalize_schedule_input(patch["schedule"], user_tz, now_ms)
    return out
