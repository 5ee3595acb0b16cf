"""Schedule validation and next-run computation (spec §11.2, §15.3)."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from orbital.domain.schedule import (
    ScheduleError,
    compute_next_run_ms,
    parse_cron_expression,
    validate_schedule,
)

CHICAGO = ZoneInfo("America/Chicago")


def ms(*parts: int, tz=UTC) -> int:
    return int(datetime(*parts, tzinfo=tz).timestamp() * 1000)


def cron(expr: str, now: int, tz: str | None = "UTC") -> int | None:
    schedule = {"kind": "cron", "expr": expr}
    if tz is not None:
        schedule["tz"] = tz
    return compute_next_run_ms(schedule, now)


# --- §15.3 ---------------------------------------------------------------------------------------------------------


def test_at_returns_its_instant() -> None:
    assert compute_next_run_ms({"kind": "at", "atMs": 1700000000000}, 0) == 1700000000000


def test_every_with_anchor() -> None:
    assert compute_next_run_ms({"kind": "every", "everyMs": 3000, "anchorMs": 1000}, 10000) == 13000


def test_cron_every_quarter_hour() -> None:
    assert cron("*/15 * * * *", ms(2026, 2, 11, 10, 7, 30)) == ms(2026, 2, 11, 10, 15)


def test_cron_weekday_hour() -> None:
    # 2026-02-11 is a Wednesday
    assert cron("0 11 * * 3", ms(2026, 2, 11, 10, 7, 30)) == ms(2026, 2, 11, 11, 0)


def test_cron_with_three_fields_is_rejected() -> None:
    with pytest.raises(ScheduleError, match="5 fields"):
        validate_schedule({"kind": "cron", "expr": "* * *", "tz": "UTC"})


# --- at / every ----------------------------------------------------------------------------------------------------


def test_at_in_the_past_is_due_at_once() -> None:
    assert compute_next_run_ms({"kind": "at", "atMs": 5}, 1_000_000) == 5


def test_every_without_anchor_counts_from_now() -> None:
    assert compute_next_run_ms({"kind": "every", "everyMs": 60_000}, 1_000_000) == 1_060_000


def test_every_with_future_anchor_waits_for_it() -> None:
    assert compute_next_run_ms({"kind": "every", "everyMs": 1000, "anchorMs": 50_000}, 10_000) == 50_000


def test_every_on_the_grid_is_strictly_after_now() -> None:
    assert compute_next_run_ms({"kind": "every", "everyMs": 3000, "anchorMs": 1000}, 13000) == 16000
    assert compute_next_run_ms({"kind": "every", "everyMs": 3000, "anchorMs": 13000}, 13000) == 16000


def test_fractional_every_rounds_up_and_stays_after_now() -> None:
    got = compute_next_run_ms({"kind": "every", "everyMs": 1000.5, "anchorMs": 0}, 10_000)
    assert got == 10_005 and got > 10_000


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ({"kind": "at"}, "schedule.atMs must be a finite number"),
        ({"kind": "at", "atMs": "soon"}, "schedule.atMs must be a finite number"),
        ({"kind": "at", "atMs": float("inf")}, "schedule.atMs must be a finite number"),
        ({"kind": "at", "atMs": True}, "schedule.atMs must be a finite number"),
        ({"kind": "every", "everyMs": 0}, "schedule.everyMs must be a positive number"),
        ({"kind": "every", "everyMs": -5}, "schedule.everyMs must be a positive number"),
        ({"kind": "every", "everyMs": float("nan")}, "schedule.everyMs must be a positive number"),
        ({"kind": "every"}, "schedule.everyMs must be a positive number"),
        ({"kind": "every", "everyMs": 10, "anchorMs": -1}, "schedule.anchorMs must be a finite non-negative number"),
        ({"kind": "every", "everyMs": 10, "anchorMs": "x"}, "schedule.anchorMs must be a finite non-negative number"),
        ({"kind": "cron", "expr": ""}, "cron expression is empty"),
        ({"kind": "cron", "expr": "   "}, "cron expression is empty"),
        ({"kind": "cron"}, "cron expression is empty"),
        ({"kind": "cron", "expr": "* * * * * *"}, "cron expression must contain exactly 5 fields"),
        ({"kind": "cron", "expr": "* * * * *", "tz": "Mars/Olympus"}, "Invalid time zone specified: Mars/Olympus"),
        ({"kind": "weekly"}, "Unsupported schedule.kind: weekly"),
        ({}, "Unsupported schedule.kind: None"),
        ("every day", "schedule must be an object"),
    ],
)
def test_validation_messages(schedule, message: str) -> None:
    with pytest.raises(ScheduleError) as info:
        validate_schedule(schedule)
    assert str(info.value) == message
    with pytest.raises(ScheduleError):
        compute_next_run_ms(schedule, 0)


def test_valid_schedules_pass() -> None:
    validate_schedule({"kind": "at", "atMs": 0})
    validate_schedule({"kind": "every", "everyMs": 1, "anchorMs": 0})
    validate_schedule({"kind": "every", "everyMs": 1, "anchorMs": None})
    validate_schedule({"kind": "cron", "expr": "0 9 * * 1-5", "tz": "America/Chicago"})
    validate_schedule({"kind": "cron", "expr": "0 9 * * *", "tz": ""})


# --- cron field syntax ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("a * * * *", 'cron minute field has a non-numeric value "a"'),
        ("60 * * * *", "cron minute value 60 is out of range 0-59"),
        ("* 24 * * *", "cron hour value 24 is out of range 0-23"),
        ("* * 0 * *", "cron day-of-month value 0 is out of range 1-31"),
        ("* * * 13 *", "cron month value 13 is out of range 1-12"),
        ("* * * * 8", "cron day-of-week value 8 is out of range 0-7"),
        ("1,,2 * * * *", "cron minute field has an empty list element"),
        ("5- * * * *", "cron minute field has an empty range bound"),
        ("-5 * * * *", "cron minute field has an empty range bound"),
        ("30-10 * * * *", "cron minute range 30-10 starts after it ends"),
        ("1-2-3 * * * *", 'cron minute field has an invalid range "1-2-3"'),
        ("*/0 * * * *", 'cron minute field has an invalid step "0"'),
        ("*/x * * * *", 'cron minute field has an invalid step "x"'),
        ("*/-2 * * * *", 'cron minute field has an invalid step "-2"'),
        ("MON * * * *", 'cron minute field has a non-numeric value "MON"'),
        ("* * * * MON", 'cron day-of-week field has a non-numeric value "MON"'),
    ],
)
def test_field_errors(expr: str, message: str) -> None:
    with pytest.raises(ScheduleError) as info:
        parse_cron_expression(expr)
    assert str(info.value) == message


def test_fields_expand() -> None:
    parsed = parse_cron_expression("1,5-7,50/5 */6 1-31/10 * 5-7")
    assert parsed.minutes == (1, 5, 6, 7, 50, 55)
    assert parsed.hours == (0, 6, 12, 18)
    assert parsed.days_of_month == {1, 11, 21, 31}
    assert parsed.months == set(range(1, 13))
    assert parsed.days_of_week == {5, 6, 0}  # 7 is Sunday
    assert parsed.dom_restricted and parsed.dow_restricted


def test_numbers_are_read_like_parseint() -> None:
    parsed = parse_cron_expression("5x 1.5 +3 * 2/3abc")
    assert parsed.minutes == (5,)
    assert parsed.hours == (1,)
    assert parsed.days_of_month == {3}
    assert parsed.days_of_week == {2, 5}


def test_whitespace_between_fields_is_free() -> None:
    assert parse_cron_expression("  0\t9  * *   1 ").hours == (9,)


def test_day_of_week_seven_is_sunday() -> None:
    # 2026-02-15 is a Sunday
    assert cron("0 8 * * 7", ms(2026, 2, 11)) == ms(2026, 2, 15, 8)
    assert cron("0 8 * * 0", ms(2026, 2, 11)) == ms(2026, 2, 15, 8)


# --- cron day semantics ------------------------------------------------------------------------------------------


def test_both_day_fields_restricted_match_either() -> None:
    # the 20th (a Friday) or any Monday: from Wed 2026-02-11 the next is Mon 2026-02-16
    assert cron("0 0 20 * 1", ms(2026, 2, 11)) == ms(2026, 2, 16)
    # the 13th (Friday 2026-02-13) or any Monday
    assert cron("0 0 13 * 1", ms(2026, 2, 11)) == ms(2026, 2, 13)


def test_only_day_of_month_restricted() -> None:
    assert cron("0 0 20 * *", ms(2026, 2, 11)) == ms(2026, 2, 20)


def test_only_day_of_week_restricted() -> None:
    assert cron("0 0 * * 1", ms(2026, 2, 11)) == ms(2026, 2, 16)


def test_stepped_star_counts_as_restricted() -> None:
    # "*/10" is not a bare "*": with a weekday given, either matches (day 11 is the 11th, a Wednesday)
    assert cron("0 12 */10 * 1", ms(2026, 2, 11, 13)) == ms(2026, 2, 16, 12)


def test_month_field() -> None:
    assert cron("0 0 1 6 *", ms(2026, 2, 11)) == ms(2026, 6, 1)


# --- the search --------------------------------------------------------------------------------------------------


def test_next_minute_is_strictly_after_now() -> None:
    assert cron("* * * * *", ms(2026, 2, 11, 10, 7)) == ms(2026, 2, 11, 10, 8)
    assert cron("* * * * *", ms(2026, 2, 11, 10, 7, 59)) == ms(2026, 2, 11, 10, 8)


def test_impossible_date_never_runs() -> None:
    assert cron("0 0 30 2 *", ms(2026, 2, 11)) is None


def test_search_is_bounded_to_366_days() -> None:
    # February 29: 2028 is more than 366 days after February 2026, but within reach from March 2027
    assert cron("0 0 29 2 *", ms(2026, 2, 11)) is None
    assert cron("0 0 29 2 *", ms(2027, 3, 1)) == ms(2028, 2, 29)


def test_without_tz_the_clock_is_utc() -> None:
    assert cron("0 9 * * *", ms(2026, 2, 11), tz=None) == ms(2026, 2, 11, 9)


def test_tz_is_applied() -> None:
    assert cron("0 9 * * *", ms(2026, 2, 11), tz="America/Chicago") == ms(2026, 2, 11, 15)
    assert cron("0 9 * * *", ms(2026, 7, 11), tz="America/Chicago") == ms(2026, 7, 11, 14)
    assert cron("30 9 * * *", ms(2026, 2, 11), tz="Asia/Kolkata") == ms(2026, 2, 11, 4)


def test_local_day_decides_the_weekday() -> None:
    # 2026-02-13 03:00Z is still Thursday the 12th in Chicago: "Fridays at 9pm" there is 2026-02-14 03:00Z
    assert cron("0 21 * * 5", ms(2026, 2, 12, 12), tz="America/Chicago") == ms(2026, 2, 14, 3)


def test_time_skipped_by_spring_forward_never_matches() -> None:
    # Chicago skips 02:00-03:00 on 2026-03-08: 02:30 that day does not exist, the next is on the 9th
    got = cron("30 2 * * *", ms(2026, 3, 7, 12), tz="America/Chicago")
    assert got == ms(2026, 3, 9, 2, 30, tz=CHICAGO)


def test_time_repeated_by_fall_back_matches_twice() -> None:
    # Chicago repeats 01:00-02:00 on 2026-11-01 (first CDT at 06:xxZ, then CST at 07:xxZ)
    first = cron("30 1 * * *", ms(2026, 11, 1, 5), tz="America/Chicago")
    assert first == ms(2026, 11, 1, 6, 30)
    second = cron("30 1 * * *", first, tz="America/Chicago")
    assert second == ms(2026, 11, 1, 7, 30)
    assert cron("30 1 * * *", second, tz="America/Chicago") == ms(2026, 11, 2, 7, 30)


def test_fall_back_picks_the_earliest_instant_of_the_day() -> None:
    # at 06:40Z (01:40 CDT) both 01:45 CDT (06:45Z) and 01:00 CST (07:00Z) are ahead: 06:45Z is first
    assert cron("0,45 1 * * *", ms(2026, 11, 1, 6, 40), tz="America/Chicago") == ms(2026, 11, 1, 6, 45)


@pytest.mark.parametrize(
    ("expr", "tz", "now", "expected"),
    [
        # Lord Howe falls back half an hour at 02:00 (+11:00 to +10:30): 01:30-02:00 shows twice
        ("27,30 1 * * *", "Australia/Lord_Howe", ms(2026, 4, 4, 14, 30), ms(2026, 4, 4, 15)),
        # Chatham falls back at 03:45 (+13:45 to +12:45): 02:45-03:45 shows twice
        ("0,50 2 * * *", "Pacific/Chatham", ms(2026, 4, 4, 13, 5), ms(2026, 4, 4, 14, 5)),
    ],
)
def test_repeated_time_off_the_hour_matches_again(expr: str, tz: str, now: int, expected: int) -> None:
    # seen from the first showing of a matching time, the next run is its second showing, not the next day
    assert cron(expr, now, tz=tz) == expected


def test_half_hour_zone() -> None:
    assert cron("0 * * * *", ms(2026, 2, 11, 10, 10), tz="Asia/Kolkata") == ms(2026, 2, 11, 10, 30)


def _reference(expr: str, tz: str, now: int, minutes: int) -> int | None:
    """The definition, literally: every whole minute after now, checked in tz."""
    parsed = parse_cron_expression(expr)
    zone = ZoneInfo(tz)
    start = (now // 60_000 + 1) * 60_000
    for i in range(minutes):
        t = start + i * 60_000
        local = datetime.fromtimestamp(t / 1000, zone)
        if local.minute in parsed.minutes and local.hour in parsed.hours and parsed.matches_day(local.date()):
            return t
    return None


@pytest.mark.parametrize("seed", range(6))
def test_matches_a_minute_by_minute_search(seed: int) -> None:
    """Against the definition, near DST changes in several zones and with frequent patterns."""
    rng = random.Random(seed)
    exprs = ["*/7 * * * *", "30 1,2,3 * * *", "0 */5 * * *", "15 2 * * 0", "* 1 * * *", "0 0 1 * *", "59 23 * * 1-5"]
    zones = ["America/Chicago", "Europe/London", "Australia/Lord_Howe", "Asia/Kathmandu", "UTC", "America/Santiago"]
    instants = [ms(2026, 3, 8, 7), ms(2026, 11, 1, 5, 50), ms(2026, 3, 29, 0, 30), ms(2026, 4, 5, 14), ms(2026, 9, 6)]
    for _ in range(12):
        expr, tz = rng.choice(exprs), rng.choice(zones)
        now = rng.choice(instants) + rng.randrange(0, 6 * 3_600_000)
        expected = _reference(expr, tz, now, 3 * 24 * 60)
        got = cron(expr, now, tz=tz)
        if expected is not None:
            assert got == expected, (expr, tz, now)
        else:
            assert got is None or got > now + 3 * 24 * 3_600_000 - 60_000


@pytest.mark.parametrize("seed", range(4))
def test_every_and_cron_are_strictly_after_now(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        now = rng.randrange(0, 4_000_000_000_000)
        every = {"kind": "every", "everyMs": rng.randrange(1, 10_000_000)}
        if rng.random() < 0.5:
            every["anchorMs"] = rng.randrange(0, 4_000_000_000_000)
        assert compute_next_run_ms(every, now) > now
        minute = rng.randrange(60)
        got = cron(f"{minute} * * * *", now, tz=rng.choice(["UTC", "America/Chicago", "Asia/Kolkata"]))
        assert got is not None and now < got <= now + 3_600_000 + 60_000
