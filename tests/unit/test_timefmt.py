"""Time formatting in the user's timezone (spec §8.4, §12.3, §15.5)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from orbital.domain.timefmt import (
    format_duration_ms,
    format_envelope,
    format_time_full,
    format_time_short,
    resolve_timezone,
    schedule_human,
)

T = int(datetime(2026, 2, 13, 15, 30, tzinfo=UTC).timestamp() * 1000)  # Friday


# --- §15.5 ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["America/Chicago", "Europe/London", "UTC"])
def test_resolve_timezone_keeps_valid_names(name: str) -> None:
    assert resolve_timezone(name) == name


@pytest.mark.parametrize("name", ["Not/A/Timezone", "garbage", None, "", "   ", 7, "America", "../etc/passwd"])
def test_resolve_timezone_falls_back_to_utc(name) -> None:
    assert resolve_timezone(name) == "UTC"


def test_resolve_timezone_trims() -> None:
    assert resolve_timezone(" Europe/Paris ") == "Europe/Paris"


def test_format_time_short_utc() -> None:
    text = format_time_short(T, "UTC")
    assert "3:30" in text and "PM" in text and "UTC" in text
    assert text == "3:30 PM UTC"


def test_format_time_short_chicago() -> None:
    text = format_time_short(T, "America/Chicago")
    assert "9:30" in text and "AM" in text
    assert text == "9:30 AM CST"


def test_format_time_full_utc() -> None:
    text = format_time_full(T, "UTC")
    for part in ("Friday", "February", "2026", "3:30", "PM"):
        assert part in text
    assert text == "Friday, February 13, 2026 — 3:30 PM UTC"


def test_format_envelope_dm() -> None:
    assert re.match(r"^\[whatsapp · .+UTC\] Hello$", format_envelope("Hello", "whatsapp", "UTC", T, peer_kind="dm"))


def test_format_envelope_group_names_the_sender() -> None:
    text = format_envelope("Hello", "whatsapp", "UTC", T, peer_kind="group", sender="Alice (+1555)")
    assert re.match(r"^\[whatsapp · .+ · Alice \(\+1555\)\] Hello$", text)
    assert text == "[whatsapp · 3:30 PM UTC · Alice (+1555)] Hello"


def test_format_envelope_dm_leaves_the_sender_out() -> None:
    assert "Alice" not in format_envelope("Hello", "whatsapp", "UTC", T, peer_kind="dm", sender="Alice")


def test_format_envelope_without_peer_kind() -> None:
    assert re.match(r"^\[whatsapp · .+\] Hello$", format_envelope("Hello", "whatsapp", "UTC", T))
    assert format_envelope("Hello", "whatsapp", "UTC", T, sender="Alice") == "[whatsapp · 3:30 PM UTC] Hello"


# --- beyond the table ----------------------------------------------------------------------------------------------


def test_midnight_and_noon() -> None:
    midnight = int(datetime(2026, 2, 13, 0, 5, tzinfo=UTC).timestamp() * 1000)
    noon = int(datetime(2026, 2, 13, 12, 0, tzinfo=UTC).timestamp() * 1000)
    assert format_time_short(midnight, "UTC") == "12:05 AM UTC"
    assert format_time_short(noon, "UTC") == "12:00 PM UTC"


def test_daylight_saving_abbreviations() -> None:
    summer = int(datetime(2026, 7, 1, 15, 30, tzinfo=UTC).timestamp() * 1000)
    assert format_time_short(summer, "America/Chicago") == "10:30 AM CDT"
    assert format_time_short(summer, "Europe/London") == "4:30 PM BST"
    assert format_time_short(T, "Europe/London") == "3:30 PM GMT"


def test_numeric_abbreviations_read_as_gmt_offsets() -> None:
    assert format_time_short(T, "Asia/Dubai") == "7:30 PM GMT+4"
    assert format_time_short(T, "Asia/Kathmandu") == "9:15 PM GMT+5:45"
    assert format_time_short(T, "America/Sao_Paulo") == "12:30 PM GMT-3"


def test_full_format_crosses_the_date_line() -> None:
    assert format_time_full(T, "Pacific/Auckland") == "Saturday, February 14, 2026 — 4:30 AM NZDT"


def test_unknown_timezone_formats_in_utc() -> None:
    assert format_time_full(T, "Not/A/Timezone") == "Friday, February 13, 2026 — 3:30 PM UTC"


def test_invalid_instants() -> None:
    assert format_time_full(float("nan"), "UTC") == "Invalid Date"
    assert format_time_short(10**20, "UTC") == "Invalid Date"


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (86_400_000, "1 day"),
        (2 * 86_400_000, "2 days"),
        (3_600_000, "1 hour"),
        (21_600_000, "6 hours"),
        (90_000_000, "25 hours"),
        (60_000, "1 minute"),
        (900_000, "15 minutes"),
        (90_000, "90 seconds"),
        (1000, "1 second"),
        (45_000, "45 seconds"),
        (1500, "1500 ms"),
        (1, "1 ms"),
        (1500.0, "1500 ms"),
        (2.5, "2.5 ms"),
        (0, "0 ms"),
    ],
)
def test_format_duration(ms: float, text: str) -> None:
    assert format_duration_ms(ms) == text


def test_schedule_human() -> None:
    anchor = int(datetime(2026, 2, 14, 9, tzinfo=UTC).timestamp() * 1000)
    assert schedule_human({"kind": "at", "atMs": T}, "UTC") == "one-shot at Friday, February 13, 2026 — 3:30 PM UTC"
    assert (
        schedule_human({"kind": "every", "everyMs": 900_000, "anchorMs": anchor}, "America/Chicago")
        == "every 15 minutes (anchor Saturday, February 14, 2026 — 3:00 AM CST)"
    )
    assert schedule_human({"kind": "every", "everyMs": 86_400_000}, "UTC") == (
        "every 1 day (starting from creation time)"
    )
    assert schedule_human({"kind": "cron", "expr": "0 9 * * *", "tz": "Europe/Paris"}, "UTC") == (
        'cron "0 9 * * *" (Europe/Paris)'
    )
    assert schedule_human({"kind": "cron", "expr": "0 9 * * *"}, "America/Chicago") == (
        'cron "0 9 * * *" (America/Chicago)'
    )
    assert schedule_human({"kind": "cron", "expr": "0 9 * * *"}, "bogus") == 'cron "0 9 * * *" (UTC)'
