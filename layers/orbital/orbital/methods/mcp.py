"""Methods of the `mcp` family: the remote MCP servers of `mcp.servers` and their tools (ADR 0045).

`mcp.list` reads what the gateway knows (the cached tool lists; it connects to nothing); `mcp.test` connects to one
server now, lists its tools and caches them; `mcp.refresh` does that for one server or every enabled one. A test
or refresh waits at most `METHOD_WAIT_MS` per server whatever its `timeoutMs` (on AWS a request is answered within
29 s). Server failures are reported in the result, never as the method's error. Header values, login tokens and
client secrets are never part of a result; a URL is shown without its password and with its query's values masked.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from orbital.domain import mcp_names, roles
from orbital.domain.config import MASK
from orbital.errors import BadRequestError, NotFoundError
from orbital.protocol.frames import REPLY_BUDGET_BYTES, fit
from orbital.protocol.params import Text
from orbital.protocol.registry import CLIENT, NoParams, Params, Result, Router
from orbital.tools import mcp_client

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.protocol.context import CallContext

router = Router("mcp")

METHOD_WAIT_MS = 20_000
"""The longest `mcp.test` and `mcp.refresh` wait for one server."""
SHOWN_DESCRIPTION_CHARS = 300
"""Tool descriptions in these results are cut to this (the model gets them whole, up to the stored cap)."""


class McpTool(Result):
    name: str
    """The name the model calls: `mcp__{server}__{tool}`."""
    tool: str
    """The server's own name for it (what `tools.allow` / `tools.deny` patterns match, as well as `name`)."""
    description: str
    """The server's description (the server's text: untrusted), cut to 300 characters."""
    allowed: bool
    """Offered to the model (`mcp.servers.{name}.tools` allows it)."""


class McpServerInfo(Result):
    name: str
    url: str
    """The endpoint, without a password and with its query's values masked."""
    transport: str
    """`streamable-http` or `sse`."""
    enabled: bool
    trust: str
    """`untrusted` (its results taint the run) or `trusted`."""
    status: str
    """`ok`, `error`, `needs-login`, `disabled` or `unknown` (never listed yet)."""
    toolCount: int
    """The server's tools as last listed (allowed or not)."""
    tools: list[McpTool]
    toolsTruncated: bool
    """Some tools were left out of this reply to keep it within a WebSocket message."""
    lastError: str | None
    checkedAt: int | None
    """When the server was last tried (epoch ms)."""
    auth: str
    """`none` (no `oauth` section), `ok` or `needs-login`."""


class McpListResult(Result):
    servers: list[McpServerInfo]


class McpTestParams(Params):
    name: Text = None
    """The server's name (`mcp.servers.{name}`); a disabled server can be tested too."""


class McpTestResult(Result):
    name: str
    ok: bool
    status: str
    """`ok`, `error` or `needs-login`."""
    toolCount: int
    tools: list[McpTool]
    toolsTruncated: bool
    error: str | None
    elapsedMs: int


class McpRefreshParams(Params):
    name: Text = None
    """One server; without it, every enabled server."""


class McpRefreshed(Result):
    name: str
    status: str
    toolCount: int
    error: str | None


class McpRefreshResult(Result):
    servers: list[McpRefreshed]


