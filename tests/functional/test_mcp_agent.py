"""The agent calls remote MCP servers' tools on the AWS path: moto executes agent_turn.asl.json (the turn step makes
the MCP calls itself), the model is the scripted fake over HTTP, the MCP servers are real SDK servers on loopback
(tests/support/mcp_servers.py), clients and nodes are in-process sockets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.agent import final_of, node_events
from tests.support.fake_llm import FakeLLM, call, reply
from tests.support.mcp_servers import McpTestServer, mcp_server, server_config


@pytest.fixture(scope="module")
def server() -> Iterator[McpTestServer]:
    with mcp_server() as found:
        yield found


def add_server(agent: Any, name: str, entry: dict[str, Any]) -> None:
    agent.call("config.set", {"path": f"mcp.servers.{name}", "value": entry})


def tool_contents(llm: FakeLLM, request: int) -> list[str]:
    return [m["content"] for m in llm.requests[request].body["messages"] if m["role"] == "tool"]


def tool_results(agent: Any, key: str = "main") -> list[dict[str, Any]]:
    preview = agent.call("session.preview", {"sessionKey": key})
    return [m for m in preview["messages"] if m["role"] == "toolResult"]


def run(agent: Any, sender: Any, llm: FakeLLM, run_id: str, *items: Any, message: str = "go") -> dict[str, Any]:
    llm.script(*items)
    started = agent.call("chat.send", {"sessionKey": "main", "message": message, "runId": run_id})
    assert started["runId"] == run_id
    final = final_of(sender, agent.connection_id, run_id, timeout=60)
    assert final["state"] == "final", final
    return final


def test_the_model_is_offered_the_servers_tools_and_reads_a_text_result(
    agent: Any, sender: Any, llm: FakeLLM, server: McpTestServer
) -> None:
    add_server(agent, "docs", server_config(server, tools={"deny": ["drop"]}))
    listed = {t["name"]: t for t in agent.call("tools.list")["tools"]}
    assert listed["mcp__docs__echo"]["inputSchema"]["properties"]["text"]["type"] == "string"
    assert listed["mcp__docs__echo"]["description"].startswith("[MCP server docs: echo]")
    assert "mcp__docs__drop" not in listed  # denied by mcp.servers.docs.tools

    run(agent, sender, llm, "r-echo", reply(tool_calls=[call("mcp__docs__echo", {"text": "hi"})]), reply("done"))
    offered = {t["function"]["name"] for t in llm.requests[0].body["tools"]}
    assert {"mcp__docs__echo", "mcp__docs__weather", "gsv__ReadFile"} <= offered
    assert "mcp__docs__drop" not in offered
    assert tool_contents(llm, 1) == ["echo: hi"]
    [result] = tool_results(agent)
    assert result["toolName"] == "mcp__docs__echo" and result["isError"] is False


def test_images_structured_content_and_errors_reach_the_model(
    agent: Any, sender: Any, llm: FakeLLM, server: McpTestServer
) -> None:
    add_server(agent, "docs", server_config(server))
    calls = [
        call("mcp__docs__picture", {}),
        call("mcp__docs__weather", {"city": "Oslo"}),
        call("mcp__docs__fail", {"message": "no luck"}),
    ]
    run(agent, sender, llm, "r-kinds", reply(tool_calls=calls), reply("seen"))
    picture, weather, fail = tool_results(agent)
    assert picture["content"][0] == {"type": "text", "text": "a red dot"}
    image = picture["content"][1]
    assert image["type"] == "image" and image["mimeType"] == "image/png" and "data" not in image  # stored apart
    assert json.loads(weather["content"][0]["text"]) == {"city": "Oslo", "temperatureC": 21, "conditions": "sunny"}
    assert fail["isError"] is True and fail["content"] == [{"type": "text", "text": "Error: no luck"}]
    texts = tool_contents(llm, 1)
    assert "Oslo" in texts[1] and texts[2] == "Error: no luck"


def test_a_slow_tool_is_cut_at_its_timeout_and_the_run_goes_on(
    agent: Any, sender: Any, llm: FakeLLM, server: McpTestServer
) -> None:
    add_server(agent, "docs", server_config(server, timeoutMs=5000))
    run(
        agent,
        sender,
        llm,
        "r-slow",
        reply(tool_calls=[call("mcp__docs__slow", {"seconds": 120})]),
        reply("it was too slow"),
    )
    [result] = tool_results(agent)
    assert result["isError"] is True
    assert result["content"][0]["text"] == "Error: MCP server docs: no answer within 5000 ms"


def test_a_dropped_connection_and_an_unreachable_server_are_tool_errors(
    agent: Any, sender: Any, llm: FakeLLM, server: McpTestServer
) -> None:
    add_server(agent, "docs", server_config(server))
    with mcp_server() as gone:
        add_server(agent, "gone", server_config(gone))
        assert "mcp__gone__echo" in {t["name"] for t in agent.call("tools.list")["tools"]}  # listed while it ran
    calls = [call("mcp__docs__drop", {}), call("mcp__gone__echo", {"text": "anyone?"})]
    run(agent, sender, llm, "r-fail", reply(tool_calls=calls), reply("both failed"))
    dropped, unreachable = tool_results(agent)
    assert dropped["isError"] and dropped["content"][0]["text"].startswith("Error: MCP server docs: ")
    assert unreachable["isError"]
    assert unreachable["content"][0]["text"] == "Error: MCP server gone: the server is unreachable (could not connect)"


def test_the_calls_of_one_reply_run_side_by_side(agent: Any, sender: Any, llm: FakeLLM) -> None:
    with mcp_server() as server:
        arrived: list[int] = []
        met = asyncio.Event()

        async def meet() -> str:  # answers "met" only when the other call is in flight at the same time
            arrived.append(1)
            if len(arrived) >= 2:
                met.set()
            try:
                await asyncio.wait_for(met.wait(), 20)
            except TimeoutError:
                return "alone"
            return "met"

        server.mcp.add_tool(meet, name="meet", description="Meets another call.", structured_output=False)
        add_server(agent, "docs", server_config(server))
        calls = [call("mcp__docs__meet", {}, id="a"), call("mcp__docs__meet", {}, id="b")]
        run(agent, sender, llm, "r-both", reply(tool_calls=calls), reply("met"))
    assert tool_contents(llm, 1) == ["met", "met"]


def test_a_large_result_is_saved_in_the_workspace_and_previewed(
    agent: Any, sender: Any, llm: FakeLLM, server: McpTestServer
) -> None:
    lines = "\n".join(f"line {i:06d} " + "x" * 60 for i in range(3000))  # about 210 KB
    server.add_tool("big", lines)
    add_server(agent, "docs", server_config(server))
    run(agent, sender, llm, "r-big", reply(tool_calls=[call("mcp__docs__big", {})]), reply("read it"))
    [text] = tool_contents(llm, 1)
    assert text.startswith("line 000000 ") and len(text.encode()) < 128 * 1024
    assert "The full output is saved in the agent workspace at gsv:tool-results/mcp-" in text
    path = text.split("saved in the agent workspace at gsv:", 1)[1].split(";", 1)[0]
    from orbital.store import keys

    found = agent.services.workspace.get(keys.workspace_object("main", path))
    assert found is not None and found[0].decode() == lines


def test_an_untrusted_servers_result_makes_the_next_shell_call_ask(
    agent: Any, connect: Any, sender: Any, llm: FakeLLM, server: McpTestServer
) -> None:
    node = connect("node", "box")
    add_server(agent, "docs", server_config(server))
    llm.script(
        reply(tool_calls=[call("mcp__docs__echo", {"text": "run rm -rf"})]),
        reply(tool_calls=[call("box__Bash", {"command": "ls"})]),
        reply("done"),
    )
    agent.call("chat.send", {"sessionKey": "main", "message": "go", "runId": "r-taint"})
    paused = _paused(sender, agent.connection_id, "r-taint")
    assert paused["approval"]["tool"] == "box__Bash"
    assert paused["approval"]["ruleId"] == "toolApproval.whenTainted"
    assert [s["detail"] for s in paused["approval"]["taint"]["sources"]] == ["result of mcp__docs__echo"]
    assert node_events(sender, node, "tool.invoke") == []
    denied = agent.call("chat.send", {"sessionKey": "main", "message": "no"})
    assert denied["status"] == "paused" and "denied" in denied["response"].lower()
    assert final_of(sender, agent.connection_id, "r-taint", timeout=60)["state"] == "final"
    assert node_events(sender, node, "tool.invoke") == []


@pytest.mark.atomic_table  # a node answers at once: its answer races the turn's wait registering its token
def test_a_trusted_servers_result_does_not(
    agent: Any, connect: Any, sender: Any, llm: FakeLLM, server: McpTestServer
) -> None:
    node = connect("node", "box")
    add_server(agent, "docs", server_config(server, trust="trusted"))
    llm.script(
        reply(tool_calls=[call("mcp__docs__echo", {"text": "hello"})]),
        reply(tool_calls=[call("box__Bash", {"command": "ls"})]),
        reply("done"),
    )
    agent.call("chat.send", {"sessionKey": "main", "message": "go", "runId": "r-trusted"})
    from tests.conftest import wait_for

    invoke = wait_for(lambda: node_events(sender, node, "tool.invoke"), timeout=60)[0]
    assert invoke["tool"] == "Bash"
    node.call("tool.result", {"callId": invoke["callId"], "result": "a b"})
    assert final_of(sender, agent.connection_id, "r-trusted", timeout=60)["state"] == "final"
    assert agent.call("session.stats", {"sessionKey": "main"}).get("taint") is None


def test_tool_invoke_calls_an_mcp_tool_directly(agent: Any, server: McpTestServer) -> None:
    add_server(agent, "docs", server_config(server))
    answer = agent.call("tool.invoke", {"tool": "mcp__docs__echo", "args": {"text": "direct"}})
    assert answer == {"result": {"content": [{"type": "text", "text": "echo: direct"}]}}
    failed = agent.error("tool.invoke", {"tool": "mcp__docs__fail", "args": {}})
    assert failed["code"] == 500 and failed["message"] == "it broke"
    unknown = agent.error("tool.invoke", {"tool": "mcp__nope__echo", "args": {}})
    assert unknown["message"] == "No MCP server named nope is configured"


def _paused(sender: Any, connection_id: str, run_id: str) -> dict[str, Any]:
    from tests.conftest import wait_for
    from tests.support.agent import chat_events

    def found() -> dict[str, Any] | None:
        for event in chat_events(sender, connection_id):
            if event.get("runId") == run_id and event.get("state") in ("paused", "final", "error"):
                return event
        return None

    event = wait_for(found, timeout=60)
    assert event["state"] == "paused", event
    return event


def test_the_model_reads_no_header_value_and_has_no_tool_to_add_a_server(
    agent: Any, sender: Any, llm: FakeLLM, server: McpTestServer
) -> None:
    add_server(agent, "docs", server_config(server, headers={"Authorization": "Bearer sk-mcp-secret-42"}))
    calls = [call("gsv__ConfigGet", {"path": "mcp"}), call("gsv__ConfigGet", {})]
    run(agent, sender, llm, "r-secret", reply(tool_calls=calls), reply("nothing to see"))
    texts = tool_contents(llm, 1)
    assert "docs" in texts[0] and "Authorization" in texts[0]
    assert all("sk-mcp-secret-42" not in text for text in texts)
    offered = {t["function"]["name"] for t in llm.requests[0].body["tools"]}
    assert not {name for name in offered if name.startswith("gsv__") and "Config" in name} - {"gsv__ConfigGet"}


def test_tool_invoke_on_aws_keeps_within_the_socket_lambdas_time(
    agent: Any, server: McpTestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orbital.methods import nodes

    assert agent.services.capabilities.bounded_requests  # the AWS root's
    monkeypatch.setattr(nodes, "AWS_MCP_STEP_MS", 2000)  # 12 s in a deployment: less for the test
    add_server(agent, "docs", server_config(server, timeoutMs=300000))
    failed = agent.error("tool.invoke", {"tool": "mcp__docs__slow", "args": {"seconds": 120}})
    assert failed == {"code": 500, "message": "MCP server docs: no answer within 2000 ms"}
    assert agent.call("tool.invoke", {"tool": "mcp__docs__echo", "args": {"text": "quick"}})["result"]


def test_an_mcp_call_the_policy_asks_about_runs_after_the_yes_in_the_resumed_step(
    agent: Any, sender: Any, llm: FakeLLM, server: McpTestServer
) -> None:
    add_server(agent, "asked", server_config(server))
    rule = {"id": "ask-mcp", "tool": "mcp__asked__*", "decision": "ask"}
    agent.call("config.set", {"path": "toolApproval", "value": {"defaultDecision": "allow", "rules": [rule]}})
    before = server.calls["echo"]
    llm.script(reply(tool_calls=[call("mcp__asked__echo", {"text": "after yes"})]), reply("done"))
    agent.call("chat.send", {"sessionKey": "main", "message": "go", "runId": "r-asked"})
    paused = _paused(sender, agent.connection_id, "r-asked")
    assert paused["approval"]["tool"] == "mcp__asked__echo" and paused["approval"]["ruleId"] == "ask-mcp"
    assert server.calls["echo"] == before  # not called while it waits
    approved = agent.call("chat.send", {"sessionKey": "main", "message": "yes"})
    assert approved["status"] == "paused" and "approved" in approved["response"].lower()
    assert final_of(sender, agent.connection_id, "r-asked", timeout=60)["state"] == "final"
    assert tool_contents(llm, 1) == ["echo: after yes"]
    assert server.calls["echo"] == before + 1


def test_audio_resources_and_links_reach_the_model_as_text_and_images(
    agent: Any, sender: Any, llm: FakeLLM, server: McpTestServer
) -> None:
    add_server(agent, "docs", server_config(server))
    run(agent, sender, llm, "r-mixed", reply(tool_calls=[call("mcp__docs__mixed", {})]), reply("seen"))
    [result] = tool_results(agent)
    kinds = [block["type"] for block in result["content"]]
    assert kinds == ["text", "text", "image", "text"]
    audio, notes, image, link = result["content"]
    assert audio["text"].startswith("[audio: audio/wav, ") and "not shown" in audio["text"]
    assert "file:///notes.txt" in notes["text"] and "notes" in notes["text"]
    assert image["mimeType"] == "image/png" and "data" not in image  # stored with the session's media
    assert "https://example.test/report.pdf" in link["text"]


def test_a_servers_error_taints_the_run_the_gateways_own_does_not(
    agent: Any, sender: Any, llm: FakeLLM, server: McpTestServer
) -> None:
    add_server(agent, "docs", server_config(server))
    run(agent, sender, llm, "r-own", reply(tool_calls=[call("mcp__nowhere__echo", {})]), reply("no such server"))
    [own] = tool_results(agent)
    assert own["content"][0]["text"] == "Error: No MCP server named nowhere is configured"
    assert "taint" not in agent.call("session.stats", {"sessionKey": "main"})
    run(agent, sender, llm, "r-err", reply(tool_calls=[call("mcp__docs__fail", {"message": "ignore"})]), reply("x"))
    taint = agent.call("session.stats", {"sessionKey": "main"})["taint"]
    assert [s["detail"] for s in taint["sources"]] == ["result of mcp__docs__fail"]


def test_tools_list_waits_for_a_server_no_longer_than_a_request_may(
    agent: Any, server: McpTestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node's keepalive is a `tools.list`: a server that never answers is cut at the request's bound, not at its own
    `timeoutMs`, and the other servers' tools are listed."""
    import socket

    from orbital.tools import mcp_calls, mcp_client

    monkeypatch.setattr(mcp_calls, "REQUEST_LIST_MS", 1000)  # 5 s in the gateway: less for the test
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # connections are queued, never read
    try:
        port = listener.getsockname()[1]
        add_server(agent, "mute", {"url": f"http://127.0.0.1:{port}/mcp", "timeoutMs": 300000})
        add_server(agent, "docs", server_config(server))
        names = {t["name"] for t in agent.call("tools.list")["tools"]}
        assert "mcp__docs__echo" in names and not any(n.startswith("mcp__mute__") for n in names)
        spec = mcp_client.spec(agent.services.config.effective(), "mute")
        assert spec is not None
        assert mcp_client.cached_tools(agent.services, spec).error == "no answer within 1000 ms"
    finally:
        listener.close()
