"""A remote MCP server's `trust` (ADR 0045): a trusted server's results do not taint a run, its tools stay risky."""

from __future__ import annotations

from typing import Any

from orbital.domain import taint
from orbital.domain.config import defaults


def config(**servers: dict[str, Any]) -> dict[str, Any]:
    found = defaults()
    found["mcp"] = {"servers": servers}
    return found


def test_an_untrusted_servers_results_taint_by_default() -> None:
    cfg = config(docs={"url": "https://docs.example/mcp"})
    assert taint.is_untrusted(cfg, "mcp__docs__search")
    assert taint.is_untrusted(cfg, "mcp__other__search")  # not configured: the default patterns


def test_a_trusted_servers_results_do_not_taint_but_its_tools_stay_risky() -> None:
    cfg = config(docs={"url": "https://docs.example/mcp", "trust": "trusted"}, web={"url": "https://w.example/mcp"})
    assert not taint.is_untrusted(cfg, "mcp__docs__search")
    assert taint.is_risky("mcp__docs__search", {}, own_target=None)
    assert taint.is_untrusted(cfg, "mcp__web__search")  # another server keeps its own trust


def test_trust_is_read_only_for_the_servers_own_names() -> None:
    cfg = config(docs={"url": "https://docs.example/mcp", "trust": "trusted"})
    # a node's server of the same name is the node's, not the configured one; a look-alike is not the server's
    assert taint.is_untrusted(cfg, "laptop__mcp__docs__search")
    assert taint.is_untrusted(cfg, "mcp__docs-evil__search")
    assert taint.remote_mcp_server("mcp__docs__search") == "docs"
    assert taint.remote_mcp_server("mcp__docs") is None
    assert taint.remote_mcp_server("gsv__ReadFile") is None


def test_safe_tools_still_win_over_an_untrusted_server() -> None:
    cfg = config(docs={"url": "https://docs.example/mcp"})
    cfg["toolApproval"]["safeTools"] = ["mcp__docs__*"]
    assert not taint.is_untrusted(cfg, "mcp__docs__search")
    assert not taint.is_risky("mcp__docs__search", {}, own_target=None, safe=taint.safe_tools(cfg))


def test_the_prompt_counts_remote_mcp_tools_apart_and_says_whose_text_they_are() -> None:
    from orbital.domain.prompt import build_tooling_section

    tools = [{"name": "gsv__ReadFile"}, {"name": "box__Bash"}, {"name": "mcp__docs__search"}]
    section = build_tooling_section(tools)
    assert "Native tools: 1. Node tools: 1." in section
    assert "MCP tools: 1. Tools named `mcp__<server>__<tool>` are called on remote MCP servers" in section
    assert "MCP tools" not in build_tooling_section(tools[:2])  # unchanged without MCP servers
