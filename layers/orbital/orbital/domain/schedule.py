"""Cron job schedules: validation and the next run time (spec §11.2).

Three kinds, as stored on a job:

    {"kind": "at", "atMs": ms}                          once, at that instant (a past instant is due at once)
    {"kind": "every", "everyMs": ms, "anchorMs"?: ms}   on a fixed grid counted from the anchor (default: now)
    {"kind": "cron", "expr": "m h dom mon dow", "tz"?}  a five-field cron expression, read in `tz` (default UTC)

croniter reads cron expressions and lists the wall-clock times they name. In front of it sits only GSV's field
grammar, both narrower and more lenient than croniter's: numeric only (no `MON`, no `@daily`); each field is `*` or a
comma list of `base[/step]` with `base` one of `*`, `n`, `a-b` (`n/step` runs from n to the field's maximum); numbers
are read the way JavaScript's `parseInt` reads them (`5x` is 5), because GSV clients may send such expressions and
expect them to work; a bad field gets GSV's error message. Each checked element is handed to croniter in a form it
reads with the same meaning (`5x` as `5`, `a-a` as `a`, which croniter would take for a whole cycle). Day-of-week 7
means Sunday. Day matching follows Vixie cron: when both day fields are restricted (not a bare `*`) a day matches if
either does, otherwise the restricted one decides.

The next cron run is the first whole minute strictly after now whose wall-clock time in `tz` matches, within 366 days
(a pattern such as February 30 never matches: None, the job is simply never due). Wall-clock times skipped by a
daylight-saving change never match; times repeated by one match at each occurrence.
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
"""How many minutes after now the next cron run may be; a later match counts as none."""
_SEARCH_YEARS = 2
"""How many calendar years croniter may look ahead: 366 days from New Year's Eve reach two years on."""
_LONGEST_SHIFT = timedelta(hours=3)
"""Longer than any daylight-saving change of the clock (Antarctica/Troll's is two hours)."""

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
_FIELDS = (_MINUTE, _HOUR, _DAY_OF_MONTH, _MONTH, _DAY_OF_WEEK)


@dataclass(frozen=True)
class CronExpression:
    """A parsed expression: the allowed values of each field (day-of-week with Sunday as 0), which day fields are
    restricted (anything but a bare `*`), and the expression as croniter is given it."""

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]
    dom_restricted: bool
    dow_restricted: bool
    croniter_expr: str

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


def _element(element: str, field: _Field) -> str:
    """One list element checked against GSV's grammar, written as croniter reads it with the same meaning."""
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
        return f"*/{step}" if has_step else "*"
    if "-" in base:
        parts = base.split("-")
        if len(parts) != 2:
            raise ScheduleError(f'cron {field.name} field has an invalid range "{base}"')
        start, end = _number(parts[0], field), _number(parts[1], field)
        if start > end:
            raise ScheduleError(f"cron {field.name} range {start}-{end} starts after it ends")
    else:
        start = _number(base, field)
        end = field.high if has_step else start
    if start == end:
        return str(start)
    return f"{start}-{end}/{step}" if has_step else f"{start}-{end}"


def _field(text: str, field: _Field) -> str:
    if text == "":
        raise ScheduleError(f"cron {field.name} field is empty")
    return ",".join(_element(element, field) for element in text.split(","))


def _values(expanded: list[Any], field: _Field) -> list[int]:
    """The values croniter expanded a field to (`*` standing for all of them; it counts Sunday as 0 only)."""
    if "*" not in expanded:
        return [int(value) for value in expanded]
    return list(range(field.low, 6 + 1 if field is _DAY_OF_WEEK else field.high + 1))


def parse_cron_expression(expr: Any) -> CronExpression:
    """Parse a five-field expression, or raise ScheduleError saying what is wrong with it."""
    text = expr.strip() if isinstance(expr, str) else ""
    if not text:
        raise ScheduleError("cron expression is empty")
    fields = text.split()
    if len(fields) != 5:
        raise ScheduleError("cron expression must contain exactly 5 fields")
    parts = [_field(part, spec) for part, spec in zip(fields, _FIELDS, strict=True)]
    from croniter import croniter  # imported when used: 4-8 ms more for every cold start that never reads a cron

    expanded = croniter.expand(" ".join(parts))[0]
    minutes, hours, days_of_month, months, days_of_week = (
        _values(values, spec) for values, spec in zip(expanded, _FIELDS, strict=True)
    )
    dom_restricted, dow_restricted = fields[2] != "*", fields[4] != "*"
    if dom_restricted and dow_restricted and (len(days_of_month) == 31 or len(days_of_week) == 7):
        # either day field matches every day, so any day does; croniter would instead ignore a field covering the
        # whole range as if it were `*`, leaving the other one to decide
        parts[2] = parts[4] = "*"
    return CronExpression(
        minutes=tuple(minutes),
        hours=tuple(hours),
        days_of_month=frozenset(days_of_month),
        months=frozenset(months),
        days_of_week=frozenset(days_of_week),
        dom_restricted=dom_restricted,
        dow_restricted=dow_restricted,
        croniter_expr=" ".join(parts),
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
    """The instants (ms, ascending) at which the clock in `zone` shows `wall`: none in a spring-forward gap, two in a
    fall-back overlap, one otherwise."""
    found: list[int] = []
    for fold in (0, 1):
        ms = round(wall.replace(tzinfo=zone, fold=fold).timestamp() * 1000)
        if datetime.fromtimestamp(ms / 1000, zone).replace(tzinfo=None) == wall and ms not in found:
            found.append(ms)
    return sorted(found)


def next_cron_match(expression: CronExpression, zone: tzinfo, now_ms: int) -> int | None:
    """The first whole minute after `now_ms` (within the search window) whose wall-clock time in `zone` matches.

    croniter lists the matching wall-clock times, without a zone: its own daylight-saving handling moves a skipped
    time past the gap, and misses second showings of a repeated time when the change is not one hour on the hour
    (Pacific/Chatham, Australia/Lord_Howe, Antarctica/Troll). Each wall-clock time is mapped to the instants that show
    it; the first instants of later wall-clock times never come earlier, so the first wall-clock time still ahead ends
    the search. A clock about to fall back shows again times it has already shown: the listing then starts that much
    earlier. Wall-clock times a day past the window's end (no zone is that far from UTC) end it too."""
    from croniter import CroniterBadDateError, croniter  # imported when used, as in parse_cron_expression

    last = (math.floor(now_ms / MINUTE_MS) + SEARCH_MINUTES) * MINUTE_MS
    now = datetime.fromtimestamp(now_ms / 1000, zone)
    soon = datetime.fromtimestamp(now_ms / 1000 + _LONGEST_SHIFT.total_seconds(), zone)
    start = now.replace(tzinfo=None, fold=0)
    shift = (now.utcoffset() or timedelta(0)) - (soon.utcoffset() or timedelta(0))
    if shift > timedelta(0):
        start -= shift
    beyond = datetime.fromtimestamp(last / 1000, UTC).replace(tzinfo=None) + timedelta(days=1)
    walls = croniter(expression.croniter_expr, start, max_years_between_matches=_SEARCH_YEARS)
    best: int | None = None
    try:
        while (wall := walls.get_next(datetime)) < beyond:
            instants = _instants(wall, zone)
            ahead = [ms for ms in instants if ms > now_ms]
            if ahead and (best is None or ahead[0] < best):
                best = ahead[0]
            if instants and instants[0] > now_ms:
                break
    except CroniterBadDateError:
        pass
    return best if best is not None and best <= last else None
