"""Each remote MCP server's tool list as last read, shared by every process of the gateway (ADR 0045).

One item per server (`keys.mcp_tools`): the tools (`{name, description, inputSchema}` as the server listed them,
capped by `orbital.tools.mcp_client`), when they were read (`fetchedAt`), when the server was last tried
(`checkedAt`), how that went (`status`: `ok`, `error` or `needs-login`; `lastError`), a fingerprint of the settings
they were read with (a changed URL, transport or header set reads them again) and `stale` (a
`notifications/tools/list_changed` arrived: the next read lists again). A failed read keeps the last good tools.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orbital.store import keys
from orbital.store.table import Table


@dataclass
class CachedTools:
    server: str
    tools: list[dict[str, Any]] = field(default_factory=list)
    fetched_at: int | None = None
    checked_at: int | None = None
    status: str = "unknown"
    last_error: str | None = None
    fingerprint: str = ""
    stale: bool = False

    def to_data(self) -> dict[str, Any]:
        return {
            "tools": self.tools,
            "fetchedAt": self.fetched_at,
            "checkedAt": self.checked_at,
            "status": self.status,
            "lastError": self.last_error,
            "fingerprint": self.fingerprint,
        }


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def load(table: Table, server: str) -> CachedTools | None:
    rec = table.get(keys.mcp_tools(server))
    return load_record(server, rec.data, rec.attrs) if rec is not None else None


def load_record(server: str, data: dict[str, Any], attrs: dict[str, Any]) -> CachedTools:
    tools = data.get("tools")
    return CachedTools(
        server=server,
        tools=[t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else [],
        fetched_at=_int(data.get("fetchedAt")),
        checked_at=_int(data.get("checkedAt")),
        status=str(data.get("status") or "unknown"),
        last_error=data.get("lastError") if isinstance(data.get("lastError"), str) else None,
        fingerprint=str(data.get("fingerprint") or ""),
        stale=attrs.get("stale") is True,
    )


def save(table: Table, cached: CachedTools) -> None:
    """Store the server's list as read now (clears `stale`)."""
    table.put(keys.mcp_tools(cached.server), cached.to_data(), attrs={"stale": False})


def mark_stale(table: Table, server: str) -> None:
    """The server said its tools changed: the next read lists them again."""
    table.update(keys.mcp_tools(server), set_attrs={"stale": True}, return_values="NONE")


def forget(table: Table, server: str) -> None:
    table.delete(keys.mcp_tools(server))
