"""A USD spend cap reached, as each client hears it, from a real `orbital dev` with the scripted model: GSV's 429
`spend limit reached (daily: $0.00 / $5.00)`, Exoclaw's plain `spend limit exceeded (daily: $0.00/$5.00)` before
any stream, xeno's `gateway.error` then `gateway.done`, WindieOS's `error` event, a channel socket's conversation
told once per period (not per message), and `orbital chat`'s `/status` with dollars beside the tokens.
The model is priced at a dollar a token (`spend.prices`), so a $5 daily cap refuses any call before it is made."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.client import GatewayClient, RpcFailedError
from websockets.sync.client import connect as ws_connect

from tests.e2e.conftest import GatewayProcess
from tests.e2e.test_chat_cli import chat
from tests.e2e.test_exoclaw import Exo
from tests.e2e.test_windie import Windie
from tests.support.agent import configure_fake_model
from tests.support.fake_llm import FakeLLM, call, reply
from tests.support.windie_sdk import sdk_refusals

SENTENCE = "spend limit reached (daily: $0.00 / $5.00)"
DOLLAR_A_TOKEN = {"inputPerMTok": 1_000_000, "outputPerMTok": 1_000_000}


@pytest.fixture(scope="module")
def capped(gateway: GatewayProcess) -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        server.responder = lambda request: reply("never")
        with GatewayClient(gateway.url, timeout=15) as admin:
            admin.connect("client", "spend-admin", token=gateway.token)
            configure_fake_model(admin, server.base_url)
            admin.call("config.set", {"path": "spend.prices", "value": {"openai/gpt-test": DOLLAR_A_TOKEN}})
            admin.call("config.set", {"path": "spend.limits.daily", "value": 5})
            admin.call("config.set", {"path": "channels.bridge", "value": {"dmPolicy": "open"}})
        yield server


@pytest.fixture
def gsv(gateway: GatewayProcess, capped: FakeLLM) -> Iterator[GatewayClient]:
    with GatewayClient(gateway.url, timeout=20) as client:
        client.connect("client", f"spend-{uuid.uuid4().hex[:6]}", token=gateway.token)
        yield client


def test_gsv_gets_the_429_and_nothing_is_stored(gsv: GatewayClient, capped: FakeLLM) -> None:
    key = f"agent:main:spend-{uuid.uuid4().hex[:6]}"
    with pytest.raises(RpcFailedError) as refused:
        gsv.call("chat.send", {"sessionKey": key, "message": "hello"})
    assert refused.value.code == 429 and refused.value.message == SENTENCE
    assert capped.requests == []


def test_exoclaw_gets_a_plain_error_before_any_stream(gateway: GatewayProcess, capped: FakeLLM) -> None:
    acct = f"acct-{uuid.uuid4().hex[:8]}"
    with Exo(gateway) as exo:
        for rpc_id in ("s1", "s2"):  # and again: the same answer, never a stream
            frames = exo.chat(rpc_id, {"channel": "websocket", "account": acct, "content": "hello"})
            assert frames == [{"id": rpc_id, "error": "spend limit exceeded (daily: $0.00/$5.00)"}]
            assert exo.quiet_after(rpc_id) == []
    assert capped.requests == []


def test_xeno_gets_gateway_error_then_done(gateway: GatewayProcess, capped: FakeLLM) -> None:
    headers = {"Authorization": f"Bearer {gateway.token}"} if gateway.token else None
    with ws_connect(f"{gateway.url}?dialect=xeno", additional_headers=headers, open_timeout=10) as ws:
        params = {"requestId": "q1", "content": "hello", "context": {"type": "rpc"}}
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "gateway.query", "params": params}))
        received: list[dict[str, Any]] = []
        while not received or received[-1].get("method") != "gateway.done":
            received.append(json.loads(ws.recv(timeout=30)))
    assert received == [
        {"jsonrpc": "2.0", "id": 1, "result": {"accepted": True}},
        {"jsonrpc": "2.0", "method": "gateway.error", "params": {"requestId": "q1", "error": SENTENCE}},
        {"jsonrpc": "2.0", "method": "gateway.done", "params": {"requestId": "q1"}},
    ]
    assert capped.requests == []


@pytest.mark.parametrize("sdk", ["ts", "python"])
def test_windie_gets_an_error_event_its_sdk_accepts(gateway: GatewayProcess, capped: FakeLLM, sdk: str) -> None:
    with Windie(gateway, sdk=sdk) as client:
        rid = client.send("query", {"text": "hello", "conversation_ref": f"c-{sdk}"})
        events = client.turn(rid)
        received = list(client.received)
    error = events[-1]  # the turn's end: no streaming-response, no streaming-complete
    assert error["type"] == "error" and error["payload"]["message"] == SENTENCE
    assert not [e for e in events if e["type"].startswith("streaming")]
    assert error["id"] == error["turn_ref"] == rid and error["conversation_ref"] == f"c-{sdk}"
    assert sdk_refusals(received) == []  # the SDK takes every event of the turn, the error included
    assert capped.requests == []


def test_a_channel_conversation_hears_it_once_per_period(gateway: GatewayProcess, capped: FakeLLM) -> None:
    ann = {"kind": "group", "id": f"g-{uuid.uuid4().hex[:6]}", "name": "Ann's group"}
    bob = {"kind": "group", "id": f"g-{uuid.uuid4().hex[:6]}", "name": "Bob's group"}

    def inbound(peer: dict[str, Any], message_id: str) -> dict[str, Any]:
        message = {"id": message_id, "text": "hello"}
        return {"channel": "bridge", "accountId": "phone", "peer": peer, "message": message}

    with GatewayClient(gateway.url, timeout=20) as phone:
        phone.connect("channel", "phone", client={"channel": "bridge"}, token=gateway.token)
        for message_id in ("a1", "a2"):  # each message is refused with GSV's 429
            refused = phone.request("channel.inbound", inbound(ann, message_id))
            assert refused["ok"] is False and refused["error"]["code"] == 429
            assert refused["error"]["message"] == SENTENCE
        told = phone.next_event("channel.outbound", timeout=20)["payload"]
        assert told["peer"] == ann and told["message"]["text"] == SENTENCE
        assert phone.request("channel.inbound", inbound(bob, "b1"))["ok"] is False  # another conversation is told
        # the next reply on the socket is Bob's: Ann's second message got none
        assert phone.next_event("channel.outbound", timeout=20)["payload"]["peer"] == bob
    assert capped.requests == []


def test_slash_status_shows_dollars_beside_tokens(gateway: GatewayProcess, capped: FakeLLM, tmp_path: Path) -> None:
    done = chat(gateway, tmp_path, "-m", "/status", "--session", "spend-status", token=gateway.token)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    tokens = next(i for i, line in enumerate(lines) if line.startswith("Tokens:"))
    assert lines[tokens + 1].startswith("Spend: ") and "$0.00 / $5.00 today" in lines[tokens + 1]


@pytest.fixture
def midway(gateway: GatewayProcess, capped: FakeLLM) -> Iterator[FakeLLM]:
    """A session cap of $1 that the run's first model call fits exactly (output priced only, at $1 per 1,000 tokens,
    1,000 at most) and its second cannot: the first asks for a tool, the run stops before the second."""

    def respond(request: Any) -> Any:
        if any(m["role"] == "tool" for m in request.body["messages"]):
            return reply("never said")
        return reply(tool_calls=[call("gsv__ListFiles", {"path": "."})])

    with GatewayClient(gateway.url, timeout=15) as admin:
        admin.connect("client", "spend-admin-midway", token=gateway.token)
        admin.call("config.set", {"path": "providers.openai.maxTokens", "value": 1000})
        price = {"inputPerMTok": 0, "outputPerMTok": 1000}
        admin.call("config.set", {"path": "spend.prices", "value": {"openai/gpt-test": price}})
        admin.call("config.set", {"path": "spend.limits.session", "value": 1})
        capped.responder = respond
        try:
            yield capped
        finally:
            capped.responder = lambda request: reply("never")
            admin.call("config.set", {"path": "spend.limits.session"})
            admin.call("config.set", {"path": "spend.prices", "value": {"openai/gpt-test": DOLLAR_A_TOKEN}})
            admin.call("config.set", {"path": "providers.openai.maxTokens"})
            capped.requests.clear()


def _second_calls(llm: FakeLLM) -> list[Any]:
    """The model requests made after a tool's result (none when the cap stopped each run before it)."""
    return [r for r in llm.requests if any(m["role"] == "tool" for m in r.body["messages"])]


