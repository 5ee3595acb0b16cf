"""Spend caps in USD, the pure part (ADR 0044): prices (database and overrides), periods in a time zone, limits and
how a refusal reads."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from orbital.domain import spend
from orbital.domain.budgets import BudgetExceededError
from orbital.domain.spend import SpendExceededError, UnpricedModelError, Usage


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


# --- prices ---------------------------------------------------------------------------------------------------------


def test_the_price_database_prices_a_known_model_with_its_cache_reads_and_writes() -> None:
    plain = spend.price({}, "anthropic", "claude-sonnet-4-20250514", Usage(input=1_000_000))
    output = spend.price({}, "anthropic", "claude-sonnet-4-20250514", Usage(output=1_000_000))
    cached = spend.price({}, "anthropic", "claude-sonnet-4-20250514", Usage(cache_read=1_000_000))
    written = spend.price({}, "anthropic", "claude-sonnet-4-20250514", Usage(cache_write=1_000_000))
    assert plain == pytest.approx(3.0)
    assert output == pytest.approx(15.0)
    assert cached == pytest.approx(0.3)  # a cache read is cheaper than input
    assert written == pytest.approx(3.75)  # a cache write dearer


def test_an_override_comes_before_the_database_and_an_unknown_model_has_no_price() -> None:
    config = {
        "spend": {
            "prices": {
                "anthropic/claude-sonnet-4-20250514": {"inputPerMTok": 1, "outputPerMTok": 2, "cacheReadPerMTok": 0.5},
                "local/llama": {"inputPerMTok": 0.1, "outputPerMTok": 0.2},
            }
        }
    }
    usage = Usage(input=1_000_000, output=1_000_000, cache_read=2_000_000, cache_write=1_000_000)
    assert spend.price(config, "anthropic", "claude-sonnet-4-20250514", usage) == pytest.approx(1 + 2 + 1 + 1)
    assert spend.price(config, "local", "llama", Usage(input=500_000, output=500_000)) == pytest.approx(0.15)
    assert spend.price({}, "local", "llama", Usage(input=1)) is None
    assert spend.price({}, "openai", "no-such-model-anywhere", Usage(input=1)) is None


def test_usage_of_a_reply_reads_its_token_counts() -> None:
    assert Usage.of({"input": 10, "output": 5, "cacheRead": 3, "cacheWrite": True, "totalTokens": 18}) == Usage(
        10, 5, 3, 0
    )
    assert Usage.of(None) == Usage()


# --- periods --------------------------------------------------------------------------------------------------------


def test_a_day_is_a_calendar_day_of_the_time_zone_across_its_midnight() -> None:
    tz = ZoneInfo("America/New_York")
    before = spend.window(spend.DAILY, ms("2026-03-10T03:59:00+00:00"), tz)  # 23:59 in New York on the 9th
    after = spend.window(spend.DAILY, ms("2026-03-10T04:00:00+00:00"), tz)  # 00:00 on the 10th
    assert (before.key, after.key) == ("2026-03-09", "2026-03-10")
    assert before.resets_at_ms == ms("2026-03-10T04:00:00+00:00")
    assert after.resets_at_ms == ms("2026-03-11T04:00:00+00:00")
    utc = spend.window(spend.DAILY, ms("2026-03-10T03:59:00+00:00"), UTC)
    assert utc.key == "2026-03-10"  # the same moment is already the 10th in UTC


def test_a_day_with_a_clock_change_resets_at_the_next_local_midnight() -> None:
    tz = ZoneInfo("Europe/Berlin")
    day = spend.window(spend.DAILY, ms("2026-03-29T12:00:00+02:00"), tz)  # 23 hours long
    assert day.key == "2026-03-29"
    assert day.resets_at_ms == ms("2026-03-30T00:00:00+02:00")


def test_a_month_ends_at_the_time_zones_midnight_and_december_rolls_the_year() -> None:
    tz = ZoneInfo("Asia/Tokyo")
    last = spend.window(spend.MONTHLY, ms("2026-01-31T14:59:59+00:00"), tz)  # 23:59:59 on Jan 31 in Tokyo
    first = spend.window(spend.MONTHLY, ms("2026-01-31T15:00:00+00:00"), tz)
    assert (last.key, first.key) == ("2026-01", "2026-02")
    assert last.resets_at_ms == ms("2026-02-01T00:00:00+09:00")
    december = spend.window(spend.MONTHLY, ms("2026-12-15T00:00:00+00:00"), UTC)
    assert (december.key, december.resets_at_ms) == ("2026-12", ms("2027-01-01T00:00:00+00:00"))
    assert december.expires_at > december.resets_at_ms // 1000


def test_a_session_period_is_its_session_id_and_has_no_reset_time() -> None:
    session = spend.window(spend.SESSION, 0, UTC, session_id="abc")
    assert (session.key, session.resets_at_ms) == ("abc", None)


def test_the_configured_zone_and_a_bad_one() -> None:
    assert spend.zone_name({}) == "UTC"
    assert spend.zone({"spend": {"timeZone": "Europe/Paris"}}) == ZoneInfo("Europe/Paris")
    assert spend.zone({"spend": {"timeZone": "Not/AZone"}}) == UTC


# --- limits ---------------------------------------------------------------------------------------------------------


def test_the_limits_that_apply_to_a_call() -> None:
    config = {
        "spend": {"limits": {"daily": 5, "monthly": 50, "session": 2}},
        "agents": {"list": [{"id": "work", "spend": {"limits": {"daily": 1, "session": 0.5}}}]},
    }
    found = spend.caps(config, agent_id="work", session_key="agent:work:main", job_limit=0.25, job_id="j1")
    assert [(c.scope, c.period, c.limit) for c in found] == [
        ("global", "daily", 5.0),
        ("agent:work", "daily", 1.0),
        ("global", "monthly", 50.0),
        ("session:agent:work:main", "session", 0.5),  # the smaller of the gateway's and the agent's
        ("cron:j1", "daily", 0.25),
    ]
    assert spend.caps({"spend": {"limits": {"daily": 0, "monthly": None}}}) == []
    assert spend.any_limit(config) and not spend.any_limit({})
    assert spend.alert_at({}) == 0.8 and spend.alert_at({"spend": {"alertAt": 0.5}}) == 0.5


# --- refusals -------------------------------------------------------------------------------------------------------


def test_a_refusal_reads_as_the_gsv_sentence_and_is_a_budget_refusal() -> None:
    refused = SpendExceededError("daily", 4.981, 5)
    assert isinstance(refused, BudgetExceededError)  # every path that stops on a token budget stops on it too
    assert refused.code == 429 and refused.retryable is False
    assert refused.message == "spend limit reached (daily: $4.98 / $5.00)"
    assert refused.exoclaw_message == "spend limit exceeded (daily: $4.98/$5.00)"
    assert (refused.period, refused.used, refused.limit) == ("daily", 4.981, 5.0)
    again = SpendExceededError.from_details(refused.to_wire()["details"])
    assert again is not None and again.message == refused.message
    assert SpendExceededError.from_details({"budget": {}}) is None
    noted = spend.exceeded_in_note(refused.note())
    assert noted is not None and noted.exoclaw_message == refused.exoclaw_message


def test_an_unpriced_model_names_the_override_to_set() -> None:
    refused = UnpricedModelError("local", "llama")
    assert 'spend.prices["local/llama"]' in refused.message
    assert "spend.unpricedModels" in refused.message
    assert isinstance(refused, BudgetExceededError) and refused.code == 400 and refused.note() == refused.message


def test_the_price_database_is_not_imported_with_the_gateway() -> None:
    import subprocess
    import sys

    code = (
        "import sys, orbital.agent.turn, orbital.agent.spend, orbital.methods; orbital.methods.registry(); "
        "print('genai_prices' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"
    assert spend.price({}, "openai", "gpt-4o", Usage(input=1)) is not None  # loaded when a price is asked for
