"""Reset policies (spec §5.10; every row of §15.10). Daily boundaries are UTC."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from orbital.domain import config as cfg
from orbital.domain.reset_policy import daily_reset_time, initial_policy, merge_policy, should_auto_reset

HOUR = 3_600_000
MINUTE = 60_000


def ms(*args: int) -> int:
    return int(datetime(*args, tzinfo=UTC).timestamp() * 1000)


NOW = ms(2026, 3, 10, 10, 0)  # "today 10:00"


# --- §15.10 --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", [None, {"mode": "manual"}])
def test_manual_or_missing_policy_never_resets(policy):
    assert should_auto_reset(policy, NOW - 24 * HOUR, NOW) is False


def test_idle_exactly_at_the_limit_does_not_reset():
    assert should_auto_reset({"mode": "idle", "idleMinutes": 15}, NOW - 15 * MINUTE, NOW) is False


def test_idle_one_ms_past_the_limit_resets():
    assert should_auto_reset({"mode": "idle", "idleMinutes": 15}, NOW - 15 * MINUTE - 1, NOW) is True


def test_daily_resets_when_last_activity_is_before_the_boundary():
    boundary = ms(2026, 3, 10, 4, 0)
    assert should_auto_reset({"mode": "daily", "atHour": 4}, boundary - 1, NOW) is True


def test_daily_keeps_a_session_active_after_the_boundary():
    boundary = ms(2026, 3, 10, 4, 0)
    assert should_auto_reset({"mode": "daily", "atHour": 4}, boundary + 1, NOW) is False


def test_daily_reset_time_before_the_hour_is_yesterdays_boundary():
    assert daily_reset_time(ms(2026, 3, 10, 2, 0), 4) == ms(2026, 3, 9, 4, 0)


# --- more edges ----------------------------------------------------------------------------------------------


def test_daily_reset_time_at_and_after_the_hour_is_todays_boundary():
    assert daily_reset_time(ms(2026, 3, 10, 4, 0), 4) == ms(2026, 3, 10, 4, 0)
    assert daily_reset_time(NOW, 4) == ms(2026, 3, 10, 4, 0)
    assert daily_reset_time(ms(2026, 3, 1, 0, 30), 0) == ms(2026, 3, 1, 0, 0)
    assert daily_reset_time(ms(2026, 3, 1, 0, 30), 23) == ms(2026, 2, 28, 23, 0)


def test_daily_defaults_to_four_oclock():
    policy = {"mode": "daily"}
    assert should_auto_reset(policy, ms(2026, 3, 10, 3, 59), NOW) is True
    assert should_auto_reset(policy, ms(2026, 3, 10, 4, 1), NOW) is False
    assert daily_reset_time(NOW, None) == ms(2026, 3, 10, 4, 0)
    assert daily_reset_time(NOW, "bogus") == ms(2026, 3, 10, 4, 0)
    assert daily_reset_time(NOW, "6") == ms(2026, 3, 10, 6, 0)


def test_idle_defaults_to_an_hour_and_zero_means_any_gap():
    assert should_auto_reset({"mode": "idle"}, NOW - 60 * MINUTE, NOW) is False
    assert should_auto_reset({"mode": "idle"}, NOW - 60 * MINUTE - 1, NOW) is True
    assert should_auto_reset({"mode": "idle", "idleMinutes": 0}, NOW - 1, NOW) is True
    assert should_auto_reset({"mode": "idle", "idleMinutes": 0}, NOW, NOW) is False


def test_unknown_modes_never_reset():
    assert should_auto_reset({"mode": "weekly"}, 0, NOW) is False
    assert should_auto_reset({}, 0, NOW) is False


def test_initial_policy_copies_the_configured_default():
    policy = initial_policy(cfg.defaults())
    assert policy == {"mode": "daily", "atHour": 4}
    policy["atHour"] = 9
    assert initial_policy(cfg.defaults()) == {"mode": "daily", "atHour": 4}
    assert initial_policy(cfg.effective({"session": {"defaultResetPolicy": {"atHour": 3}}})) == {
        "mode": "daily",
        "atHour": 3,
    }
    assert initial_policy(cfg.effective({"session": {"defaultResetPolicy": {"mode": ""}}})) is None
    assert initial_policy({}) is None


def test_merge_policy():
    assert merge_policy(None, {"idleMinutes": 5}) == {"idleMinutes": 5, "mode": "manual"}
    assert merge_policy({"mode": "daily", "atHour": 4}, {"atHour": 6}) == {"mode": "daily", "atHour": 6}
    assert merge_policy({"mode": "daily"}, {"mode": "idle", "idleMinutes": 1}) == {"mode": "idle", "idleMinutes": 1}
    assert merge_policy({"mode": "daily"}, None) == {"mode": "daily"}
