"""tools.list: native tools first, then each connected node's tools as `{nodeId}__{tool}`."""

from __future__ import annotations

import time
from typing import Any

from orbital.ports.lifecycle import disconnect
from orbital.tools.definitions import NATIVE_TOOLS

from tests.conftest import wait_for

ZETA_TOOLS = [
    {"name": "Bash", "description": "Run a shell command", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "Read", "description": "Read a file", "inputSchema": {"type": "object"}},
]
ALPHA_TOOLS = [
    {
        "name": "Search",
        "description": "Search the web",
        "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    },
]
ALPHA_RUNTIME = {
    "hostRole": "specialized",
    "hostCapabilities": ["text.search"],
    "toolCapabilities": {"Search": ["text.search"]},
}


def _after_ms(ms: int) -> None:
    """Wait (bounded) until the wall clock is past `ms`, so the next connection gets a later connectedAt."""
    wait_for(lambda: int(time.time() * 1000) > ms, 5, 0.001, what="the next millisecond")


def test_native_only(rpc: Any) -> None:
    tools = rpc.call("tools.list")["tools"]
    assert tools == NATIVE_TOOLS
    assert len(tools) == 12


def test_node_tools_in_connection_order_and_removed_on_disconnect(connect: Any, services: Any, rpc: Any) -> None:
    zeta = connect("node", "zeta", tools=ZETA_TOOLS)
    _after_ms(services.connections.node("zeta").connected_at)
    alpha = connect("node", "alpha", tools=ALPHA_TOOLS, nodeRuntime=ALPHA_RUNTIME)

    tools = rpc.call("tools.list")["tools"]
    names = [t["name"] for t in tools]
    assert names[:12] == [t["name"] for t in NATIVE_TOOLS]
    assert names[12:] == ["zeta__Bash", "zeta__Read", "alpha__Search"]
    assert tools[12] == {**ZETA_TOOLS[0], "name": "zeta__Bash"}
    assert tools[14] == {**ALPHA_TOOLS[0], "name": "alpha__Search"}

    # nodes may list tools too (the stock node uses it as a keepalive)
    assert [t["name"] for t in alpha.call("tools.list")["tools"]] == names

    disconnect(services, zeta.connection_id)
    names = [t["name"] for t in rpc.call("tools.list")["tools"]]
    assert names[12:] == ["alpha__Search"]

    disconnect(services, alpha.connection_id)
    assert len(rpc.call("tools.list")["tools"]) == 12


def test_reconnected_node_replaces_its_tools(connect: Any, services: Any, rpc: Any) -> None:
    first = connect("node", "box", tools=ZETA_TOOLS)
    connect("node", "box", tools=ALPHA_TOOLS, nodeRuntime=ALPHA_RUNTIME)
    names = [t["name"] for t in rpc.call("tools.list")["tools"]][12:]
    assert names == ["box__Search"]
    disconnect(services, first.connection_id)  # stale close: the newer socket keeps its tools
    assert [t["name"] for t in rpc.call("tools.list")["tools"]][12:] == ["box__Search"]
