"""A request that cannot fit its token budget is refused before any run or stream, by a real `orbital dev`, in each
dialect's own shape: Exoclaw's plain `{id, error}` (a real Exoclaw-style WebSocket client), GSV's `chat.send` error,
xeno's `gateway.error` then `gateway.done`.
The check before the run estimates what the run's first model call will reserve, its system prompt included."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from orbital.client import GatewayClient, RpcFailedError
from websockets.sync.client import connect as ws_connect

from tests.e2e.conftest import GatewayProcess
from tests.e2e.test_exoclaw import Exo, expected_key
from tests.support.agent import configure_fake_model
from tests.support.fake_llm import FakeLLM, reply


@pytest.fixture(scope="module")
def llm(gateway: GatewayProcess) -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        server.responder = lambda request: reply("fits")
        with GatewayClient(gateway.url, timeout=15) as admin:
            admin.connect("client", "budget-admin", token=gateway.token)
            configure_fake_model(admin, server.base_url)
        yield server


@pytest.fixture
def gsv(gateway: GatewayProcess, llm: FakeLLM) -> Iterator[GatewayClient]:
    with GatewayClient(gateway.url, timeout=20) as client:
        client.connect("client", f"budget-{uuid.uuid4().hex[:6]}", token=gateway.token)
        yield client


def test_a_request_that_cannot_fit_the_session_budget_is_refused_before_any_stream(
    gateway: GatewayProcess, llm: FakeLLM, gsv: GatewayClient
) -> None:
    acct = f"acct-{uuid.uuid4().hex[:8]}"
    key = expected_key("main", "websocket", acct, "main")
    gsv.call("session.patch", {"sessionKey": key, "budget": {"maxTokens": 50}})  # less than any system prompt
    asked = len(llm.requests)
    with Exo(gateway) as exo:
        for rpc_id in ("b1", "b2"):  # and again: the same answer, never a stream
            frames = exo.chat(rpc_id, {"channel": "websocket", "account": acct, "content": "hello"})
            assert frames == [{"id": rpc_id, "error": "token budget exceeded (session: 0/50)"}]
            assert exo.quiet_after(rpc_id) == []
    with pytest.raises(RpcFailedError) as refused:  # a GSV client: its chat.send fails, nothing is stored
        gsv.call("chat.send", {"sessionKey": key, "message": "hello"})
    assert refused.value.code == 429
    assert refused.value.message.startswith("Token budget exceeded (session: 0/50): the next model call would need")
    assert len(llm.requests) == asked
    assert gsv.call("session.preview", {"sessionKey": key})["messages"] == []


def test_a_request_that_fits_still_runs(gateway: GatewayProcess, llm: FakeLLM, gsv: GatewayClient) -> None:
    acct = f"acct-{uuid.uuid4().hex[:8]}"
    key = expected_key("main", "websocket", acct, "main")
    gsv.call("session.patch", {"sessionKey": key, "budget": {"maxTokens": 1_000_000}})
    with Exo(gateway) as exo:
        frames: list[dict[str, Any]] = exo.chat("f1", {"channel": "websocket", "account": acct, "content": "hello"})
    assert "".join(f["data"] for f in frames if f.get("event") == "text") == "fits"
    assert frames[-1] == {"id": "f1", "event": "done"}


def test_a_xeno_query_that_cannot_fit_is_a_gateway_error_and_no_stream(
    gateway: GatewayProcess, llm: FakeLLM, gsv: GatewayClient
) -> None:
    main = "agent:main:main"  # a xeno client talks to the main session
    gsv.call("session.patch", {"sessionKey": main, "budget": {"maxTokens": 50}})
    asked = len(llm.requests)
    headers = {"Authorization": f"Bearer {gateway.token}"} if gateway.token else None
    try:
        with ws_connect(f"{gateway.url}?dialect=xeno", additional_headers=headers, open_timeout=10) as ws:
            params = {"requestId": "q1", "content": "hello", "context": {"type": "rpc"}}
            ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "gateway.query", "params": params}))
            received = []
            while not received or received[-1].get("method") != "gateway.done":
                received.append(json.loads(ws.recv(timeout=30)))
    finally:
        gsv.call("session.patch", {"sessionKey": main, "budget": {"maxTokens": None}})
    assert received[0] == {"jsonrpc": "2.0", "id": 1, "result": {"accepted": True}}
    assert [m.get("method") for m in received[1:]] == ["gateway.error", "gateway.done"]  # no gateway.stream
    assert received[1]["params"]["error"].startswith("Token budget exceeded (session: 0/50)")
    assert len(llm.requests) == asked
