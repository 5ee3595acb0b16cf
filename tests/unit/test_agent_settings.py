"""Agent settings read from unvalidated configuration, and the effective model (F15)."""

from __future__ import annotations

from orbital.agent import context, settings
from orbital.domain import budgets


def test_defaults_and_junk_values_fall_back() -> None:
    assert settings.llm_timeout_ms({}) == 300_000
    assert settings.tool_timeout_ms({"timeouts": {"toolMs": "soon"}}) == 60_000
    assert settings.tool_timeout_ms({"timeouts": {"toolMs": 10}}) == 1000  # at least a second
    assert settings.max_iterations({"agents": {"maxIterations": 3.9}}) == 3
    assert settings.max_iterations({"agents": {"maxIterations": True}}) == 25
    assert settings.agent_logs_timeout_ms({"timeouts": {"logsMs": 10_000_000}}) == 120_000


def test_token_budget_per_session_over_the_configured_default() -> None:
    config = {"session": {"defaultBudget": {"maxTokens": 5000}}}
    assert budgets.session_limit(config, {}) == 5000
    assert budgets.session_limit(config, {"budget": {"maxTokens": 100}}) == 100
    assert budgets.session_limit(config, {"budget": {"maxTokens": None}}) is None  # switched off for this session
    assert budgets.session_limit({}, {}) is None


def test_effective_model_message_over_session_over_config() -> None:
    config = {"model": {"provider": "anthropic", "id": "claude-x"}}
    assert context.effective_model(config, {}, {}) == {"provider": "anthropic", "id": "claude-x"}
    session = {"settings": {"model": {"id": "claude-y"}}}  # a model without provider keeps the configured one
    assert context.effective_model(config, session, {}) == {"provider": "anthropic", "id": "claude-y"}
    override = {"model": {"provider": "openai", "id": "gpt-z"}}
    assert context.effective_model(config, session, override) == {"provider": "openai", "id": "gpt-z"}
    assert context.effective_thinking({"settings": {"thinkingLevel": "none"}}, {}) is None
    assert context.effective_thinking({"settings": {"thinkingLevel": "low"}}, {"thinkLevel": "high"}) == "high"
