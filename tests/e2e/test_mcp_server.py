"""Orbital as an MCP server on a real `orbital dev` with a token: the MCP SDK's own client over real HTTP at `/mcp`,
the agent's turns answered by the scripted model."""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from orbital.client import GatewayClient

from tests.e2e.conftest import GatewayProcess
from tests.support.agent import configure_fake_model
from tests.support.fake_llm import FakeLLM, reply

TOKEN = "mcp-server-token-0123456789abcdef"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(tmp_path_factory.mktemp("mcp-server") / "data", token=TOKEN).start()
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def llm(served: GatewayProcess) -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        with GatewayClient(served.url, timeout=15) as admin:
            admin.connect("client", "e2e-admin", token=TOKEN)
            configure_fake_model(admin, server.base_url)
        yield server


@pytest.fixture
def fake(llm: FakeLLM) -> Iterator[FakeLLM]:
    llm.reset()
    yield llm
    llm.reset()


def _admin_call(gw: GatewayProcess, method: str, params: dict[str, Any]) -> Any:
    with GatewayClient(gw.url, timeout=15) as admin:
        admin.connect("client", "e2e-admin", token=TOKEN)
        return admin.call(method, params)


@contextlib.asynccontextmanager
async def _client(gw: GatewayProcess, bearer: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {bearer}"}, timeout=60) as http:
        async with Client(streamable_http_client(f"{gw.http}/mcp", http_client=http)) as client:  # type: ignore[arg-type]
            yield client


def test_another_agent_talks_to_the_users_agent(served: GatewayProcess, fake: FakeLLM) -> None:
    _admin_call(served, "workspace.write", {"path": "notes/today.md", "content": "buy milk"})
    fake.script(reply("Milk is on the list."))

    async def scenario() -> dict[str, Any]:
        async with _client(served, TOKEN) as client:
            return {
                "tools": await client.list_tools(),
                "sent": await client.call_tool("send_message", {"text": "what is on my list?"}),
                "sessions": await client.call_tool("list_sessions", {}),
                "history": await client.call_tool("read_session", {"sessionKey": "main", "limit": 2}),
                "files": await client.call_tool("list_files", {"path": "notes"}),
                "file": await client.call_tool("read_file", {"path": "notes/today.md"}),
                "resources": await client.list_resources(),
                "resource": await client.read_resource("orbital://workspace/notes/today.md"),
            }

    got = anyio.run(scenario)
    assert "send_message" in {t.name for t in got["tools"].tools}
    sent = got["sent"]
    assert not sent.is_error, sent
    assert sent.content[0].text == "Milk is on the list."
    assert sent.structured_content["status"] == "final" and sent.structured_content["runId"]
    assert "agent:main:main" in got["sessions"].content[0].text
    assert [m["text"] for m in got["history"].structured_content["messages"]] == [
        "what is on my list?",
        "Milk is on the list.",
    ]
    assert got["files"].structured_content["files"] == ["notes/today.md"]
    assert got["file"].content[0].text == "buy milk"
    assert "orbital://workspace/notes/today.md" in [str(r.uri) for r in got["resources"].resources]
    assert got["resource"].contents[0].text == "buy milk"


def test_a_wrong_token_is_a_401(served: GatewayProcess) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    for bearer in (None, "not-the-token-0123456789"):
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if bearer:
            headers["Authorization"] = f"Bearer {bearer}"
        request = urllib.request.Request(f"{served.http}/mcp", data=body, method="POST", headers=headers)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=15)
        assert refused.value.code == 401
        assert refused.value.headers["WWW-Authenticate"] == "Bearer"


def test_a_viewer_token_may_read_but_not_send(served: GatewayProcess, fake: FakeLLM) -> None:
    viewer = _admin_call(served, "device.token.create", {"name": "mcp-viewer", "role": "viewer"})["token"]
    client_token = _admin_call(served, "device.token.create", {"name": "mcp-client", "role": "client"})["token"]
    fake.script(reply("hello, client"))

    async def scenario() -> dict[str, Any]:
        async with _client(served, viewer) as as_viewer:
            tools = await as_viewer.list_tools()
            refused = await as_viewer.call_tool("send_message", {"text": "may I?"})
            read = await as_viewer.call_tool("list_sessions", {})
        async with _client(served, client_token) as as_client:
            sent = await as_client.call_tool("send_message", {"text": "and I?", "sessionKey": "from-ide"})
        return {"tools": tools, "refused": refused, "read": read, "sent": sent}

    got = anyio.run(scenario)
    assert "send_message" not in {t.name for t in got["tools"].tools}
    assert got["refused"].is_error
    assert got["refused"].content[0].text == "send_message needs scope chat; this device's role is viewer"
    assert not got["read"].is_error
    assert got["sent"].content[0].text == "hello, client"
    assert len(fake.requests) == 1  # the viewer's message never reached the model
