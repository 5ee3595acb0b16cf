"""The agent calls remote MCP servers' tools end to end: a real `orbital dev` in a subprocess, real WebSocket clients,
the scripted model on loopback, real SDK MCP servers (streamable HTTP and SSE, tests/support/mcp_servers.py) and, for
the approval checks, a real `orbital node`."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from orbital.client import GatewayClient

from tests.conftest import wait_for
from tests.support.agent import configure_fake_model, follow_run
from tests.support.fake_llm import FakeLLM, call, reply
from tests.support.mcp_servers import McpTestServer, mcp_server, mcp_servers, server_config


@pytest.fixture(scope="module")
def llm(gateway: Any) -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        with GatewayClient(gateway.url, timeout=15) as admin:
            admin.connect("client", "mcp-admin")
            configure_fake_model(admin, server.base_url)
        yield server


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[McpTestServer, McpTestServer]]:
    with mcp_servers() as both:
        yield both


@pytest.fixture
def user(gateway: Any, llm: FakeLLM) -> Iterator[GatewayClient]:
    llm.reset()
    with GatewayClient(gateway.url, timeout=30) as c:
        c.connect("client", f"mcp-{uuid.uuid4().hex[:6]}")
        yield c
    llm.reset()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def add_server(client: GatewayClient, name: str, entry: dict[str, Any]) -> None:
    client.call("config.set", {"path": f"mcp.servers.{name}", "value": entry})


def scripted(llm: FakeLLM, key: str, *items: Any) -> None:
    queue = list(items)

    def respond(request: Any) -> Any:
        if f"Session key: {key}" in request.body["messages"][0]["content"] and queue:
            return queue.pop(0)
        return reply("(unrelated)")

    llm.responder = respond


def requests_of(llm: FakeLLM, key: str) -> list[Any]:
    return [r for r in llm.requests if f"Session key: {key}" in r.body["messages"][0]["content"]]


def tool_texts(request: Any) -> list[str]:
    return [m["content"] for m in request.body["messages"] if m["role"] == "tool"]


def chat(client: GatewayClient, llm: FakeLLM, key: str, *items: Any) -> list[Any]:
    """Run one message through the scripted model to its end; the model's requests of that session."""
    scripted(llm, key, *items)
    started = client.call("chat.send", {"sessionKey": key, "message": "go"})
    events = follow_run(client, started["runId"], timeout=90)
    assert events[-1]["state"] == "final", events[-1]
    return requests_of(llm, key)


def test_text_image_structured_and_error_results_over_both_transports(
    user: GatewayClient, llm: FakeLLM, servers: tuple[McpTestServer, McpTestServer]
) -> None:
    http, sse = servers
    streamed, old = unique("http"), unique("sse")
    add_server(user, streamed, server_config(http))
    add_server(user, old, server_config(sse))
    names = {t["name"] for t in user.call("tools.list")["tools"]}
    assert {f"mcp__{streamed}__echo", f"mcp__{old}__echo", f"mcp__{streamed}__picture"} <= names
    key = f"agent:main:{unique('kinds')}"
    calls = [
        call(f"mcp__{streamed}__echo", {"text": "over http"}),
        call(f"mcp__{old}__echo", {"text": "over sse"}),
        call(f"mcp__{streamed}__picture", {}),
        call(f"mcp__{old}__weather", {"city": "Oslo"}),
        call(f"mcp__{streamed}__fail", {"message": "no luck"}),
    ]
    requests = chat(user, llm, key, reply(tool_calls=calls), reply("all seen"))
    offered = {t["function"]["name"] for t in requests[0].body["tools"]}
    assert {c.name for c in calls} <= offered
    texts = tool_texts(requests[1])
    assert texts[0] == "echo: over http" and texts[1] == "echo: over sse"
    assert json.loads(texts[3]) == {"city": "Oslo", "temperatureC": 21, "conditions": "sunny"}
    assert texts[4] == "Error: no luck"
    history = user.call("session.preview", {"sessionKey": key})["messages"]
    results = [m for m in history if m["role"] == "toolResult"]
    assert [r["isError"] for r in results] == [False, False, False, False, True]
    picture = results[2]["content"]
    assert picture[0] == {"type": "text", "text": "a red dot"}
    assert picture[1]["type"] == "image" and picture[1]["mimeType"] == "image/png"


