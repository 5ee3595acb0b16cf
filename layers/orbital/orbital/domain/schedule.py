"""Cron job schedules: validation and the next run time (spec §11.2).

Three kinds, as stored on a job:

    {"kind": "at", "atMs": ms}                          once, at that instant (a past instant is due at once)
    {"kind": "every", "everyMs": ms, "anchorMs"?: ms}   on a fixed grid counted from the anchor (default: now)
    {"kind": "cron", "expr": "m h dom mon dow", "tz"?}  a five-field cron expression, read in `tz` (default UTC)

Cron expressions are numeric only (no `MON`, no `@daily`); each field is `*` or a comma list of `base[/step]` with
`base` one of `*`, `n`, `a-b` (`n/step` runs from n to the field's maximum). Numbers are read leniently the way
JavaScript's `parseInt` reads them (`5x` is 5), because GSV clients may send such expressions and expect them to
work. Day-of-week 7 means Sunday. Day matching follows Vixie cron: when both day fields are restricted (not a bare
`*`) a day matches if either does, otherwise the restricted one decides.

The next cron run is the first whole minute strictly after now whose wall-clock time in `tz` matches, searched at most
366 days ahead (a pattern such as February 30 never matches: None, the job is simply never due). Wall-clock times
skipped by a daylight-saving change never match; times repeated by one match at each occurrence.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

MINUTE_MS = 60_000
SEARCH_MINUTES = 366 * 24 * 60
"""How many candidate minutes the cron search looks at before giving up."""

_LEADING_INT = re.compile(r"^\s*([+-]?\d+)")


class ScheduleError(ValueError):
    """A schedule (or schedule input) that cannot be used; the message is shown to the user as it is."""


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int


_MINUTE = _Field("minute", 0, 59)
_HOUR = _Field("hour", 0, 23)
_DAY_OF_MONTH = _Field("day-of-month", 1, 31)
_MONTH = _Field("month", 1, 12)
_DAY_OF_WEEK = _Field("day-of-week", 0, 7)


@dataclass(frozen=True)
class CronExpression:
    """A parsed expression: the allowed values of each field (day-of-week with Sunday as 0), and which day fields
    are restricted (anything but a bare `*`)."""

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]
    dom_restricted: bool
    dow_restricted: bool

    def matches_day(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        dom = day.day in self.days_of_month
        dow = (day.weekday() + 1) % 7 in self.days_of_week
        if self.dom_restricted and self.dow_restricted:
            return dom or dow
        if self.dom_restricted:
            return dom
        if self.dow_restricted:
            return dow
        return True


def _finite(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _parse_int(text: str) -> int | None:
    """JavaScript `parseInt(text, 10)`: the leading integer, ignoring what follows; None where it gives NaN."""
    match = _LEADING_INT.match(text)
    return int(match.group(1)) if match else None


def _number(text: str, field: _Field) -> int:
    if text == "":
        raise ScheduleError(f"cron {field.name} field has an empty range bound")
    value = _parse_int(text)
    if value is None:
        raise ScheduleError(f'cron {field.name} field has a non-numeric value "{text}"')
    if not field.low <= value <= field.high:
        raise ScheduleError(f"cron {field.name} value {value} is out of range {field.low}-{field.high}")
    return value


def _parse_field(text: str, field: _Field) -> set[int]:
    if text == "":
        raise ScheduleError(f"cron {field.name} field is empty")
    values: set[int] = set()
    for element in text.split(","):
        if element == "":
            raise ScheduleError(f"cron {field.name} field has an empty list element")
        base, has_step, step_text = element.partition("/")
        step = 1
        if has_step:
            parsed_step = _parse_int(step_text)
            if parsed_step is None or parsed_step <= 0:
                raise ScheduleError(f'cron {field.name} field has an invalid step "{step_text}"')
            step = parsed_step
        if base == "*":
            start, end = field.low, field.high
        elif "-" in base:
            parts = base.split("-")
            if len(parts) != 2:
                raise ScheduleError(f'cron {field.name} field has an invalid range "{base}"')
            start, end = _number(parts[0], field), _number(parts[1], field)
            if start > end:
                raise ScheduleError(f"cron {field.name} range {start}-{end} starts after it ends")
        else:
            start = _number(base, field)
            end = field.high if has_step else start
        values.update(range(start, end + 1, step))
    if not values:
        raise ScheduleError(f"cron {field.name} field resolved to no values")
    return values


def parse_cron_expression(expr: Any) -> CronExpression:
    """Parse a five-field expression, or raise ScheduleError saying what is wrong with it."""
    text = expr.strip() if isinstance(expr, str) else ""
    if not text:
        raise ScheduleError("cron expression is empty")
    fields = text.split()
    if len(fields) != 5:
        raise ScheduleError("cron expression must contain exactly 5 fields")
    minute, hour, dom, month, dow = fields
    days_of_week = {0 if d == 7 else d for d in _parse_field(dow, _DAY_OF_WEEK)}
    return CronExpression(
        minutes=tuple(sorted(_parse_field(minute, _MINUTE))),
        hours=tuple(sorted(_parse_field(hour, _HOUR))),
        days_of_month=frozenset(_parse_field(dom, _DAY_OF_MONTH)),
        months=frozenset(_parse_field(month, _MONTH)),
        days_of_week=frozenset(days_of_week),
        dom_restricted=dom != "*",
        dow_restricted=dow != "*",
    )


def cron_zone(tz: Any) -> tzinfo:
    """The zone a cron expression is read in: `tz`, or UTC when none is given; an unknown zone is an error (unlike
    display, where it falls back), so a job never silently fires at the wrong hour."""
    if tz is None or tz == "":
        return UTC
    if not isinstance(tz, str):
        raise ScheduleError("schedule.tz must be a string")
    try:
        return ZoneInfo(tz)
    except (ValueError, KeyError, OSError):
        raise ScheduleError(f"Invalid time zone specified: {tz}") from None


def validate_schedule(schedule: Any) -> None:
    """Raise ScheduleError (with GSV's message) unless `schedule` can be stored on a job."""
    if not isinstance(schedule, Mapping):
        raise ScheduleError("schedule must be an object")
    kind = schedule.get("kind")
    if kind == "at":
        if not _finite(schedule.get("atMs")):
            raise ScheduleError("schedule.atMs must be a finite number")
    elif kind == "every":
        every: Any = schedule.get("everyMs")
        if not _finite(every) or every <= 0:
            raise ScheduleError("schedule.everyMs must be a positive number")
        anchor: Any = schedule.get("anchorMs")
        if anchor is not None and (not _finite(anchor) or anchor < 0):
            raise ScheduleError("schedule.anchorMs must be a finite non-negative number")
    elif kind == "cron":
        parse_cron_expression(schedule.get("expr"))
        cron_zone(schedule.get("tz"))
    else:
        raise ScheduleError(f"Unsupported schedule.kind: {kind}")


def _whole_ms(value: float) -> int:
    """Milliseconds as an integer, rounded up so "strictly after now" survives fractional inputs."""
    return math.ceil(value)


def compute_next_run_ms(schedule: Any, now_ms: int) -> int | None:
    """When a job with this schedule runs next, seen from `now_ms`; None when a cron pattern has no match within
    366 days. `at` returns its instant even if it has passed; `every` and `cron` always return a time strictly after
    now. Raises ScheduleError for a schedule `validate_schedule` rejects."""
    validate_schedule(schedule)
    kind = schedule["kind"]
    if kind == "at":
        return _whole_ms(schedule["atMs"])
    if kind == "every":
        every = schedule["everyMs"]
        anchor = schedule.get("anchorMs")
        if anchor is None:
            anchor = now_ms
        if anchor > now_ms:
            return _whole_ms(anchor)
        return _whole_ms(anchor + (math.floor((now_ms - anchor) / every) + 1) * every)
    expression = parse_cron_expression(schedule["expr"])
    return next_cron_match(expression, cron_zone(schedule.get("tz")), now_ms)


def _instants(wall: datetime, zone: tzinfo) -> list[int]:
    """The UTC instants (ms) at which the clock in `zone` shows `wall`: none in a spring-forward gap, two in a
    fall-back overlap, one otherwise."""
    found: list[int] = []
    for fold in (0, 1):
        candidate = wall.replace(tzinfo=zone, fold=fold)
        ms = round(candidate.timestamp() * 1000)
        back = datetime.fromtimestamp(ms / 1000, zone)
        if back.replace(tzinfo=None, fold=0) == wall and ms not in found:
            found.append(ms)
    return found


def next_cron_match(expression: CronExpression, zone: tzinfo, now_ms: int) -> int | None:
    """The first whole UTC minute after `now_ms` (within the search window) whose wall-clock time in `zone` matches.

    Rather than stepping through half a million minutes, walk the local calendar day by day and try only the hours
    and minutes the expression allows; each wall-clock time is mapped back to the instants that show it. Local days
    follow each other in time, so the first day with a match holds the answer."""
    first = (math.floor(now_ms / MINUTE_MS) + 1) * MINUTE_MS
    last = first + (SEARCH_MINUTES - 1) * MINUTE_MS
    day = datetime.fromtimestamp(first / 1000, zone).date()
    last_day = datetime.fromtimestamp(last / 1000, zone).date()
    while day <= last_day:
        if expression.matches_day(day):
            best: int | None = None
            for hour in expression.hours:
                for minute in expression.minutes:
                    wall = datetime(day.year, day.month, day.day, hour, minute)
                    instants = _instants(wall, zone)
                    if best is not None and instants and instants[0] > best:
                        break  # the earliest instant of later wall times only grows: nothing here can win
                    for ms in instants:
                        if first <= ms <= last and ms % MINUTE_MS == 0 and (best is None or ms < best):
                            best = ms
                else:
                    continue
                break
            if best is not None:
                return best
        day += timedelta(days=1)
    return None
