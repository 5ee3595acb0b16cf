"""How long a reply's tool calls may hold the run when they call remote MCP servers (agent/tools.py `lease_ms`)."""

from __future__ import annotations

from orbital.agent import tools


def config(timeout_ms: int) -> dict[str, object]:
    return {
        "timeouts": {"toolMs": 60_000},
        "mcp": {"servers": {"slow": {"url": "https://slow.example/mcp", "timeoutMs": timeout_ms}}},
    }


def test_a_reply_calling_a_slow_mcp_server_holds_the_run_for_its_listing_and_its_call() -> None:
    calls = [{"name": "mcp__slow__search"}, {"name": "box__Bash"}]
    assert tools.lease_ms(config(300_000), calls) == 600_000


def test_otherwise_the_tool_timeout_holds() -> None:
    assert tools.lease_ms(config(10_000), [{"name": "mcp__slow__search"}]) == 60_000
    assert tools.lease_ms(config(300_000), [{"name": "box__Bash"}, {"name": "mcp__other__x"}]) == 60_000
