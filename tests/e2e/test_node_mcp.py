"""MCP servers on a node, end to end: a real `orbital node --mcp ...` running the stdio test server
(tests/support/mcp_stdio_server.py) against a real `orbital dev`, real WebSocket clients and the scripted model."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.client import GatewayClient

from tests.conftest import wait_for
from tests.e2e.conftest import ROOT, NodeProcess
from tests.support.agent import configure_fake_model
from tests.support.fake_llm import FakeLLM, call, reply

SERVER = ROOT / "tests" / "support" / "mcp_stdio_server.py"
COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(str(SERVER))}"


def names(client: GatewayClient) -> list[str]:
    return [t["name"] for t in client.call("tools.list")["tools"]]


def invoke(client: GatewayClient, tool: str, args: dict[str, Any]) -> Any:
    return client.call("tool.invoke", {"tool": tool, "args": args})


def text_of(result: Any) -> str:
    return "".join(b.get("text", "") for b in result["result"]["content"] if b.get("type") == "text")


def test_a_nodes_mcp_tools_are_listed_and_invoked(client: GatewayClient, node_factory: Any) -> None:
    node = node_factory(f"mcp-{uuid.uuid4().hex[:6]}", "--mcp", f"files={COMMAND}")
    tools = {t["name"]: t for t in client.call("tools.list")["tools"]}
    echo = tools[f"{node.node_id}__mcp__files__echo"]
    assert echo["inputSchema"]["properties"]["text"]["type"] == "string"
    assert f"{node.node_id}__Bash" in tools  # its own tools still there
    assert text_of(invoke(client, f"{node.node_id}__mcp__files__echo", {"text": "hello"})) == "echo: hello"
    picture = invoke(client, f"{node.node_id}__mcp__files__picture", {})["result"]
    image = next(b for b in picture["content"] if b["type"] == "image")
    assert image["mimeType"] == "image/png" and image["data"]
    weather = invoke(client, f"{node.node_id}__mcp__files__weather", {"city": "Lima"})
    assert weather["result"]["structuredContent"] == {"city": "Lima", "temperature": 21, "sky": "clear"}
    with pytest.raises(Exception, match="no coffee"):
        invoke(client, f"{node.node_id}__mcp__files__fail", {"message": "no coffee"})
    log = node.log_file.read_text()
    assert "mcp__files__echo done" in log  # the node's usual tool log


def test_a_large_result_is_saved_in_the_workspace_like_any_node_result(
    client: GatewayClient, node_factory: Any
) -> None:
    node = node_factory(f"mcp-{uuid.uuid4().hex[:6]}", "--mcp", f"files={COMMAND}")
    result = invoke(client, f"{node.node_id}__mcp__files__big", {"size": 300_000})["result"]
    assert result["truncated"] is True
    path = result["fullOutput"]["path"].removeprefix("gsv:")
    read = client.call("workspace.read", {"path": path})
    assert "x" * 1000 in json.dumps(read)


def test_a_server_that_exits_is_restarted_and_a_changed_list_is_announced(
    client: GatewayClient, node_factory: Any, tmp_path: Path
) -> None:
    config = tmp_path / "mcp.json"
    starts = tmp_path / "starts.txt"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "box": {
                        "command": sys.executable,
                        "args": [str(SERVER)],
                        "env": {"MCP_TEST_STARTS": str(starts), "MCP_TEST_REBORN": "1"},
                    }
                }
            }
        )
    )
    node = node_factory(f"mcp-{uuid.uuid4().hex[:6]}", "--mcp-config", str(config))
    prefix = f"{node.node_id}__mcp__box__"
    assert f"{prefix}echo" in names(client) and f"{prefix}reborn" not in names(client)
    with pytest.raises(Exception, match="crash"):
        invoke(client, f"{prefix}crash", {})
    # started again, with a tool it did not have: the node reconnects to announce it
    wait_for(lambda: f"{prefix}reborn" in names(client), timeout=30)
    assert len(starts.read_text().splitlines()) == 2
    assert text_of(invoke(client, f"{prefix}reborn", {})) == "born again"
    # a tool added at runtime (notifications/tools/list_changed)
    assert text_of(invoke(client, f"{prefix}grow", {"name": "fresh"})) == "added fresh"
    wait_for(lambda: f"{prefix}fresh" in names(client), timeout=30)
    assert text_of(invoke(client, f"{prefix}fresh", {})) == "grown"
    # stopping the node stops its servers
    assert node.stop() == 0
    for pid in starts.read_text().split():
        wait_for(lambda pid=int(pid): not alive(pid), timeout=15)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:  # a zombie has exited
            return fh.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


def test_a_bad_server_definition_stops_the_node_with_a_reason(gateway: Any, tmp_path: Path) -> None:
    node = NodeProcess(gateway, "mcp-bad", tmp_path / "ws", "--mcp", "bad_name=whatever")
    with pytest.raises(RuntimeError, match="a server name is"):
        node.start(timeout=20)


@pytest.fixture
def llm(gateway: Any) -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        with GatewayClient(gateway.url, timeout=15) as admin:
            admin.connect("client", "mcp-admin")
            configure_fake_model(admin, server.base_url)
        yield server


def test_the_model_calls_a_node_mcp_tool_and_its_untrusted_result_makes_the_next_shell_call_ask(
    client: GatewayClient, node_factory: Any, llm: FakeLLM
) -> None:
    node = node_factory(f"mcp-{uuid.uuid4().hex[:6]}", "--mcp", f"files={COMMAND}")
    marker = node.workspace / "ran.txt"
    key = f"agent:main:mcp-{uuid.uuid4().hex[:8]}"
    client.call("config.set", {"path": "toolApproval", "value": {"defaultDecision": "allow"}})
    queue = [
        reply(tool_calls=[call(f"{node.node_id}__mcp__files__echo", {"text": "from the model"})]),
        reply(tool_calls=[call(f"{node.node_id}__Bash", {"command": f"echo RAN > {marker}"})]),
        reply("done"),
    ]

    def respond(request: Any) -> Any:
        if f"Session key: {key}" in request.body["messages"][0]["content"] and queue:
            return queue.pop(0)
        return reply("(unrelated)")

    llm.responder = respond
    run_id = f"mcp-run-{uuid.uuid4().hex[:8]}"
    client.call("chat.send", {"sessionKey": key, "message": "use the tool", "runId": run_id})
    deadline = time.monotonic() + 60
    while True:
        payload = client.next_event("chat", timeout=max(0.1, deadline - time.monotonic())).get("payload") or {}
        if payload.get("runId") == run_id and payload.get("state") in ("paused", "final", "error"):
            break
    assert payload["state"] == "paused", payload
    second = llm.requests[1].body["messages"]
    assert any("echo: from the model" in json.dumps(m) for m in second if m.get("role") == "tool")
    assert not marker.exists()  # the shell call waits for the owner
    assert f"{node.node_id}__Bash" in json.dumps(payload["approval"])
    assert "taint" in json.dumps(payload["approval"]).lower()  # asked because of what the MCP tool returned
