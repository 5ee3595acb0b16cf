"""Orbital as an MCP server on the AWS path: the MCP SDK's own client talks to `POST /mcp` through the `rest_api`
Lambda's way in (API Gateway events into `rest.app.lambda_handler()`, Mangum, the app) on moto, with the agent's
turns executed by moto's Step Functions and the scripted model over HTTP."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from orbital.engines import deferred
from orbital.rest import limits, mcp_server
from orbital.store import keys

from tests.conftest import GATEWAY_TOKEN, TABLE, load_event, wait_for
from tests.support.fake_llm import FakeLLM, call, reply

URL = "https://api.example.test/mcp"


class LambdaTransport(httpx2.AsyncBaseTransport):
    """Each request as the API Gateway (HTTP API, payload 2.0) event the `rest_api` Lambda gets, answered by its
    handler in a thread of its own (Mangum runs its own event loop there, as on Lambda)."""

    def __init__(self, remaining_ms: int | None = None) -> None:
        from orbital.rest import app

        app.lambda_handler.cache_clear()
        self.serve = app.lambda_handler()
        self.remaining_ms = remaining_ms
        self.events: list[dict[str, Any]] = []

    def _invoke(self, event: dict[str, Any]) -> dict[str, Any]:
        answer: dict[str, Any] = {}

        def run() -> None:
            asyncio.set_event_loop(asyncio.new_event_loop())
            try:
                answer.update(self.serve(event, _Context(self.remaining_ms)))
            finally:
                asyncio.get_event_loop().close()

        worker = threading.Thread(target=run)
        worker.start()
        worker.join()
        return answer

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        event = copy.deepcopy(load_event("http-health.json"))
        event["rawPath"] = request.url.path
        event["rawQueryString"] = request.url.query.decode() if isinstance(request.url.query, bytes) else ""
        event["requestContext"]["http"].update(method=request.method, path=request.url.path)
        event["headers"] = {k.lower(): v for k, v in request.headers.items()}
        event["body"] = base64.b64encode(body).decode()
        event["isBase64Encoded"] = True
        self.events.append(event)
        answer = await anyio.to_thread.run_sync(self._invoke, event)
        raw = answer.get("body") or ""
        content = base64.b64decode(raw) if answer.get("isBase64Encoded") else raw.encode()
        return httpx2.Response(answer["statusCode"], headers=answer.get("headers") or {}, content=content)


class _Context:
    def __init__(self, remaining_ms: int | None) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms if self.remaining_ms is not None else 29_000


@contextlib.asynccontextmanager
async def _client(bearer: str | None, *, mode: str = "auto", remaining_ms: int | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    async with httpx2.AsyncClient(transport=LambdaTransport(remaining_ms), headers=headers) as http:
        async with Client(streamable_http_client(URL, http_client=http), mode=mode) as client:  # type: ignore[arg-type]
            yield client


def _waiters() -> list[str]:
    """The ids of the pending calls `send_message` made that are still in the table."""
    import boto3

    items = boto3.client("dynamodb", region_name="us-east-1").scan(TableName=TABLE)["Items"]
    prefix = keys.pending_call("")[0]
    found = []
    for item in items:  # a pending call's kind is its `ck` attribute
        if item["PK"]["S"].startswith(prefix) and item.get("ck", {}).get("S") == mcp_server.REPLY_KIND:
            found.append(item["PK"]["S"].removeprefix(prefix))
    return found


async def _post(bearer: str | None, content: bytes) -> httpx2.Response:
    """One raw POST to /mcp (what the SDK's client would hide behind an exception)."""
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if bearer:
        headers["Authorization"] = f"Bearer {bearer}"
    async with httpx2.AsyncClient(transport=LambdaTransport()) as http:
        return await http.post(URL, content=content, headers=headers)


async def _error_of(request: Any) -> str:
    """The message of the protocol error a request is answered with."""
    from mcp.shared.exceptions import MCPError

    try:
        await request
    except MCPError as exc:
        return str(exc.error.message)
    raise AssertionError("no error")


def _run(coroutine: Any) -> Any:
    return anyio.run(lambda: coroutine)


@pytest.fixture
def viewer(agent: Any) -> str:
    return str(agent.call("device.token.create", {"name": "reader", "role": "viewer"})["token"])


@pytest.fixture(autouse=True)
def _fresh_handler() -> Iterator[None]:
    from orbital.rest import app

    yield
    app.lambda_handler.cache_clear()


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_send_message_runs_a_turn_and_returns_its_reply(
    token: str, flows: Any, agent: Any, llm: FakeLLM, services: Any, mode: str
) -> None:
    llm.script(reply("Hello from your agent"))

    async def scenario() -> tuple[Any, Any, Any, str]:
        async with _client(token, mode=mode) as client:
            tools = await client.list_tools()
            sent = await client.call_tool("send_message", {"text": "hi there"})
            history = await client.call_tool("read_session", {"sessionKey": "main"})
            return tools, sent, history, client.protocol_version

    tools, sent, history, version = _run(scenario())
    # the 2026 revision (no handshake) and the handshake era are both served
    assert version in (MODERN_PROTOCOL_VERSIONS if mode == "auto" else HANDSHAKE_PROTOCOL_VERSIONS), version
    assert {t.name for t in tools.tools} == {"send_message", "list_sessions", "read_session", "list_files", "read_file"}
    assert not sent.is_error, sent
    assert sent.structured_content["status"] == "final"
    assert sent.structured_content["reply"] == "Hello from your agent"
    assert sent.content[0].text == "Hello from your agent"
    run_id = sent.structured_content["runId"]
    assert run_id
    assert llm.requests[0].body["messages"][-1]["content"] in ("hi there", [{"type": "text", "text": "hi there"}])
    shown = history.structured_content["messages"]
    assert [m["role"] for m in shown][-2:] == ["user", "assistant"]
    assert shown[-2]["text"] == "hi there" and shown[-1]["text"] == "Hello from your agent"
    assert _waiters() == []  # the waiter the run answered is gone


def test_a_turn_still_running_at_the_bound_is_answered_running_with_its_run_id(
    token: str, flows: Any, agent: Any, llm: FakeLLM, services: Any
) -> None:
    llm.script(reply("late answer", chunks=2, hold_after=1))

    async def scenario() -> Any:
        # the Lambda has 2.5 s left: the wait ends before its margin (2 s) is reached
        async with _client(token, remaining_ms=2_500) as client:
            return await client.call_tool("send_message", {"text": "take your time", "sessionKey": "work"})

    try:
        sent = _run(scenario())
        assert not sent.is_error, sent
        assert sent.structured_content["status"] == "running"
        assert sent.structured_content["runId"]
        assert "read_session" in sent.content[0].text
        meta = services.sessions.load_meta("work")
        assert meta["currentRun"]["runId"] == sent.structured_content["runId"]
        call_id = meta["currentRun"]["notify"]["callId"]
        assert _waiters() == [call_id]
        # the bound may pass before the turn reaches the model; release() lets go only of requests already in
        llm.wait_for_requests(1, timeout=60)
    finally:
        llm.release()
    # the run answers its waiter when it ends (nobody reads it now: its ttl removes it)
    wait_for(lambda: deferred.get(services, call_id).state == deferred.DONE, timeout=30)
    outcome = deferred.outcome_of(services, services.table.get(keys.pending_call(call_id)))
    assert outcome["result"]["reply"] == "late answer"


def test_sessions_and_workspace_files_and_resources(token: str, flows: Any, agent: Any, llm: FakeLLM) -> None:
    agent.call("workspace.write", {"path": "notes/plan.md", "content": "# Plan\nship it"})
    llm.script(reply("noted"))

    async def scenario() -> dict[str, Any]:
        async with _client(token) as client:
            return {
                "sent": await client.call_tool("send_message", {"text": "remember the plan", "sessionKey": "ideas"}),
                "refused": await client.call_tool("send_message", {"text": "x", "sessionKey": "k" * 5000}),
                "empty": await client.call_tool("send_message", {"text": "  "}),
                "root": await client.call_tool("list_files", {}),
                "dir": await client.call_tool("list_files", {"path": "notes"}),
                "file": await client.call_tool("read_file", {"path": "notes/plan.md"}),
                "missing": await client.call_tool("read_file", {"path": "notes/none.md"}),
                "escape": await client.call_tool("read_file", {"path": "../../etc/passwd"}),
                "sessions": await client.call_tool("list_sessions", {}),
                "resources": await client.list_resources(),
                "templates": await client.list_resource_templates(),
                "resource": await client.read_resource(mcp_server.resource_uri("notes/plan.md")),
                "foreign": await _error_of(client.read_resource("file:///etc/passwd")),
                "absent": await _error_of(client.read_resource("orbital://workspace/notes/none.md")),
            }

    got = _run(scenario())
    assert "notes/" in got["root"].structured_content["directories"]
    assert got["dir"].structured_content["files"] == ["notes/plan.md"]
    assert got["file"].content[0].text == "# Plan\nship it"
    assert got["missing"].is_error and "not found" in got["missing"].content[0].text.lower()
    assert got["escape"].is_error
    assert got["sent"].structured_content["reply"] == "noted"
    # the method's own refusal is the tool's error, and its waiter is gone with it
    assert got["refused"].is_error and got["refused"].content[0].text.startswith("sessionKey too long")
    assert got["empty"].is_error and got["empty"].content[0].text == "text must be a non-empty string"
    assert _waiters() == []
    assert "ideas" in [s["sessionKey"] for s in got["sessions"].structured_content["sessions"]]
    assert "ideas" in got["sessions"].content[0].text
    uris = [str(r.uri) for r in got["resources"].resources]
    assert "orbital://workspace/notes/plan.md" in uris
    assert got["templates"].resource_templates[0].uri_template == "orbital://workspace/{path}"
    assert got["resource"].contents[0].text == "# Plan\nship it"
    assert got["foreign"] == "Not a workspace resource: file:///etc/passwd"
    assert "not found" in got["absent"].lower()


def test_a_wrong_or_missing_bearer_is_a_401_before_the_body_is_read(token: str, flows: Any, services: Any) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).encode()
    huge = b"{" + b" " * (limits.MAX_BODY_BYTES + 10) + b"}"
    for bearer in (None, "not-the-gateway-token-0123456789"):
        for content in (body, b"{not json", huge):
            answer = _run(_post(bearer, content))
            assert answer.status_code == 401, answer.text
            assert answer.headers["www-authenticate"] == "Bearer"
            assert answer.json() == {"detail": "Not authenticated", "code": 401}
    assert _run(_post(token, huge)).status_code == 413  # the body's size is only looked at with the bearer
    # the same app on the local gateway's port
    from orbital.rest.app import create_app
    from starlette.testclient import TestClient

    local = TestClient(create_app())
    for content in (body, huge):
        answer = local.post("/mcp", content=content, headers={"Content-Type": "application/json"})
        assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer"
    assert GATEWAY_TOKEN == token


