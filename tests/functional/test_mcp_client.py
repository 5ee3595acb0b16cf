"""Remote MCP servers called by the gateway (tools/mcp_client.py): real SDK servers over loopback
(tests/support/mcp_servers.py), the tool list cache in the table, calls and their failures."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.mcp_servers import PNG_BASE64, mcp_server, server_config


def _spec(server: Any, name: str = "srv", **extra: Any) -> Any:
    from orbital.tools import mcp_client

    found = mcp_client.spec({"mcp": {"servers": {name: server_config(server, **extra)}}}, name)
    assert found is not None
    return found


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
def test_lists_and_calls_each_kind_of_result(services: Any, transport: str) -> None:
    from orbital.tools import mcp_client

    with mcp_server(transport) as server:
        spec = _spec(server)
        listed = mcp_client.list_tools(services, spec)
        assert listed.status == "ok", listed.error
        names = {t["name"]: t for t in listed.tools}
        assert {f"mcp__srv__{n}" for n in ("echo", "picture", "weather", "fail", "slow", "drop", "mixed")} <= set(names)
        assert names["mcp__srv__echo"]["tool"] == "echo"
        assert names["mcp__srv__echo"]["inputSchema"]["properties"]["text"]["type"] == "string"

        echo = mcp_client.call_tool(services, spec, "echo", {"text": "hi"})
        assert echo.error is None
        assert echo.result == {"content": [{"type": "text", "text": "echo: hi"}]}

        picture = mcp_client.call_tool(services, spec, "picture", {})
        assert picture.result is not None
        assert picture.result["content"] == [
            {"type": "text", "text": "a red dot"},
            {"type": "image", "data": PNG_BASE64, "mimeType": "image/png"},
        ]

        weather = mcp_client.call_tool(services, spec, "weather", {"city": "Oslo"})
        assert weather.result is not None
        assert weather.result["structuredContent"] == {"city": "Oslo", "temperatureC": 21, "conditions": "sunny"}

        fail = mcp_client.call_tool(services, spec, "fail", {"message": "no luck"})
        assert fail.result is None and fail.error == "no luck"