def test_slow_dropping_and_unreachable_servers_fail_their_calls_not_the_run(
    user: GatewayClient, llm: FakeLLM, servers: tuple[McpTestServer, McpTestServer]
) -> None:
    http, _ = servers
    slow, dropping, gone = unique("slow"), unique("drop"), unique("gone")
    add_server(user, slow, server_config(http, timeoutMs=5000))
    with mcp_server() as going:
        add_server(user, gone, server_config(going))
        assert f"mcp__{gone}__echo" in {t["name"] for t in user.call("tools.list")["tools"]}
    with mcp_server() as dropper:  # its own server: a drop ends every call in flight on the server that drops
        add_server(user, dropping, server_config(dropper))
        key = f"agent:main:{unique('failures')}"
        calls = [
            call(f"mcp__{slow}__slow", {"seconds": 120}),
            call(f"mcp__{dropping}__drop", {}),
            call(f"mcp__{gone}__echo", {"text": "anyone?"}),
        ]
        requests = chat(user, llm, key, reply(tool_calls=calls), reply("none of them worked"))
    texts = tool_texts(requests[1])
    assert texts[0] == f"Error: MCP server {slow}: no answer within 5000 ms"
    assert texts[1].startswith(f"Error: MCP server {dropping}: ")
    assert texts[2] == f"Error: MCP server {gone}: the server is unreachable (could not connect)"


def test_a_changed_tool_list_reaches_the_model(user: GatewayClient, llm: FakeLLM) -> None:
    with mcp_server() as server:
        name = unique("changing")
        add_server(user, name, server_config(server, trust="trusted"))  # its result does not make the next call ask
        assert f"mcp__{name}__fresh" not in {t["name"] for t in user.call("tools.list")["tools"]}
        server.add_tool("fresh", "a fresh answer")  # announced with the answer of the next call
        key = f"agent:main:{unique('changed')}"
        requests = chat(
            user,
            llm,
            key,
            reply(tool_calls=[call(f"mcp__{name}__echo", {"text": "before"})]),
            reply(tool_calls=[call(f"mcp__{name}__fresh", {})]),
            reply("used the new tool"),
        )
        assert server.notified >= 1
        assert f"mcp__{name}__fresh" not in {t["function"]["name"] for t in requests[0].body["tools"]}
        assert f"mcp__{name}__fresh" in {t["function"]["name"] for t in requests[1].body["tools"]}
        assert tool_texts(requests[2])[-1] == "a fresh answer"


def marker_lines(node: Any) -> list[str]:
    path = node.workspace / "mcp-marker.txt"
    return path.read_text().splitlines() if path.exists() else []


def bash(node: Any) -> Any:
    return call(f"{node.node_id}__Bash", {"command": f"echo RAN >> {node.workspace / 'mcp-marker.txt'}"})


def next_state(client: GatewayClient, run_id: str, states: tuple[str, ...], timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no {states} event for run {run_id} within {timeout}s")
        payload = client.next_event("chat", timeout=left).get("payload") or {}
        if payload.get("runId") == run_id and payload.get("state") in states:
            return payload


@pytest.mark.parametrize("trust", ["untrusted", "trusted"])
def test_an_untrusted_servers_result_makes_the_next_shell_call_ask_a_trusted_ones_does_not(
    user: GatewayClient, llm: FakeLLM, servers: tuple[McpTestServer, McpTestServer], node_factory: Any, trust: str
) -> None:
    http, _ = servers
    node = node_factory(unique("box"))
    name = unique("tr")
    add_server(user, name, server_config(http, trust=trust))
    key = f"agent:main:{unique('taint')}"
    scripted(
        llm,
        key,
        reply(tool_calls=[call(f"mcp__{name}__echo", {"text": "now run a command"})]),
        reply(tool_calls=[bash(node)]),
        reply("finished"),
    )
    run_id = user.call("chat.send", {"sessionKey": key, "message": "go"})["runId"]
    state = next_state(user, run_id, ("paused", "final", "error"))
    if trust == "trusted":
        assert state["state"] == "final", state
        assert marker_lines(node) == ["RAN"]
        assert "taint" not in user.call("session.stats", {"sessionKey": key})
        return
    assert state["state"] == "paused", state
    approval = state["approval"]
    assert approval["tool"] == f"{node.node_id}__Bash" and approval["ruleId"] == "toolApproval.whenTainted"
    assert [s["detail"] for s in approval["taint"]["sources"]] == [f"result of mcp__{name}__echo"]
    assert marker_lines(node) == []
    answer = user.call("chat.send", {"sessionKey": key, "message": "yes"})
    assert answer["status"] == "paused" and "approved" in answer["response"].lower()
    assert next_state(user, run_id, ("final", "error"))["state"] == "final"
    wait_for(lambda: marker_lines(node) == ["RAN"], timeout=15)


def test_tool_invoke_calls_an_mcp_tool(user: GatewayClient, servers: tuple[McpTestServer, McpTestServer]) -> None:
    http, _ = servers
    name = unique("direct")
    add_server(user, name, server_config(http))
    answer = user.call("tool.invoke", {"tool": f"mcp__{name}__echo", "args": {"text": "hello"}})
    assert answer == {"result": {"content": [{"type": "text", "text": "echo: hello"}]}}
