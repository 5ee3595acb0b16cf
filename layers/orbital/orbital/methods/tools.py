"""`tools.list` (spec §2.1): the native tools, every connected node's tools under `{nodeId}__{name}`, and the remote MCP
servers' tools under `mcp__{server}__{tool}`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orbital.domain import roles
from orbital.protocol.registry import EVERY_MODE, NoParams, Result, Router
from orbital.tools import mcp_calls
from orbital.tools.catalog import all_tools

if TYPE_CHECKING:
    from orbital.protocol.context import CallContext

router = Router("tools")


class ToolDefinition(Result):
    name: str
    description: Any = None
    inputSchema: Any = None


class ToolsListResult(Result):
    tools: list[ToolDefinition]


@router.method("tools.list", params=NoParams, result=ToolsListResult, modes=EVERY_MODE, scope=roles.CONNECT)
def tools_list(ctx: CallContext, params: NoParams) -> dict[str, Any]:
    """Every tool an agent can call: the twelve native `gsv__*` tools, then the tools of each connected node (in
    the order the nodes connected) named `{nodeId}__{tool}`, then each enabled remote MCP server's allowed tools
    named `mcp__{server}__{tool}` (from the cache; a stale list is fetched again, waiting for its server at most
    `mcp_calls.REQUEST_LIST_MS`, so this is answered on a worker thread, not the local gateway's event loop)."""
    return {"tools": all_tools(ctx.services, cap_ms=mcp_calls.REQUEST_LIST_MS)}
