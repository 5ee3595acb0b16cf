"""`tools.list` (spec §2.1): the native tools, then every connected node's tools under `{nodeId}__{name}`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orbital.protocol.registry import NoParams, Result, Router
from orbital.tools.definitions import native_tool_definitions

if TYPE_CHECKING:
    from orbital.protocol.context import CallContext
    from orbital.runtime.services import Services

router = Router("tools")

NODE_TOOL_SEPARATOR = "__"


class ToolDefinition(Result):
    name: str
    description: Any = None
    inputSchema: Any = None


class ToolsListResult(Result):
    tools: list[ToolDefinition]


def node_tool_name(node_id: str, tool_name: str) -> str:
    return f"{node_id}{NODE_TOOL_SEPARATOR}{tool_name}"


def all_tools(services: Services) -> list[dict[str, Any]]:
    """Native definitions first (protocol order), then each connected node's tools in connection order, renamed
    `{nodeId}__{name}` with everything else left as the node declared it."""
    tools = native_tool_definitions()
    for node in services.connections.nodes():
        for tool in node.tools:
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                continue
            tools.append({**tool, "name": node_tool_name(node.node_id, tool["name"])})
    return tools


@router.method("tools.list", params=NoParams, result=ToolsListResult)
def tools_list(ctx: CallContext, params: NoParams) -> dict[str, Any]:
    """Every tool an agent can call: the twelve native `gsv__*` tools, then the tools of each connected node (in
    the order the nodes connected) named `{nodeId}__{tool}`."""
    return {"tools": all_tools(ctx.services)}
