"""The `mcp` methods and the `mcp.servers` configuration through the real dispatcher (AWS path on moto), against
real SDK servers over loopback (tests/support/mcp_servers.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.functional.test_scopes import as_device, refusal
from tests.support.mcp_servers import McpTestServer, mcp_server, mcp_servers

HEADER = "Bearer mcp-HEADER-secret-0123456789"
CLIENT_SECRET = "oauth-CLIENT-secret-0123456789"


def add(client: Any, name: str, server: McpTestServer, **extra: Any) -> None:
    value = {"url": server.url, "transport": server.transport, **extra}
    client.call("config.set", {"path": f"mcp.servers.{name}", "value": value})


def problems(client: Any, path: str, value: Any) -> str:
    error = client.error("config.set", {"path": path, "value": value})
    assert error["code"] == 400
    return str(error["message"])


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("mcp.servers.bad_name", {"url": "http://x.test/mcp"}, "server names of 1 to 32 letters, digits and dashes"),
        ("mcp.servers.s1", {"url": "ftp://x.test"}, "an http:// or https:// URL"),
        ("mcp.servers.s1", {"transport": "sse"}, "mcp.servers.s1.url: expected string (required)"),
        ("mcp.servers.s1", {"url": "http://x.test", "transport": "ws"}, "one of `streamable-http`, `sse`"),
        ("mcp.servers.s1", {"url": "http://x.test", "timeoutMs": 300001}, "integer from 1000 to 300000"),
        ("mcp.servers.s1", {"url": "http://x.test", "trust": "yes"}, "one of `untrusted`, `trusted`"),
        ("mcp.servers.s1", {"url": "http://x.test", "tools": {"deny": "x"}}, "list of string"),
    ],
)
def test_the_schema_refuses_bad_server_settings(rpc: Any, path: str, value: Any, expected: str) -> None:
    message = problems(rpc, path, value)
    assert expected in message and "nothing was stored" in message
    assert rpc.call("config.get", {"path": "mcp.servers"}).get("value") in (None, {})


def test_headers_and_client_secrets_are_masked_everywhere_they_are_read(rpc: Any, services: Any) -> None:
    from orbital.tools import native

    value = {
        "url": "https://mcp.example.test/mcp",
        "headers": {"Authorization": HEADER},
        "oauth": {"clientId": "abc", "clientSecret": CLIENT_SECRET},
        "trust": "trusted",
    }
    rpc.call("config.set", {"path": "mcp.servers.my-token", "value": value})
    whole = rpc.call("config.get", {})["config"]
    assert whole["mcp"]["servers"]["my-token"] == {
        **value,
        "headers": {"Authorization": "***"},
        "oauth": {"clientId": "abc", "clientSecret": "***"},
    }
    for path in ("mcp", "mcp.servers.my-token", "mcp.servers.my-token.headers", "mcp.servers.my-token.oauth"):
        text = json.dumps(rpc.call("config.get", {"path": path}))
        assert HEADER not in text and CLIENT_SECRET not in text and "***" in text
    env = native.ToolEnv(services, services.config.effective(), "main", "agent:main:main", services.now_ms())
    tool = json.dumps(native.run_sync(env, "gsv__ConfigGet", {"path": "mcp"}))
    assert HEADER not in tool and CLIENT_SECRET not in tool
    # the mask written back keeps the secret
    rpc.call("config.set", {"path": "mcp.servers.my-token", "value": {**whole["mcp"]["servers"]["my-token"]}})
    stored = services.config.effective()["mcp"]["servers"]["my-token"]
    assert stored["headers"]["Authorization"] == HEADER and stored["oauth"]["clientSecret"] == CLIENT_SECRET


def test_list_reads_the_cache_and_test_connects(rpc: Any) -> None:
    with mcp_servers() as (http, sse):
        add(rpc, "one", http)
        add(rpc, "two", sse, tools={"deny": ["fail"]})
        before = {s["name"]: s for s in rpc.call("mcp.list", {})["servers"]}
        assert before["one"]["status"] == "unknown" and before["one"]["toolCount"] == 0
        assert http.requests == 0 and sse.requests == 0  # listing connects to nothing

        tested = rpc.call("mcp.test", {"name": "two"})
        assert tested["ok"] is True and tested["status"] == "ok" and tested["error"] is None
        assert tested["toolCount"] == len(tested["tools"]) >= 7
        assert isinstance(tested["elapsedMs"], int)
        fail = next(t for t in tested["tools"] if t["tool"] == "fail")
        assert fail == {"name": "mcp__two__fail", "tool": "fail", "description": "Always fails.", "allowed": False}

        after = {s["name"]: s for s in rpc.call("mcp.list", {})["servers"]}
    assert after["two"]["status"] == "ok" and after["two"]["toolCount"] == tested["toolCount"]
    assert after["two"]["tools"] == tested["tools"]
    assert after["two"]["transport"] == "sse" and after["two"]["auth"] == "none"
    assert after["two"]["trust"] == "untrusted" and after["two"]["enabled"] is True
    assert after["two"]["checkedAt"] is not None and after["two"]["lastError"] is None
    assert after["one"]["status"] == "unknown"


def test_a_failing_server_is_reported_not_raised(rpc: Any) -> None:
    with mcp_server() as server:
        add(rpc, "gone", server)
    tested = rpc.call("mcp.test", {"name": "gone"})
    assert tested == {
        "name": "gone",
        "ok": False,
        "status": "error",
        "toolCount": 0,
        "tools": [],
        "toolsTruncated": False,
        "error": "the server is unreachable (could not connect)",
        "elapsedMs": tested["elapsedMs"],
    }
    (listed,) = rpc.call("mcp.list", {})["servers"]
    assert listed["status"] == "error" and listed["lastError"] == "the server is unreachable (could not connect)"


def test_disabled_servers_are_listed_as_such_and_can_still_be_tested(rpc: Any) -> None:
    with mcp_server() as server:
        add(rpc, "off", server, enabled=False)
        (listed,) = rpc.call("mcp.list", {})["servers"]
        assert listed["status"] == "disabled" and listed["enabled"] is False
        assert rpc.call("mcp.test", {"name": "off"})["ok"] is True
        assert rpc.call("mcp.refresh", {}) == {"servers": []}  # only enabled servers are refreshed
    (listed,) = rpc.call("mcp.list", {})["servers"]
    assert listed["status"] == "disabled" and listed["toolCount"] > 0


def test_refresh_lists_every_enabled_server_or_one(rpc: Any) -> None:
    with mcp_servers() as (http, sse):
        add(rpc, "one", http)
        add(rpc, "two", sse)
        refreshed = rpc.call("mcp.refresh", {})["servers"]
        assert [(s["name"], s["status"], s["error"]) for s in refreshed] == [("one", "ok", None), ("two", "ok", None)]
        assert all(s["toolCount"] >= 7 for s in refreshed)
        seen = sse.requests
        assert [s["name"] for s in rpc.call("mcp.refresh", {"name": "one"})["servers"]] == ["one"]
        assert sse.requests == seen


@pytest.mark.parametrize(
    ("method", "params", "code", "message"),
    [
        ("mcp.test", {}, 400, "name required"),
        ("mcp.test", {"name": "a_b"}, 400, "an MCP server name is 1 to 32 letters, digits and dashes"),
        ("mcp.test", {"name": "nope"}, 404, "no MCP server named nope is configured (mcp.servers.nope)"),
        ("mcp.refresh", {"name": "nope"}, 404, "no MCP server named nope is configured (mcp.servers.nope)"),
    ],
)
def test_bad_names_get_clear_errors(rpc: Any, method: str, params: dict[str, Any], code: int, message: str) -> None:
    assert rpc.error(method, params) == {"code": code, "message": message}


def test_results_carry_no_credentials(rpc: Any) -> None:
    with mcp_server(required_headers={"Authorization": HEADER}) as server:
        url = server.url + "?key=QUERYSECRET&v=2"
        rpc.call(
            "config.set",
            {"path": "mcp.servers.sec", "value": {"url": url, "headers": {"Authorization": HEADER}, "oauth": {}}},
        )
        tested = rpc.call("mcp.test", {"name": "sec"})
        assert tested["ok"] is True
        listed = rpc.call("mcp.list", {})
    (server_info,) = listed["servers"]
    assert server_info["url"] == f"http://127.0.0.1:{server.port}/mcp?key=***&v=***"
    assert server_info["auth"] == "ok"
    text = json.dumps([tested, listed])
    assert HEADER not in text and "QUERYSECRET" not in text


def test_a_viewer_lists_but_does_not_test_or_refresh(services: Any, connect: Any) -> None:
    viewer = as_device(services, connect("client", "tablet"), "viewer")
    assert viewer.call("mcp.list", {}) == {"servers": []}
    assert viewer.error("mcp.test", {"name": "x"}) == refusal("mcp.test", "operate", "viewer")
    assert viewer.error("mcp.refresh", {}) == refusal("mcp.refresh", "operate", "viewer")
