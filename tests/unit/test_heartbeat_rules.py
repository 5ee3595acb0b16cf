"""Heartbeat rules (spec §10 with fix F8): intervals, settings, active hours, delivery target, reply filter, dedupe."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from orbital.domain import heartbeat as hb
from orbital.domain.config import DEFAULT_HEARTBEAT_PROMPT, defaults, effective


def ms(text: str) -> int:
    """Epoch milliseconds of a UTC wall-clock time `YYYY-MM-DD HH:MM`."""
    return int(datetime.strptime(text, "%Y-%m-%d %H:%M").replace(tzinfo=UTC).timestamp() * 1000)


# --- parse_every ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("0", 0),
        ("0m", 0),
        ("30m", 30 * 60_000),
        ("1h", 3_600_000),
        ("1h30m", 90 * 60_000),
        ("2h15m10s", 2 * 3_600_000 + 15 * 60_000 + 10_000),
        ("45s", 45_000),
        ("every 5m please", 5 * 60_000),
        ("10m 20m", 10 * 60_000),  # only the first match of each unit counts
        ("1d", 0),
        ("90", 0),
        ("500ms", 500 * 60_000),  # "500m" matches the minutes; "ms" has no digits before its "s"
        ("0h", 0),
        ("abc", 0),
        (None, 0),
        (30, 0),
    ],
)
def test_parse_every(text: object, expected: int) -> None:
    assert hb.parse_every(text) == expected


def test_next_heartbeat_at() -> None:
    assert hb.next_heartbeat_at(1000, 500) == 1500
    assert hb.next_heartbeat_at(1000, 0) is None


# --- settings and agents ----------------------------------------------------------------------------------------------


def test_defaults_apply_without_agents() -> None:
    config = defaults()
    assert hb.agent_ids(config) == ["main"]
    settings = hb.effective_settings(config, "main")
    assert settings.every_ms == 30 * 60_000
    assert settings.prompt == DEFAULT_HEARTBEAT_PROMPT
    assert settings.target == "last"
    assert settings.active_hours == {"start": "08:00", "end": "23:00"}


def test_agent_settings_shallow_merge_over_the_default() -> None:
    config = effective(
        {
            "agents": {
                "list": [
                    {"id": "ops", "heartbeat": {"every": "5m", "activeHours": {"start": "22:00", "end": "06:00"}}},
                    {"id": "Work", "default": True, "heartbeat": {"target": "none", "prompt": "Check the build."}},
                    {"id": "ops"},
                    {"name": "no id"},
                ],
                "defaultHeartbeat": {"every": "1h"},
            }
        }
    )
    assert hb.agent_ids(config) == ["ops", "Work"]  # raw, in order, once each
    ops = hb.effective_settings(config, "ops")
    assert ops.every_ms == 5 * 60_000
    assert ops.target == "last"
    assert ops.prompt == DEFAULT_HEARTBEAT_PROMPT
    assert ops.active_hours == {"start": "22:00", "end": "06:00"}  # replaced whole, not merged
    work = hb.effective_settings(config, "Work")
    assert (work.every_ms, work.target, work.prompt) == (3_600_000, "none", "Check the build.")
    assert hb.effective_settings(config, "work").target == "none"  # a normalized id finds its entry too
    other = hb.effective_settings(config, "elsewhere")
    assert other.every_ms == 3_600_000 and other.target == "last"


def test_the_default_agent_is_scheduled_when_the_list_names_none() -> None:
    assert hb.agent_ids(effective({"agents": {"list": [{"name": "x"}]}})) == ["main"]
    assert hb.agent_ids({}) == ["main"]


def test_odd_settings_fall_back() -> None:
    config = {"agents": {"defaultHeartbeat": {"every": None, "prompt": "  ", "target": 3, "activeHours": "always"}}}
    settings = hb.effective_settings(config, "main")
    assert settings == hb.HeartbeatSettings(0, DEFAULT_HEARTBEAT_PROMPT, "last", None)


def test_session_key() -> None:
    assert hb.session_key("main") == "agent:main:heartbeat:system:internal"
    assert hb.session_key("Ops") == "agent:ops:heartbeat:system:internal"


# --- active hours -----------------------------------------------------------------------------------------------------


DAY = {"start": "08:00", "end": "23:00"}


@pytest.mark.parametrize(
    ("clock", "inside"),
    [("07:59", False), ("08:00", True), ("12:00", True), ("22:59", True), ("23:00", False), ("23:30", False)],
)
def test_a_daytime_window_includes_its_start_and_excludes_its_end(clock: str, inside: bool) -> None:
    assert hb.within_active_hours(DAY, ms(f"2026-01-15 {clock}"), "UTC") is inside


@pytest.mark.parametrize(
    ("clock", "inside"),
    [("21:59", False), ("22:00", True), ("23:59", True), ("00:00", True), ("05:59", True), ("06:00", False)],
)
def test_an_overnight_window_spans_midnight(clock: str, inside: bool) -> None:
    night = {"start": "22:00", "end": "06:00"}
    assert hb.within_active_hours(night, ms(f"2026-01-15 {clock}"), "UTC") is inside


def test_no_window_or_an_unreadable_one_means_any_time() -> None:
    now = ms("2026-01-15 03:00")
    assert hb.within_active_hours(None, now, "UTC")
    assert hb.within_active_hours({"start": "late", "end": "23:00"}, now, "UTC")
    assert hb.within_active_hours({"start": "08:00"}, now, "UTC")
    assert hb.within_active_hours({"start": "25:00", "end": "23:00"}, now, "UTC")
    assert hb.within_active_hours({"start": "09:00", "end": "09:00"}, now, "UTC")  # a whole day
    assert hb.within_active_hours({"start": "00:00", "end": "24:00"}, ms("2026-01-15 23:59"), "UTC")
    assert not hb.within_active_hours({"start": "8", "end": "9"}, now, "UTC")  # bare hours are read too


def test_time_zones() -> None:
    noon_utc = ms("2026-01-15 12:00")  # 07:00 in New York (EST), 21:00 in Tokyo
    morning = {"start": "08:00", "end": "20:00"}
    assert hb.within_active_hours(morning, noon_utc, "Asia/Tokyo")  # absent timezone: UTC, not the user's
    assert hb.within_active_hours({**morning, "timezone": "local"}, noon_utc, "Asia/Tokyo")
    assert not hb.within_active_hours({**morning, "timezone": "America/New_York"}, noon_utc, "UTC")
    assert not hb.within_active_hours({**morning, "timezone": "Asia/Tokyo"}, noon_utc, "UTC")
    assert hb.within_active_hours({**morning, "timezone": "Europe/Amsterdam"}, noon_utc, "UTC")
    # an unknown zone reads as UTC
    assert hb.within_active_hours({**morning, "timezone": "Mars/Olympus"}, noon_utc, "UTC")


def test_the_user_timezone_is_used_for_user() -> None:
    noon_utc = ms("2026-01-15 12:00")
    morning = {"start": "08:00", "end": "20:00", "timezone": "user"}
    assert not hb.within_active_hours(morning, noon_utc, "America/New_York")  # 07:00 there (F8)
    assert hb.within_active_hours(morning, noon_utc + 3_600_000, "America/New_York")
    assert not hb.within_active_hours(morning, noon_utc, "Asia/Tokyo")
    assert hb.within_active_hours(morning, noon_utc, "UTC")
    assert hb.within_active_hours(morning, noon_utc, "No/Such_Zone")  # UTC
    assert hb.within_active_hours(morning, noon_utc, None)
    assert hb.active_hours_zone(morning, "Asia/Tokyo") == "Asia/Tokyo"
    assert hb.active_hours_zone({"timezone": "USER"}, "Asia/Tokyo") == "Asia/Tokyo"
    assert hb.active_hours_zone({}, "Asia/Tokyo") == "UTC"


def test_daylight_saving_time_is_followed() -> None:
    window = {"start": "08:00", "end": "09:00", "timezone": "Europe/Amsterdam"}
    assert hb.within_active_hours(window, ms("2026-01-15 07:30"), "UTC")  # CET, UTC+1
    assert not hb.within_active_hours(window, ms("2026-07-15 07:30"), "UTC")  # CEST, UTC+2: 09:30
    assert hb.within_active_hours(window, ms("2026-07-15 06:30"), "UTC")


# --- delivery target --------------------------------------------------------------------------------------------------


LAST = {
    "agentId": "main",
    "channel": "whatsapp",
    "accountId": "default",
    "peer": {"kind": "dm", "id": "+31600000000", "name": "Ann"},
    "sessionKey": "agent:main:main",
    "timestamp": 1,
}


def test_delivery_targets() -> None:
    expected = {
        "kind": "heartbeat",
        "agentId": "main",
        "channel": "whatsapp",
        "accountId": "default",
        "peer": {"kind": "dm", "id": "+31600000000", "name": "Ann"},
    }
    assert hb.resolve_delivery("last", LAST, "main") == expected
    assert hb.resolve_delivery("whatsapp", LAST, "main") == expected
    assert hb.resolve_delivery("discord", LAST, "main") is None
    assert hb.resolve_delivery("none", LAST, "main") is None
    assert hb.resolve_delivery("last", None, "main") is None
    assert hb.resolve_delivery("last", {"sessionKey": "agent:main:main"}, "main") is None


# --- reply filter (F8) ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "HEARTBEAT_OK",
        "  HEARTBEAT_OK \n",
        "HEARTBEAT_OK - all quiet",
        "All quiet: HEARTBEAT_OK",
        "HEARTBEAT_OK: nothing to report today.",
        "**HEARTBEAT_OK**",
        "Checked mail and calendar, nothing new. HEARTBEAT_OK",
        "x" * 300 + " HEARTBEAT_OK",
        "",
        "   ",
        " -- : -- ",
        None,
    ],
)
def test_acknowledgements_are_not_delivered(text: str | None) -> None:
    assert hb.filter_reply(text) is None


def test_real_alerts_are_delivered_even_when_short() -> None:
    assert hb.filter_reply("Disk /var is 97% full.") == "Disk /var is 97% full."  # GSV dropped this (F8)
    assert hb.filter_reply("  Server down!\n") == "Server down!"
    assert hb.filter_reply(":: Backup failed --") == "Backup failed"


def test_long_text_around_the_token_is_an_alert() -> None:
    body = "The nightly backup failed. " * 12  # > 300 characters
    assert hb.filter_reply(f"HEARTBEAT_OK: {body}") == body.strip()
    assert hb.filter_reply(f"{body} HEARTBEAT_OK") == body.strip()
    assert len(body.strip()) > 300
    exactly = "y" * 301
    assert hb.filter_reply(f"HEARTBEAT_OK {exactly}") == exactly
    assert hb.filter_reply(f"HEARTBEAT_OK {'y' * 300}") is None


# --- dedupe -----------------------------------------------------------------------------------------------------------


def test_duplicates_within_a_day() -> None:
    now = ms("2026-01-15 12:00")
    day = 24 * 3_600_000
    assert hb.is_duplicate("Disk full", "Disk full", now - 1000, now)
    assert hb.is_duplicate("  Disk full ", "Disk full\n", now - day + 1, now)
    assert not hb.is_duplicate("Disk full", "Disk full", now - day, now)
    assert not hb.is_duplicate("Disk full", "Disk almost full", now - 1000, now)
    assert not hb.is_duplicate("Disk full", None, None, now)
    assert not hb.is_duplicate("Disk full", "Disk full", None, now)
    assert not hb.is_duplicate("Disk full", "Disk full", True, now)
