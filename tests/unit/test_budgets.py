"""Token budgets (ADR 0026): limits read from the configuration, UTC periods, and how a refusal reads."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from orbital.agent import budgets as agent_budgets
from orbital.channels.adapters import is_passing
from orbital.domain import budgets
from orbital.errors import RpcError


def _ms(*when: int) -> int:
    return int(datetime(*when, tzinfo=UTC).timestamp() * 1000)


def test_the_session_limit_reads_its_own_then_budgets_session_then_the_old_default() -> None:
    assert budgets.session_limit({}, {}) is None
    old = {"session": {"defaultBudget": {"maxTokens": 5000}}}
    assert budgets.session_limit(old, {}) == 5000  # today's setting keeps working
    both = {**old, "budgets": {"session": 7000}}
    assert budgets.session_limit(both, {}) == 7000  # budgets.session wins when set
    assert budgets.session_limit({**old, "budgets": {"session": None}}, {}) == 5000  # not set: the old one
    assert budgets.session_limit({**old, "budgets": {"session": 0}}, {}) == 5000
    assert budgets.session_limit(both, {"budget": {"maxTokens": 100}}) == 100  # the session's own wins
    assert budgets.session_limit(both, {"budget": {"maxTokens": None}}) is None  # explicit null: off for it
    assert budgets.session_limit(both, {"budget": {"maxTokens": 0}}) is None  # explicit 0: off for it
    assert budgets.session_limit(both, {"budget": {}}) == 7000  # no maxTokens: the configured one


def test_gateway_limits_are_positive_numbers_or_unset() -> None:
    config = {"budgets": {"daily": 10_000, "monthly": 250_000.9}}
    found = budgets.limits(config, {})
    assert (found.session, found.daily, found.monthly) == (None, 10_000, 250_000)
    assert found.gateway and found.any
    for junk in (None, 0, -5, 0.5, "100", True, float("inf"), [100]):
        assert budgets.gateway_limit({"budgets": {"daily": junk}}, "daily") is None, junk
    assert budgets.limits({"budgets": "lots"}, {}) == budgets.Limits()
    assert not budgets.limits({}, {}).any


def test_periods_are_utc_days_and_months_that_expire_a_little_after_the_month() -> None:
    period = budgets.period_of(_ms(2025, 1, 31, 23, 59, 59))
    assert (period.month, period.day, period.day_name) == ("2025-01", 31, "2025-01-31")
    assert period.name("daily") == "2025-01-31" and period.name("monthly") == "2025-01"
    february = int(datetime(2025, 2, 1, tzinfo=UTC).timestamp())
    assert february < period.expires_at <= february + 3 * 86400
    assert budgets.period_of(_ms(2025, 2, 1)).day_name == "2025-02-01"
    december = budgets.period_of(_ms(2025, 12, 31, 12))
    assert december.month == "2025-12"
    assert december.expires_at > int(datetime(2026, 1, 1, tzinfo=UTC).timestamp())


def test_a_refusal_names_scope_used_and_limit_in_both_dialects() -> None:
    exc = budgets.BudgetExceededError("daily", 10234, 10000, estimate=512)
    assert isinstance(exc, RpcError) and exc.code == 429 and exc.retryable is False
    assert exc.exoclaw_message == "token budget exceeded (daily: 10234/10000)"
    assert exc.message.startswith("Token budget exceeded (daily: 10234/10000): ")
    assert "budgets.daily" in exc.message and "512" in exc.message
    assert exc.to_wire()["code"] == 429
    session = budgets.BudgetExceededError("session", 9500, 10000)
    assert session.exoclaw_message == "token budget exceeded (session: 9500/10000)"
    assert "session.patch" in session.message
    assert "budgets.monthly" in budgets.BudgetExceededError("monthly", 1, 1).message
    assert not is_passing(exc)  # a channel message refused by a budget is answered, not delivered again


@pytest.mark.parametrize("scope", ["session", "daily", "monthly"])
def test_a_runs_budget_note_tells_which_refusal_it_was(scope: str) -> None:
    exc = budgets.BudgetExceededError(scope, 60, 50, estimate=13)
    note = {"role": "assistant", "model": budgets.NOTE_REASON, "content": [{"type": "text", "text": exc.note()}]}
    assert exc.note().startswith(f"Token budget reached ({scope}: 60/50)")
    found = agent_budgets.exceeded_of(note)
    assert found is not None and found.exoclaw_message == f"token budget exceeded ({scope}: 60/50)"
    assert agent_budgets.exceeded_of({**note, "model": "gpt-test"}) is None
    assert agent_budgets.exceeded_of(None) is None


def test_an_unanswered_call_counts_its_input_and_what_was_streamed() -> None:
    assert budgets.unanswered_usage(500, 40, None) == {"input": 500, "output": 40, "totalTokens": 540}
    # the provider's own count of the input wins (with its cache); its output count, when behind what streamed, not
    provider = {"input": 300, "cacheRead": 100, "cacheWrite": 0, "output": 1}
    assert budgets.unanswered_usage(500, 40, provider) == {"input": 400, "output": 40, "totalTokens": 440}
    assert budgets.unanswered_usage(500, 40, {"input": 0, "output": 90}) == {
        "input": 500,
        "output": 90,
        "totalTokens": 590,
    }
