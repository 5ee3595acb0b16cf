"""Agent settings read from the effective configuration, each tolerant of junk values: `config.set` checks what it
stores (`orbital.domain.config_schema`, docs/configuration.md), but a value stored before it did, or written
straight to the table, still reads: a value that is not a usable number falls back to its default.

| path                          | default | meaning                                                         |
|-------------------------------|---------|-----------------------------------------------------------------|
| `timeouts.llmMs`              | 300000  | one model call, retries included (enforced, unlike GSV)         |
| `timeouts.toolMs`             | 60000   | a node tool call (min 1000)                                     |
| `timeouts.logsMs`             | 20000   | gsv__LogsGet (clamped 1 s to 120 s)                              |
| `agents.maxIterations`        | 25      | model calls with tools in one run before it ends with a note    |
| `budgets.session`             | none    | token budget of a session without its own `budget` (ADR 0026)   |
| `session.defaultBudget.maxTokens` | none | read as `budgets.session` when that is not set                 |
| `budgets.daily`, `budgets.monthly` | none | the gateway's tokens per UTC day / month (`agent.budgets`)   |
"""

from __future__ import annotations

import math
from typing import Any

DEFAULT_LLM_MS = 300_000
DEFAULT_TOOL_MS = 60_000
DEFAULT_LOGS_MS = 20_000
DEFAULT_MAX_ITERATIONS = 25


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _section(config: dict[str, Any], name: str) -> dict[str, Any]:
    value = config.get(name)
    return value if isinstance(value, dict) else {}


def llm_timeout_ms(config: dict[str, Any]) -> int:
    value = _number(_section(config, "timeouts").get("llmMs"))
    return max(1000, int(value)) if value is not None else DEFAULT_LLM_MS


def tool_timeout_ms(config: dict[str, Any]) -> int:
    value = _number(_section(config, "timeouts").get("toolMs"))
    return max(1000, int(value)) if value is not None else DEFAULT_TOOL_MS


def logs_timeout_ms(config: dict[str, Any]) -> int:
    value = _number(_section(config, "timeouts").get("logsMs"))
    return max(1000, int(value)) if value is not None else DEFAULT_LOGS_MS


def agent_logs_timeout_ms(config: dict[str, Any]) -> int:
    """gsv__LogsGet waits at most 120 s, whatever `timeouts.logsMs` says (spec §14.1)."""
    return min(120_000, logs_timeout_ms(config))


def max_iterations(config: dict[str, Any]) -> int:
    value = _number(_section(config, "agents").get("maxIterations"))
    return max(1, int(value)) if value is not None else DEFAULT_MAX_ITERATIONS
