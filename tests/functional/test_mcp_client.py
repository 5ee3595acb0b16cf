"""Remote MCP servers called by the gateway (tools/mcp_client.py): real SDK servers over loopback
(tests/support/mcp_servers.py), the tool list cache in the table, calls and their failures."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.mcp_servers import PNG_BASE64, McpTestServer, mcp_server, server_config


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


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
def test_other_content_kinds_become_text_the_model_can_read(services: Any, transport: str) -> None:
    from orbital.tools import mcp_client

    with mcp_server(transport) as server:
        outcome = mcp_client.call_tool(services, _spec(server), "mixed", {})
    assert outcome.result is not None
    blocks = outcome.result["content"]
    assert blocks[0]["type"] == "text" and blocks[0]["text"].startswith("[audio: audio/wav, ")
    assert blocks[1] == {"type": "text", "text": "[resource file:///notes.txt]\nnotes"}
    assert blocks[2] == {"type": "image", "data": PNG_BASE64, "mimeType": "image/png"}
    assert blocks[3] == {
        "type": "text",
        "text": "[resource link] report: https://example.test/report.pdf (application/pdf)",
    }


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
def test_a_slow_tool_is_cut_at_the_servers_timeout(services: Any, transport: str) -> None:
    from orbital.tools import mcp_client

    with mcp_server(transport) as server:
        outcome = mcp_client.call_tool(services, _spec(server, timeoutMs=1000), "slow", {"seconds": 30})
        assert outcome.result is None
        assert outcome.error == "MCP server srv: no answer within 1000 ms"
        # the server is still fine for the next call
        assert mcp_client.call_tool(services, _spec(server), "echo", {"text": "after"}).error is None


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
def test_a_server_that_drops_the_connection_mid_call_fails_that_call(services: Any, transport: str) -> None:
    from orbital.tools import mcp_client

    with mcp_server(transport) as server:
        outcome = mcp_client.call_tool(services, _spec(server, timeoutMs=20000), "drop", {})
        assert server.calls["drop"] == 1
    assert outcome.result is None
    assert outcome.error is not None
    assert outcome.error.startswith("MCP server srv: the connection ended before the answer"), outcome.error


def test_an_unreachable_server_fails_the_call_with_a_clear_error(services: Any) -> None:
    from orbital.tools import mcp_client

    server = mcp_server()
    with server as running:
        spec = _spec(running, timeoutMs=20000)
    outcome = mcp_client.call_tool(services, spec, "echo", {"text": "x"})
    assert outcome == mcp_client.CallOutcome(error="MCP server srv: the server is unreachable (could not connect)")
    listed = mcp_client.list_tools(services, spec)
    assert listed.status == "error" and listed.error == "the server is unreachable (could not connect)"
    assert listed.tools == []


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
def test_headers_are_sent_and_a_refusal_names_the_headers_not_their_values(services: Any, transport: str) -> None:
    from orbital.tools import mcp_client

    with mcp_server(transport, required_headers={"X-Api-Key": "sekret-123"}) as server:
        good = mcp_client.call_tool(services, _spec(server, headers={"X-Api-Key": "sekret-123"}), "echo", {"text": "a"})
        assert good.error is None
        assert server.headers["x-api-key"] == "sekret-123"
        bad = mcp_client.call_tool(services, _spec(server, headers={"X-Api-Key": "wrong-456"}), "echo", {"text": "a"})
        listed = mcp_client.list_tools(services, _spec(server, headers={"X-Api-Key": "wrong-456"}))
    assert bad.error == (
        "MCP server srv: the server refused the request (HTTP 401): check mcp.servers.srv.headers (its credentials)"
    )
    assert "wrong-456" not in str(listed) and "sekret" not in str(listed)
    assert listed.status == "error"


class Clock:
    def __init__(self, services: Any) -> None:
        self.now = 1_800_000_000_000
        services.now_ms = lambda: self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def test_a_fresh_tool_list_is_read_from_the_table_and_listed_again_after_ten_minutes(services: Any) -> None:
    from orbital.tools import mcp_client

    clock = Clock(services)
    with mcp_server() as server:
        spec = _spec(server)
        first = mcp_client.list_tools(services, spec)
        seen = server.requests
        assert seen > 0 and first.status == "ok" and first.fetched_at == clock.now
        clock.advance(9 * 60 * 1000)
        again = mcp_client.list_tools(services, spec)
        assert server.requests == seen  # from the cache: no connection
        assert [t["name"] for t in again.tools] == [t["name"] for t in first.tools]
        forced = mcp_client.list_tools(services, spec, force=True)
        assert server.requests > seen and forced.fetched_at == clock.now
        seen = server.requests
        clock.advance(10 * 60 * 1000)
        mcp_client.list_tools(services, spec)
        assert server.requests > seen


def test_changed_settings_list_the_tools_again(services: Any) -> None:
    from orbital.tools import mcp_client

    Clock(services)
    with mcp_server() as server:
        mcp_client.list_tools(services, _spec(server))
        seen = server.requests
        mcp_client.list_tools(services, _spec(server, headers={"X-Extra": "1"}))
        assert server.requests > seen
        assert server.headers["x-extra"] == "1"


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
def test_tools_list_changed_on_any_connection_makes_the_next_read_list_again(services: Any, transport: str) -> None:
    from orbital.tools import mcp_client

    Clock(services)
    with mcp_server(transport) as server:
        spec = _spec(server)
        before = mcp_client.list_tools(services, spec)
        assert "mcp__srv__extra" not in {t["name"] for t in before.tools}
        server.add_tool("extra", "more")
        cached = mcp_client.list_tools(services, spec)
        assert "mcp__srv__extra" not in {t["name"] for t in cached.tools}  # nobody said so yet
        assert mcp_client.call_tool(services, spec, "echo", {"text": "x"}).error is None
        assert server.notified == 1
        after = mcp_client.list_tools(services, spec)
        assert "mcp__srv__extra" in {t["name"] for t in after.tools}
        assert mcp_client.call_exposed(services, _config(server), "mcp__srv__extra", {}).result == {
            "content": [{"type": "text", "text": "more"}]
        }


def _config(server: Any, **extra: Any) -> dict[str, Any]:
    return {"mcp": {"servers": {"srv": server_config(server, **extra)}}}


def test_a_dead_server_keeps_its_last_tools_marked_error_and_is_tried_once_a_minute(services: Any) -> None:
    from orbital.tools import mcp_client

    clock = Clock(services)
    server = McpTestServer().start()
    try:
        spec = _spec(server, timeoutMs=5000)
        good = mcp_client.list_tools(services, spec)
        assert good.status == "ok"
        server.stop()
        clock.advance(11 * 60 * 1000)
        dead = mcp_client.list_tools(services, spec)
        assert dead.status == "error" and dead.error == "the server is unreachable (could not connect)"
        assert [t["name"] for t in dead.tools] == [t["name"] for t in good.tools]
        assert dead.fetched_at == good.fetched_at and dead.checked_at == clock.now
        server.start()  # back on the same port
        seen = server.requests
        clock.advance(30 * 1000)
        assert mcp_client.list_tools(services, spec).status == "error"
        assert server.requests == seen  # not tried again within the minute
        clock.advance(31 * 1000)
        back = mcp_client.list_tools(services, spec)
        assert back.status == "ok" and back.error is None and server.requests > seen
    finally:
        server.stop()


def test_allow_and_deny_decide_which_tools_are_offered_and_callable(services: Any) -> None:
    from orbital.tools import mcp_client

    Clock(services)
    with mcp_server() as server:
        config = _config(server, tools={"allow": ["e*", "weather", "mcp__srv__fail"], "deny": ["extra*"]})
        spec = mcp_client.spec(config, "srv")
        assert spec is not None
        listed = mcp_client.list_tools(services, spec)
        allowed = {t["tool"] for t in listed.tools if t["allowed"]}
        assert allowed == {"echo", "weather", "fail"}
        assert {t["name"] for t in listed.allowed} == {"mcp__srv__echo", "mcp__srv__weather", "mcp__srv__fail"}
        assert mcp_client.call_exposed(services, config, "mcp__srv__echo", {"text": "y"}).error is None
        refused = mcp_client.call_exposed(services, config, "mcp__srv__picture", {})
        assert refused.error == "the tool mcp__srv__picture is not allowed by mcp.servers.srv.tools"
        assert server.calls["picture"] == 0


def test_call_exposed_refuses_unknown_and_disabled_servers_and_unknown_tools(services: Any) -> None:
    from orbital.tools import mcp_client

    Clock(services)
    with mcp_server() as server:
        config = _config(server)
        assert mcp_client.call_exposed(services, config, "mcp__other__echo", {}).error == (
            "no MCP server named other is configured"
        )
        assert mcp_client.call_exposed(services, config, "n1__Bash", {}).error == "not an MCP tool name: n1__Bash"
        assert mcp_client.call_exposed(services, config, "mcp__srv__nope", {}).error == (
            "the MCP server srv has no tool mcp__srv__nope"
        )
        disabled = _config(server, enabled=False)
        assert mcp_client.specs(disabled) == []
        assert mcp_client.call_exposed(services, disabled, "mcp__srv__echo", {}).error == (
            "the MCP server srv is disabled"
        )
        assert server.calls["echo"] == 0


@pytest.mark.atomic_table  # the calls read the table from several threads at once
def test_several_calls_run_at_once(services: Any) -> None:
    from orbital.tools import mcp_client

    Clock(services)
    with mcp_server() as server:
        config = _config(server)
        outcomes = mcp_client.call_many(services, config, [("mcp__srv__together", {"count": 3}) for _ in range(3)])
    assert [o.result for o in outcomes] == [{"content": [{"type": "text", "text": "together"}]}] * 3


def test_the_sync_calls_work_from_a_thread_whose_event_loop_runs(services: Any) -> None:
    import asyncio

    from orbital.tools import mcp_client

    Clock(services)
    with mcp_server() as server:
        spec = _spec(server)

        async def inside() -> Any:
            return mcp_client.call_tool(services, spec, "echo", {"text": "loop"})

        outcome = asyncio.run(inside())
    assert outcome.result == {"content": [{"type": "text", "text": "echo: loop"}]}


def test_a_refusal_of_a_server_with_oauth_means_it_needs_a_login(services: Any) -> None:
    from orbital.tools import mcp_client

    Clock(services)
    with mcp_server(required_headers={"Authorization": "Bearer right"}) as server:
        spec = _spec(server, oauth={})
        listed = mcp_client.list_tools(services, spec)
        assert listed.status == "needs-login"
        assert listed.error == "the server needs a login (HTTP 401): run `orbital mcp login srv`"
        outcome = mcp_client.call_tool(services, spec, "echo", {"text": "x"})
        assert outcome.error == "MCP server srv: the server needs a login (HTTP 401): run `orbital mcp login srv`"
        assert mcp_client.cached_tools(services, spec).status == "needs-login"


def test_a_server_that_accepts_but_never_answers_is_cut_at_its_timeout(services: Any) -> None:
    import socket

    from orbital.tools import mcp_client

    Clock(services)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # connections are queued, never read
    try:
        port = listener.getsockname()[1]
        config = {"mcp": {"servers": {"mute": {"url": f"http://127.0.0.1:{port}/mcp", "timeoutMs": 1000}}}}
        spec = mcp_client.spec(config, "mute")
        assert spec is not None
        assert mcp_client.call_tool(services, spec, "echo", {}).error == "MCP server mute: no answer within 1000 ms"
        listed = mcp_client.list_tools(services, spec)
        assert listed.status == "error" and listed.error == "no answer within 1000 ms"
    finally:
        listener.close()


def test_a_response_larger_than_the_cap_is_cut_off(services: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from orbital.tools import mcp_client

    Clock(services)
    monkeypatch.setattr(mcp_client, "MAX_RESPONSE_BYTES", 20_000)
    with mcp_server() as server:
        spec = _spec(server)
        assert mcp_client.call_tool(services, spec, "echo", {"text": "small"}).error is None
        flood = mcp_client.call_tool(services, spec, "echo", {"text": "x" * 50_000})
    assert flood == mcp_client.CallOutcome(
        error="MCP server srv: the server sent more than 20000 bytes in one response"
    )


def test_a_hostile_tool_list_is_capped_and_named_safely(services: Any) -> None:
    from orbital.tools import mcp_client

    Clock(services)
    with mcp_server() as server:
        server.add_tool("files.read", "read", description="d" * 10_000)
        server.add_tool("t" * 100, "long")
        spec = _spec(server)
        listed = mcp_client.list_tools(services, spec)
        by_tool = {t["tool"]: t for t in listed.tools}
        assert by_tool["files.read"]["name"] == "mcp__srv__files_read"
        assert len(by_tool["files.read"]["description"]) == mcp_client.MAX_DESCRIPTION_CHARS
        long_name = by_tool["t" * 100]["name"]
        assert len(long_name) == 64
        assert mcp_client.call_exposed(services, _config(server), long_name, {}).result == {
            "content": [{"type": "text", "text": "long"}]
        }


def test_malformed_answers_fail_the_call_clearly(services: Any) -> None:
    from orbital.tools import mcp_client

    from tests.support.asgi_server import serving

    async def garbage(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b"{not json"})

    Clock(services)
    with serving(garbage) as base:
        spec = mcp_client.spec({"mcp": {"servers": {"junk": {"url": f"{base}/mcp", "timeoutMs": 5000}}}}, "junk")
        assert spec is not None
        outcome = mcp_client.call_tool(services, spec, "echo", {})
    assert outcome.error is not None
    assert outcome.error.startswith("MCP server junk: the server answered with an error: Failed to parse JSON")
    assert len(outcome.error) <= 600


def test_header_values_stay_out_of_the_logs(services: Any, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from orbital.tools import mcp_client

    Clock(services)
    secret = "Bearer LOG-secret-0123456789"
    caplog.set_level(logging.DEBUG)
    with mcp_server(required_headers={"Authorization": secret}) as server:
        assert (
            mcp_client.call_tool(
                services, _spec(server, headers={"Authorization": secret}), "echo", {"text": "a"}
            ).error
            is None
        )
        refused = mcp_client.call_tool(services, _spec(server, headers={"Authorization": secret + "x"}), "echo", {})
    assert refused.error is not None
    assert caplog.records and "LOG-secret" not in caplog.text