NOTE = re.compile(r"^Spend limit reached \(session: \$0\.01 / \$1\.00\)")


def test_a_channel_gets_the_note_of_a_run_stopped_midway(gateway: GatewayProcess, midway: FakeLLM) -> None:
    group = {"kind": "group", "id": f"g-{uuid.uuid4().hex[:6]}", "name": "Midway"}
    with GatewayClient(gateway.url, timeout=20) as phone:
        phone.connect("channel", "phone", client={"channel": "bridge"}, token=gateway.token)
        message = {"id": "m1", "text": "list the files"}
        started = phone.call(
            "channel.inbound", {"channel": "bridge", "accountId": "phone", "peer": group, "message": message}
        )
        assert started["status"] == "started"
        delivered = phone.next_event("channel.outbound", timeout=30)["payload"]
    assert delivered["peer"] == group and NOTE.match(delivered["message"]["text"])  # delivered as any reply
    assert not _second_calls(midway)  # the second model call was never made


def test_exoclaw_ends_a_run_stopped_midway_with_error_then_done(gateway: GatewayProcess, midway: FakeLLM) -> None:
    acct = f"acct-{uuid.uuid4().hex[:8]}"
    with Exo(gateway) as exo:
        frames = exo.chat("m1", {"channel": "websocket", "account": acct, "content": "list the files"})
    events = [f.get("event") for f in frames]
    assert events.index("tool_use") < events.index("tool_result") < events.index("error")
    assert frames[-2:] == [
        {"id": "m1", "event": "error", "data": "spend limit exceeded (session: $0.01/$1.00)"},
        {"id": "m1", "event": "done"},
    ]
    assert not _second_calls(midway)