def test_a_viewer_may_read_but_not_send(token: str, flows: Any, agent: Any, viewer: str, llm: FakeLLM) -> None:
    agent.call("workspace.write", {"path": "readme.md", "content": "hello"})

    async def scenario() -> tuple[Any, Any, Any]:
        async with _client(viewer) as client:
            return (
                await client.list_tools(),
                await client.call_tool("send_message", {"text": "let me in"}),
                await client.call_tool("read_file", {"path": "readme.md"}),
            )

    tools, sent, read = _run(scenario())
    assert "send_message" not in {t.name for t in tools.tools}
    assert "read_file" in {t.name for t in tools.tools}
    assert sent.is_error
    assert sent.content[0].text == "send_message needs scope chat; this device's role is viewer"
    assert read.content[0].text == "hello"
    assert llm.requests == []  # no turn ran


def test_a_node_token_is_refused(token: str, flows: Any, agent: Any) -> None:
    node = agent.call("device.token.create", {"name": "box", "role": "node", "nodeId": "box"})["token"]
    answer = _run(_post(node, json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()))
    assert answer.status_code == 403
    assert answer.json() == {"detail": "A node device token is for its node socket only", "code": 403}


def test_a_turn_paused_for_an_approval_says_so_and_a_no_sent_over_mcp_answers_it(
    token: str, flows: Any, agent: Any, connect: Any, llm: FakeLLM, services: Any
) -> None:
    connect("node", "box")
    agent.call(
        "config.set",
        {
            "path": "toolApproval",
            "value": {"defaultDecision": "allow", "rules": [{"id": "ask", "tool": "box__Bash", "decision": "ask"}]},
        },
    )
    llm.script(reply(tool_calls=[call("box__Bash", {"command": "ls"})]), reply("not listed, then"))

    async def scenario() -> tuple[Any, Any, Any]:
        async with _client(token) as client:
            # the run pauses and never ends by itself: the answer comes once it is paused, not at the end of the wait
            waiting = await client.call_tool("send_message", {"text": "list my files"})
            answered = await client.call_tool("send_message", {"text": "no"})
            return waiting, answered, client

    waiting, answered, _ = _run(scenario())
    assert waiting.structured_content["status"] == "running"
    assert waiting.structured_content["approvalPending"] is True
    assert waiting.structured_content["sessionKey"] == "agent:main:main"
    assert waiting.content[0].text.startswith("The agent waits for a tool approval")
    assert answered.structured_content["status"] == "paused"
    assert answered.structured_content["runId"] == waiting.structured_content["runId"]
    wait_for(lambda: (services.sessions.load_meta("agent:main:main") or {}).get("currentRun") is None, timeout=30)
    assert len(llm.requests) == 2  # the model heard the denial and answered