def shown_url(url: str) -> str:
    """`url` as a result shows it: no user or password, the values of its query masked."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        if parts.port is not None:
            netloc += f":{parts.port}"
    except ValueError:
        return MASK
    query = urlencode([(key, MASK) for key, _ in parse_qsl(parts.query, keep_blank_values=True)], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def _tools(listed: mcp_client.ToolList, budget: int) -> tuple[list[dict[str, Any]], bool]:
    shown = [
        {
            "name": tool["name"],
            "tool": tool["tool"],
            "description": _cut(str(tool.get("description") or "")),
            "allowed": bool(tool["allowed"]),
        }
        for tool in listed.tools
    ]
    if not shown:
        return [], False
    return fit(shown, budget=budget)


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN_DESCRIPTION_CHARS else text[: SHOWN_DESCRIPTION_CHARS - 1] + "…"


def auth_state(services: Services, spec: mcp_client.ServerSpec, status: str) -> str:
    """`none` for a server without a login, else `needs-login` or `ok`."""
    if spec.oauth is None:
        return "none"
    return "needs-login" if status == "needs-login" else "ok"


def _budget(count: int) -> int:
    return max(2_000, (REPLY_BUDGET_BYTES - 8_000) // max(1, count))


@router.method("mcp.list", params=NoParams, result=McpListResult, reads_only=True, modes=CLIENT, scope=roles.READ)
def mcp_list(ctx: CallContext, params: NoParams) -> dict[str, Any]:
    """The configured MCP servers (enabled or not) with what the gateway last learned of each: status, tools (and
    whether each is offered), last error, when it was last tried, login state. Connects to nothing."""
    services = ctx.services
    servers = mcp_client.all_specs(services.config.effective())
    out = []
    for spec in servers:
        listed = mcp_client.cached_tools(services, spec)
        status = listed.status if spec.enabled else "disabled"
        tools, truncated = _tools(listed, _budget(len(servers)))
        out.append(
            {
                "name": spec.name,
                "url": shown_url(spec.url),
                "transport": spec.transport,
                "enabled": spec.enabled,
                "trust": spec.trust,
                "status": status,
                "toolCount": len(listed.tools),
                "tools": tools,
                "toolsTruncated": truncated,
                "lastError": listed.error,
                "checkedAt": listed.checked_at,
                "auth": auth_state(services, spec, listed.status),
            }
        )
    return {"servers": out}


def _named(ctx: CallContext, name: str | None) -> mcp_client.ServerSpec:
    if name is None or not name.strip():
        raise BadRequestError("name required")
    name = name.strip()
    if not mcp_names.valid_server_name(name):
        raise BadRequestError(f"an MCP server name is {mcp_names.SERVER_NAME_TEXT}")
    found = mcp_client.spec(ctx.services.config.effective(), name)
    if found is None:
        raise NotFoundError(f"no MCP server named {name} is configured (mcp.servers.{name})")
    return found


def _bounded(spec: mcp_client.ServerSpec) -> mcp_client.ServerSpec:
    return dataclasses.replace(spec, timeout_ms=min(spec.timeout_ms, METHOD_WAIT_MS))


@router.method("mcp.test", params=McpTestParams, result=McpTestResult, modes=CLIENT, scope=roles.OPERATE)
def mcp_test(ctx: CallContext, params: McpTestParams) -> dict[str, Any]:
    """Connect to one server now (enabled or not), list its tools and keep them as its cached list: whether that
    worked, the tools, the error, how long it took. Waits at most 20 s."""
    spec = _named(ctx, params.name)
    started = time.monotonic()
    listed = mcp_client.list_tools(ctx.services, _bounded(spec), force=True)
    elapsed = int((time.monotonic() - started) * 1000)
    tools, truncated = _tools(listed, _budget(1))
    return {
        "name": spec.name,
        "ok": listed.status == "ok",
        "status": listed.status,
        "toolCount": len(listed.tools),
        "tools": tools,
        "toolsTruncated": truncated,
        "error": listed.error if listed.status != "ok" else None,
        "elapsedMs": elapsed,
    }


@router.method("mcp.refresh", params=McpRefreshParams, result=McpRefreshResult, modes=CLIENT, scope=roles.OPERATE)
def mcp_refresh(ctx: CallContext, params: McpRefreshParams) -> dict[str, Any]:
    """List the tools of one server (`name`), or of every enabled server at once, now, and keep them: each server's
    status, tool count and error. Waits at most 20 s."""
    services = ctx.services
    config = services.config.effective()
    targets = [_named(ctx, params.name)] if params.name is not None else mcp_client.specs(config)
    if not targets:
        return {"servers": []}

    def refresh(spec: mcp_client.ServerSpec) -> dict[str, Any]:
        listed = mcp_client.list_tools(services, _bounded(spec), force=True)
        error = listed.error if listed.status != "ok" else None
        return {"name": spec.name, "status": listed.status, "toolCount": len(listed.tools), "error": error}

    with ThreadPoolExecutor(max_workers=min(8, len(targets)), thread_name_prefix="mcp-refresh") as pool:
        return {"servers": list(pool.map(refresh, targets))}
