"""The gsv__Cron tool's human-friendly schedule input (spec §11.2, §15.4)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from orbital.domain.cron_input import (
    normalize_job_input,
    normalize_patch_input,
    normalize_schedule_input,
    parse_datetime_input,
)
from orbital.domain.schedule import ScheduleError

CHICAGO = ZoneInfo("America/Chicago")
AT_ERROR = 'schedule.at requires atMs, at (datetime), or relative input such as "in 2 hours"'
IN_ERROR = 'schedule.in must use a relative duration like "in 2 hours" or "in 30 minutes"'
EVERY_ERROR = "schedule.every requires everyMs or everyMinutes/everyHours (positive numbers)"
ANCHOR_ERROR = "schedule.anchorMs must be a finite non-negative number"
UNPARSEABLE = (
    'Unable to parse datetime "{}". Use ISO datetime (recommended), "today/tomorrow", or relative "in N hours".'
)


def ms(*parts: int, tz=UTC) -> int:
    return int(datetime(*parts, tzinfo=tz).timestamp() * 1000)


# --- §15.4 ---------------------------------------------------------------------------------------------------------


def test_local_datetime_in_the_user_timezone() -> None:
    got = normalize_schedule_input({"kind": "at", "at": "2026-02-14 09:30"}, "America/Chicago", ms(2026, 2, 13))
    assert got == {"kind": "at", "atMs": ms(2026, 2, 14, 15, 30)}


def test_relative_at() -> None:
    now = ms(2026, 2, 13, 12)
    assert normalize_schedule_input({"kind": "at", "at": "in 2 hours"}, "UTC", now) == {
        "kind": "at",
        "atMs": now + 7_200_000,
    }


def test_every_minutes_with_anchor() -> None:
    got = normalize_schedule_input(
        {"kind": "every", "everyMinutes": 15, "anchor": "2026-02-14T09:00"}, "UTC", ms(2026, 2, 13)
    )
    assert got == {"kind": "every", "everyMs": 900_000, "anchorMs": ms(2026, 2, 14, 9)}


def test_cron_gets_the_user_timezone() -> None:
    got = normalize_schedule_input({"kind": "cron", "expr": "0 9 * * *"}, "America/Chicago", 0)
    assert got == {"kind": "cron", "expr": "0 9 * * *", "tz": "America/Chicago"}


def test_job_create_with_tomorrow() -> None:
    job = {
        "name": "standup",
        "schedule": {"kind": "at", "at": "tomorrow 9:15am"},
        "spec": {"mode": "task", "message": "prepare the standup notes"},
    }
    got = normalize_job_input(job, "America/Chicago", ms(2026, 2, 13, 18))
    assert got["schedule"] == {"kind": "at", "atMs": ms(2026, 2, 14, 15, 15)}
    assert got["name"] == "standup" and got["spec"] == job["spec"]


def test_patch_every_hours_has_no_anchor() -> None:
    got = normalize_patch_input({"schedule": {"kind": "every", "everyHours": 6}}, "UTC", ms(2026, 2, 13))
    assert got == {"schedule": {"kind": "every", "everyMs": 21_600_000}}
    assert "anchorMs" not in got["schedule"]


# --- schedule kinds ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("tomorrow", "schedule must be an object"),
        (None, "schedule must be an object"),
        ({}, "schedule.kind is required"),
        ({"kind": "  "}, "schedule.kind is required"),
        ({"kind": "weekly"}, "Unsupported schedule.kind: weekly"),
        ({"kind": "at"}, AT_ERROR),
        ({"kind": "at", "at": "  "}, AT_ERROR),
        ({"kind": "at", "inMinutes": -5}, "schedule.inMinutes must be non-negative"),
        ({"kind": "at", "delayMs": -1}, "schedule.delayMs must be non-negative"),
        ({"kind": "at", "inHours": "soon"}, "schedule.inHours must be a number"),
        ({"kind": "at", "atMs": "later"}, "schedule.atMs must be a finite number"),
        ({"kind": "at", "in": "next week"}, IN_ERROR),
        ({"kind": "at", "in": 5}, IN_ERROR),
        ({"kind": "every"}, EVERY_ERROR),
        ({"kind": "every", "everyMinutes": 0}, EVERY_ERROR),
        ({"kind": "every", "everyHours": -2}, EVERY_ERROR),
        ({"kind": "every", "everyMs": "often"}, EVERY_ERROR),
        ({"kind": "every", "everyMs": 0.2}, EVERY_ERROR),
        ({"kind": "every", "everyMinutes": 5, "anchorMs": -1}, ANCHOR_ERROR),
        ({"kind": "cron"}, "schedule.expr is required for kind=cron"),
        ({"kind": "cron", "expr": " "}, "schedule.expr is required for kind=cron"),
        ({"kind": "at", "at": "whenever"}, UNPARSEABLE.format("whenever")),
    ],
)
def test_schedule_errors(raw, message: str) -> None:
    with pytest.raises(ScheduleError) as info:
        normalize_schedule_input(raw, "UTC", ms(2026, 2, 13))
    assert str(info.value) == message


def test_kind_is_trimmed_and_case_insensitive() -> None:
    assert normalize_schedule_input({"kind": " Every ", "everySeconds": 30}, "UTC", 0) == {
        "kind": "every",
        "everyMs": 30_000,
    }


def test_at_sources_in_order() -> None:
    now = ms(2026, 2, 13, 12)
    norm = lambda raw: normalize_schedule_input({"kind": "at", **raw}, "UTC", now)["atMs"]  # noqa: E731
    assert norm({"atMs": 5, "at": "in 1 hour"}) == 5
    assert norm({"at": 1_700_000_000_000}) == 1_700_000_000_000
    assert norm({"inMs": 250}) == now + 250
    assert norm({"delayMs": 250}) == now + 250
    assert norm({"inSeconds": 1.5}) == now + 1500
    assert norm({"inMinutes": 30, "at": "2030-01-01"}) == now + 1_800_000
    assert norm({"inHours": 0.5}) == now + 1_800_000
    assert norm({"inDays": 1}) == now + 86_400_000
    assert norm({"inMinutes": "15"}) == now + 900_000
    assert norm({"in": "in 45 minutes"}) == now + 2_700_000
    assert norm({"in": "2 hours"}) == now + 7_200_000
    assert norm({"when": "2026-02-14 08:00"}) == ms(2026, 2, 14, 8)
    assert norm({"atIso": "2026-02-14T08:00:00Z"}) == ms(2026, 2, 14, 8)
    assert norm({"inMinutes": 0}) == now


def test_every_units() -> None:
    every = lambda raw: normalize_schedule_input({"kind": "every", **raw}, "UTC", 0)  # noqa: E731
    assert every({"everyMs": 1234}) == {"kind": "every", "everyMs": 1234}
    assert every({"everySeconds": 10})["everyMs"] == 10_000
    assert every({"everyMinutes": 1.5})["everyMs"] == 90_000
    assert every({"everyHours": 0.1})["everyMs"] == 360_000  # rounded to whole ms
    assert every({"everyDays": 2})["everyMs"] == 172_800_000
    assert every({"everyMinutes": 5, "everyHours": 9})["everyMs"] == 300_000  # the first one given wins
    assert every({"everyHours": "6"})["everyMs"] == 21_600_000


def test_every_anchor_forms() -> None:
    now = ms(2026, 2, 13)
    anchor = lambda raw: normalize_schedule_input(  # noqa: E731
        {"kind": "every", "everyHours": 1, **raw}, "America/Chicago", now
    ).get("anchorMs")
    assert anchor({"anchorMs": 1000}) == 1000
    assert anchor({"anchor": 2000}) == 2000
    assert anchor({"anchor": "2026-02-14 09:00"}) == ms(2026, 2, 14, 15)
    assert anchor({"anchorAt": "2026-02-14T09:00Z"}) == ms(2026, 2, 14, 9)
    assert anchor({"startAt": "tomorrow 6am"}) == ms(2026, 2, 13, 12)
    assert anchor({}) is None


def test_cron_keeps_its_own_timezone() -> None:
    got = normalize_schedule_input({"kind": "cron", "expr": " 0 9 * * 1-5 ", "tz": "Europe/Paris"}, "UTC", 0)
    assert got == {"kind": "cron", "expr": "0 9 * * 1-5", "tz": "Europe/Paris"}


def test_cron_user_timezone_falls_back_to_utc() -> None:
    assert normalize_schedule_input({"kind": "cron", "expr": "0 9 * * *"}, "Bogus/Zone", 0)["tz"] == "UTC"


# --- the datetime parser ---------------------------------------------------------------------------------------

NOW = ms(2026, 2, 13, 18)  # 12:00 CST on Friday, February 13, 2026


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1700000000", 1_700_000_000_000),
        ("17000000000", 17_000_000_000),
        ("1700000000000", 1_700_000_000_000),
        ("1700000000000000", 1_700_000_000_000_000),
        ("in 2 hours", NOW + 7_200_000),
        ("IN 30 Minutes", NOW + 1_800_000),
        ("in 1.5 h", NOW + 5_400_000),
        ("in 90s", NOW + 90_000),
        ("in 10 secs", NOW + 10_000),
        ("in 500 ms", NOW + 500),
        ("in 2 milliseconds", NOW + 2),
        ("in 3 mins", NOW + 180_000),
        ("in 1 hr", NOW + 3_600_000),
        ("in 2 d", NOW + 172_800_000),
        ("in 1 day", NOW + 86_400_000),
        ("in .5 m", NOW + 30_000),
        ("today", ms(2026, 2, 13, tz=CHICAGO)),
        ("today 17:45", ms(2026, 2, 13, 17, 45, tz=CHICAGO)),
        ("Today at 5pm", ms(2026, 2, 13, 17, tz=CHICAGO)),
        ("tomorrow", ms(2026, 2, 14, tz=CHICAGO)),
        ("tomorrow 9:15am", ms(2026, 2, 14, 9, 15, tz=CHICAGO)),
        ("tomorrow at 9", ms(2026, 2, 14, 9, tz=CHICAGO)),
        ("tomorrow 12am", ms(2026, 2, 14, 0, tz=CHICAGO)),
        ("tomorrow 12pm", ms(2026, 2, 14, 12, tz=CHICAGO)),
        ("tomorrow 12:30 PM", ms(2026, 2, 14, 12, 30, tz=CHICAGO)),
        ("tomorrow 0:05", ms(2026, 2, 14, 0, 5, tz=CHICAGO)),
        ("2026-02-14T09:30:00Z", ms(2026, 2, 14, 9, 30)),
        ("2026-02-14T09:30Z", ms(2026, 2, 14, 9, 30)),
        ("2026-02-14T09:30:00.250Z", ms(2026, 2, 14, 9, 30) + 250),
        ("2026-02-14T09:30:00+01:00", ms(2026, 2, 14, 8, 30)),
        ("2026-02-14T09:30-0600", ms(2026, 2, 14, 15, 30)),
        ("2026-02-14 09:30 UTC", ms(2026, 2, 14, 9, 30)),
        ("2026-02-14 09:30 GMT", ms(2026, 2, 14, 9, 30)),
        ("Sat, 14 Feb 2026 09:30:00 GMT", ms(2026, 2, 14, 9, 30)),
        ("14 Feb 2026 09:30:00 +0100", ms(2026, 2, 14, 8, 30)),
        ("2026-02-14", ms(2026, 2, 14, tz=CHICAGO)),
        ("2026-02-14T09", ms(2026, 2, 14, 9, tz=CHICAGO)),
        ("2026-02-14 9:05", ms(2026, 2, 14, 9, 5, tz=CHICAGO)),
        ("2026-02-14T09:30:15", ms(2026, 2, 14, 9, 30, 15, tz=CHICAGO)),
        ("2026-02-14T09:30:15.5", ms(2026, 2, 14, 9, 30, 15, tz=CHICAGO) + 500),
        ("2026-07-04 09:00", ms(2026, 7, 4, 14)),  # CDT in summer
        ("  2026-02-14 09:30  ", ms(2026, 2, 14, 15, 30)),
        ("20260214T093000", ms(2026, 2, 14, 9, 30, tz=CHICAGO)),
    ],
)
def test_datetime_forms(text: str, expected: int) -> None:
    assert parse_datetime_input(text, "America/Chicago", NOW) == expected


def test_today_is_the_user_local_day() -> None:
    # 03:00Z on the 14th is still the 13th in Chicago
    now = ms(2026, 2, 14, 3)
    assert parse_datetime_input("today 8pm", "America/Chicago", now) == ms(2026, 2, 13, 20, tz=CHICAGO)
    assert parse_datetime_input("today 8pm", "UTC", now) == ms(2026, 2, 14, 20)


def test_tomorrow_across_a_dst_change() -> None:
    # 2026-03-08 is the spring-forward day in Chicago: 9am is CDT (14:00Z), not CST
    assert parse_datetime_input("tomorrow 9am", "America/Chicago", ms(2026, 3, 7, 18)) == ms(2026, 3, 8, 14)


def test_nonexistent_local_time_is_an_error() -> None:
    with pytest.raises(ScheduleError) as info:
        parse_datetime_input("2026-03-08 02:30", "America/Chicago", NOW)
    assert str(info.value) == (
        'Local time "2026-03-08 02:30" does not exist in America/Chicago (the clocks skip it for daylight saving time)'
    )
    with pytest.raises(ScheduleError, match="does not exist"):
        parse_datetime_input("today 2:30am", "America/Chicago", ms(2026, 3, 8, 7))


def test_repeated_local_time_means_the_first() -> None:
    assert parse_datetime_input("2026-11-01 01:30", "America/Chicago", NOW) == ms(2026, 11, 1, 6, 30)


def test_unknown_user_timezone_reads_utc() -> None:
    assert parse_datetime_input("2026-02-14 09:30", "Nowhere/Special", NOW) == ms(2026, 2, 14, 9, 30)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "soon",
        "next tuesday",
        "in two hours",
        "in 2 weeks",
        "in -2 hours",
        "tomorrow 13pm",
        "tomorrow 0am",
        "today 24:00",
        "today 10:60",
        "tomorrow at",
        "2026-02-30",
        "2026-02-30T09:00Z",
        "2026-13-01 10:00",
        "2026-02-14 25:00",
        "170000000",
        "12345678901234567",
    ],
)
def test_unparseable(text: str) -> None:
    with pytest.raises(ScheduleError) as info:
        parse_datetime_input(text, "UTC", NOW)
    assert str(info.value) == UNPARSEABLE.format(text)


# --- jobs and patches ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "job",
    [
        None,
        "job",
        {"schedule": {"kind": "at", "atMs": 1}, "spec": {"mode": "task", "message": "m"}},
        {"name": "", "schedule": {"kind": "at", "atMs": 1}, "spec": {"mode": "task", "message": "m"}},
        {"name": "n", "spec": {"mode": "task", "message": "m"}},
        {"name": "n", "schedule": {"kind": "at", "atMs": 1}},
    ],
)
def test_job_requires_name_schedule_and_spec(job) -> None:
    with pytest.raises(ScheduleError) as info:
        normalize_job_input(job, "UTC", 0)
    assert str(info.value) == "cron add requires name, schedule, and spec"


def test_job_keeps_other_fields() -> None:
    job = {
        "name": "n",
        "agentId": "ops",
        "deleteAfterRun": True,
        "schedule": {"kind": "every", "everyMinutes": 5},
        "spec": {"mode": "systemEvent", "text": "t"},
    }
    got = normalize_job_input(job, "UTC", 0)
    assert got == {**job, "schedule": {"kind": "every", "everyMs": 300_000}}
    assert job["schedule"] == {"kind": "every", "everyMinutes": 5}  # the input is not changed


def test_patch_requires_an_object() -> None:
    for patch in (None, "x", ["schedule"]):
        with pytest.raises(ScheduleError) as info:
            normalize_patch_input(patch, "UTC", 0)
        assert str(info.value) == "cron update requires patch object"


def test_patch_without_schedule_is_unchanged() -> None:
    assert normalize_patch_input({"name": "x", "enabled": False}, "UTC", 0) == {"name": "x", "enabled": False}
    assert normalize_patch_input({"schedule": None}, "UTC", 0) == {"schedule": None}


def test_patch_schedule_errors_surface() -> None:
    with pytest.raises(ScheduleError, match=r"schedule\.kind is required"):
        normalize_patch_input({"schedule": {"everyHours": 1}}, "UTC", 0)
