"""Which tools exist right now: the native tools, then each connected node's tools under `{nodeId}__{tool}` (spec
§2.1, fix F1), then each enabled remote MCP server's allowed tools under `mcp__{server}__{tool}` (ADR 0045). Shared by
`tools.list`, `tool.invoke` and the agent turn."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orbital.tools.definitions import native_tool_definitions
from orbital.tools.mcp_calls import remote_tools

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.store.connections import NodeEntry

NODE_TOOL_SEPARATOR = "__"


def node_tool_name(node_id: str, tool_name: str) -> str:
    return f"{node_id}{NODE_TOOL_SEPARATOR}{tool_name}"


def split_tool_name(name: str) -> tuple[str, str] | None:
    """`{nodeId}__{tool}` (canonical) or `{nodeId}:{tool}` (F1), split at the first separator."""
    for sep in (NODE_TOOL_SEPARATOR, ":"):
        idx = name.find(sep)
        if idx > 0 and idx + len(sep) < len(name):
            return name[:idx], name[idx + len(sep) :]
    return None


def find_node_for_tool(services: Services, name: str) -> tuple[NodeEntry, str] | None:
    """The connected node that provides `name`, and the tool's own (un-namespaced) name."""
    parts = split_tool_name(name)
    if parts is None:
        return None
    node = services.connections.node(parts[0])
    if node is None or not any(t.get("name") == parts[1] for t in node.tools):
        return None
    return node, parts[1]


def node_tools(nodes: list[NodeEntry]) -> list[dict[str, Any]]:
    tools = []
    for node in nodes:
        for tool in node.tools:
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                continue
            tools.append({**tool, "name": node_tool_name(node.node_id, tool["name"])})
    return tools


def all_tools(
    services: Services, nodes: list[NodeEntry] | None = None, *, cap_ms: int | None = None
) -> list[dict[str, Any]]:
    """Native definitions first (protocol order), then each connected node's tools in connection order, renamed
    `{nodeId}__{name}` with everything else left as the node declared it, then the remote MCP servers' tools in the
    order the servers are configured (listed from the cache; a stale list is fetched again within the server's
    timeout, or `cap_ms` when given: see `mcp_calls.remote_tools`)."""
    if nodes is None:
        nodes = services.connections.nodes()
    return native_tool_definitions() + node_tools(nodes) + remote_tools(services, cap_ms=cap_ms)
