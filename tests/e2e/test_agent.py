"""The agent end to end: `orbital dev` in a subprocess, real WebSocket clients, real `orbital node` processes, and
the scripted model server on loopback."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from orbital.client import GatewayClient, RpcFailedError

from tests.conftest import wait_for
from tests.e2e.test_nodes import SPILLED, as_read, big_text
from tests.support.agent import configure_fake_model, follow_run
from tests.support.fake_llm import FakeLLM, call, error, hang, reply


@pytest.fixture(scope="module")
def llm(gateway: Any) -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        with GatewayClient(gateway.url, timeout=15) as admin:
            admin.connect("client", "e2e-admin")
            configure_fake_model(admin, server.base_url)
        yield server


@pytest.fixture
def fake(llm: FakeLLM) -> Iterator[FakeLLM]:
    llm.reset()
    yield llm
    llm.reset()


@pytest.fixture
def user(gateway: Any, fake: FakeLLM) -> Iterator[GatewayClient]:
    with GatewayClient(gateway.url, timeout=20) as c:
        c.connect("client", f"user-{uuid.uuid4().hex[:6]}")
        yield c


def scripted(fake: FakeLLM, key: str, *items: Any) -> None:
    """Answer the requests of one session with `items` in order; anything else (a background run of an earlier
    test) gets a plain reply, so it cannot eat this test's script."""
    queue = list(items)

    def respond(request: Any) -> Any:
        if f"Session key: {key}" in request.body["messages"][0]["content"] and queue:
            return queue.pop(0)
        return reply("(unrelated)")

    fake.responder = respond


def session() -> str:
    return f"agent:main:e2e-{uuid.uuid4().hex[:8]}"


def send(client: GatewayClient, key: str, text: str, **extra: Any) -> dict[str, Any]:
    return client.call("chat.send", {"sessionKey": key, "message": text, **extra})


def requests_of(fake: FakeLLM, key: str) -> list[Any]:
    """The model requests made for one session (its key is in the system prompt's Runtime section)."""
    return [r for r in fake.requests if f"Session key: {key}" in r.body["messages"][0]["content"]]


def tool_messages(fake: FakeLLM, key: str, index: int) -> list[str]:
    return [m["content"] for m in requests_of(fake, key)[index].body["messages"] if m["role"] == "tool"]


def test_a_streamed_reply(user: GatewayClient, fake: FakeLLM) -> None:
    key = session()
    scripted(fake, key, reply("Streaming works end to end.", chunks=6, delay_per_chunk=0.05))
    started = send(user, key, "hello")
    assert started["status"] == "started" and "queued" not in started
    events = follow_run(user, started["runId"])
    deltas = [e["text"] for e in events if e["state"] == "delta"]
    assert len(deltas) >= 2 and "".join(deltas) == "Streaming works end to end."
    assert events[-1]["state"] == "final" and events[-1]["sessionKey"] == key


def test_a_tool_loop_on_a_real_node(user: GatewayClient, fake: FakeLLM, node_factory: Any) -> None:
    node = node_factory(f"n-{uuid.uuid4().hex[:6]}")
    key = session()
    scripted(
        fake,
        key,
        reply("Let me check.", tool_calls=[call(f"{node.node_id}__Bash", {"command": "echo from-the-node"})]),
        reply(tool_calls=[call(f"{node.node_id}__Write", {"path": "out.txt", "content": "written"})]),
        reply("All done."),
    )
    started = send(user, key, "use the node")
    events = follow_run(user, started["runId"], timeout=60)
    states = [e["state"] for e in events]
    assert "partial" in states and states.count("tool") == 2 and states[-1] == "final"
    assert "from-the-node" in tool_messages(fake, key, 1)[0]
    assert (node.workspace / "out.txt").read_text() == "written"


def test_every_native_tool(user: GatewayClient, fake: FakeLLM, node_factory: Any) -> None:
    node = node_factory(f"n-{uuid.uuid4().hex[:6]}")
    (node.workspace / "from-node.txt").write_text("node bytes")
    first = [
        call("gsv__WriteFile", {"path": "e2e/notes.md", "content": "alpha beta"}),
        call("gsv__EditFile", {"path": "e2e/notes.md", "oldString": "beta", "newString": "$& gamma"}),
        call("gsv__ReadFile", {"path": "e2e/notes.md"}),
        call("gsv__ListFiles", {"path": "e2e"}),
        call("gsv__ConfigGet", {"path": "apiKeys"}),
        call("gsv__SessionsList", {}),
        call("gsv__Cron", {"action": "status"}),
        call("gsv__Message", {"text": "hi"}),
        call("gsv__LogsGet", {"nodeId": node.node_id, "lines": 3}),
        call("gsv__Transfer", {"source": f"{node.node_id}:from-node.txt", "destination": "gsv:e2e/copied.txt"}),
        call("gsv__SessionSend", {"sessionKey": "agent:main:e2e-side", "message": "fyi", "waitSeconds": 0}),
        call("gsv__DeleteFile", {"path": "e2e/notes.md"}),
    ]

    def respond(request: Any) -> Any:
        has_tools = any(m["role"] == "tool" for m in request.body["messages"])
        last_user = [m for m in request.body["messages"] if m["role"] == "user"][-1]["content"]
        if last_user == "every tool" and not has_tools:
            return reply(tool_calls=first)
        return reply("done")

    fake.responder = respond
    started = send(user, session(), "every tool")
    follow_run(user, started["runId"], timeout=60)
    main = next(r for r in fake.requests if any(m["role"] == "tool" for m in r.body["messages"]))
    results = [m["content"] for m in main.body["messages"] if m["role"] == "tool"]
    assert len(results) == 12
    wrote, edited, read, listed, config, sessions, cron, message, logs, transfer, sent, deleted = results
    assert json.loads(wrote)["written"] is True
    assert json.loads(edited)["replacements"] == 1
    assert json.loads(read)["content"] == "alpha $& gamma"  # literal replacement (F14)
    assert "e2e/notes.md" in json.loads(listed)["files"]
    assert json.loads(config) == {"path": "apiKeys", "value": {"openai": "***"}}
    assert "sessions" in json.loads(sessions)
    assert json.loads(cron)["enabled"] is True
    assert message == "Error: channel is required (no current channel context available)"
    assert json.loads(logs)["nodeId"] == node.node_id
    assert json.loads(transfer)["bytesTransferred"] == len("node bytes")
    assert json.loads(sent)["status"] == "accepted"
    assert json.loads(deleted)["deleted"] is True
    assert user.call("workspace.read", {"path": "e2e/copied.txt"})["content"] == "node bytes"
    # the fire-and-forget message ran in its own session (and is over before the next test)
    wait_for(lambda: user.call("session.stats", {"sessionKey": "agent:main:e2e-side"})["messageCount"] == 2)


def test_concurrent_sends_queue_and_all_complete(gateway: Any, fake: FakeLLM) -> None:
    fake.responder = lambda request: reply("ok", chunks=3, delay_per_chunk=0.05)
    key = session()
    clients = [GatewayClient(gateway.url, timeout=30) for _ in range(3)]
    try:
        for i, c in enumerate(clients):
            c.connect("client", f"burst-{i}-{uuid.uuid4().hex[:4]}")
        results: list[dict[str, Any]] = [{} for _ in clients]

        def fire(i: int) -> None:
            results[i] = send(clients[i], key, f"message {i}")

        threads = [threading.Thread(target=fire, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert sorted(r.get("queued", False) for r in results) == [False, True, True]  # a started run has no key
        assert sorted(r.get("queuePosition", 0) for r in results) == [0, 1, 2]
        for i, c in enumerate(clients):
            assert follow_run(c, results[i]["runId"], timeout=60)[-1]["state"] == "final"
        preview = clients[0].call("session.preview", {"sessionKey": key})
        assert sorted(m["content"] for m in preview["messages"] if m["role"] == "user") == [
            "message 0",
            "message 1",
            "message 2",
        ]
    finally:
        for c in clients:
            c.close()


def test_stop_mid_run(user: GatewayClient, fake: FakeLLM) -> None:
    key = session()
    scripted(fake, key, hang(30), reply("after the stop"))
    started = send(user, key, "take your time")
    fake.wait_for_requests(1)
    stopped = send(user, key, "/stop")
    assert stopped["response"] == f"Stopped run {started['runId']}."
    assert follow_run(user, started["runId"])[-1] == {
        "runId": started["runId"],
        "sessionKey": key,
        "state": "error",
        "error": "Run cancelled by user",
    }
    fake.release()
    again = send(user, key, "next")
    assert follow_run(user, again["runId"])[-1]["state"] == "final"


def test_idle_reset_keeps_the_triggering_message(user: GatewayClient, fake: FakeLLM) -> None:
    def respond(request: Any) -> Any:
        last = [m for m in request.body["messages"] if m["role"] == "user"][-1]["content"]
        if isinstance(last, str) and "about to be archived" in last:
            return reply("<memories>- the user said first</memories>")  # memory extraction after the reset
        return reply("noted")

    fake.responder = respond
    key = session()
    follow_run(user, send(user, key, "first")["runId"])
    before = user.call("session.get", {"sessionKey": key})["sessionId"]
    user.call("session.patch", {"sessionKey": key, "resetPolicy": {"mode": "idle", "idleMinutes": -1}})
    follow_run(user, send(user, key, "second")["runId"])
    after = user.call("session.get", {"sessionKey": key})
    assert after["sessionId"] != before and before in after["previousSessionIds"]
    users = [m["content"] for m in user.call("session.preview", {"sessionKey": key})["messages"] if m["role"] == "user"]
    assert users == ["second"]
    archived = user.call("workspace.list", {"path": "sessions"})["files"]
    assert f"sessions/{before}.jsonl.gz" in archived

    def remembered() -> bool:
        for path in user.call("workspace.list", {"path": "memory"})["files"]:
            if "the user said first" in user.call("workspace.read", {"path": path})["content"]:
                return True
        return False

    wait_for(remembered, timeout=30)  # the background extraction ran (and is done before the next test)


def test_node_loss_mid_turn(user: GatewayClient, fake: FakeLLM, node_factory: Any) -> None:
    node = node_factory(f"n-{uuid.uuid4().hex[:6]}")
    key = session()
    scripted(fake, key, reply(tool_calls=[call(f"{node.node_id}__Bash", {"command": "sleep 30"})]), reply("gone"))
    started = send(user, key, "long job")
    wait_for(lambda: requests_of(fake, key))
    import time

    time.sleep(0.5)  # let the node start the command
    node.kill()
    events = follow_run(user, started["runId"], timeout=60)
    assert events[-1]["state"] == "final", events
    assert tool_messages(fake, key, 1) == [f"Error: Node disconnected: {node.node_id}"]


def test_a_node_result_larger_than_a_message_reaches_the_model(
    user: GatewayClient, fake: FakeLLM, node_factory: Any
) -> None:
    """The model reads a 200 KB file on a node: it gets a preview with a pointer to the whole result in its
    workspace, and reads on there with gsv__ReadFile offset/limit."""
    node = node_factory(f"n-{uuid.uuid4().hex[:6]}")
    text = big_text()
    (node.workspace / "big.txt").write_text(text)
    whole = as_read(text).encode()
    key = session()

    def respond(request: Any) -> Any:
        if f"Session key: {key}" not in request.body["messages"][0]["content"]:
            return reply("(unrelated)")
        results = [m["content"] for m in request.body["messages"] if m["role"] == "tool"]
        if not results:
            return reply(tool_calls=[call(f"{node.node_id}__Read", {"path": "big.txt"})])
        if len(results) == 1 and results[0].startswith("{"):
            path = json.loads(results[0])["fullOutput"]["path"].removeprefix("gsv:")
            return reply(tool_calls=[call("gsv__ReadFile", {"path": path, "offset": 100_000, "limit": 5000})])
        return reply("read it")

    fake.responder = respond
    events = follow_run(user, send(user, key, "read the big file")["runId"], timeout=90)
    assert events[-1]["state"] == "final", events
    first = tool_messages(fake, key, 1)[0]
    assert not first.startswith("Error"), first[:500]
    result = json.loads(first)
    assert result["truncated"] is True and whole.decode().startswith(result["content"])
    assert 0 < len(result["content"].encode()) < len(whole)
    assert SPILLED.fullmatch(result["fullOutput"]["path"]) and result["fullOutput"]["bytes"] == len(whole)
    assert result["fullOutput"]["path"] in result["note"] and "gsv__ReadFile" in result["note"]
    part = json.loads(tool_messages(fake, key, 2)[1])
    assert part["content"].encode() == whole[100_000:105_000]
    assert part["truncated"] is True and part["nextOffset"] == 105_000 and part["size"] == len(whole)


def test_model_error_then_usable(user: GatewayClient, fake: FakeLLM) -> None:
    key = session()
    scripted(fake, key, error(400, "context is malformed"), reply("recovered"))
    failed = follow_run(user, send(user, key, "x")["runId"])[-1]
    assert failed["state"] == "error" and "context is malformed" in failed["error"]
    assert "sk-e2e-key" not in json.dumps(failed)
    assert follow_run(user, send(user, key, "y")["runId"])[-1]["state"] == "final"


def test_iteration_cap_and_budget(user: GatewayClient, fake: FakeLLM) -> None:
    user.call("config.set", {"path": "agents.maxIterations", "value": 2})
    try:
        fake.responder = lambda request: reply(tool_calls=[call("gsv__ListFiles", {})])
        capped = follow_run(user, send(user, session(), "loop forever")["runId"])[-1]
        assert capped["state"] == "final" and "agents.maxIterations" in capped["message"]["content"][0]["text"]
    finally:
        user.call("config.set", {"path": "agents.maxIterations"})
    fake.reset()
    fake.responder = lambda request: reply("spent")
    key = session()
    follow_run(user, send(user, key, "one")["runId"])
    user.call("session.patch", {"sessionKey": key, "budget": {"maxTokens": 20}})
    requests_before = len(fake.requests)
    with pytest.raises(RpcFailedError) as over:  # refused before a run starts (ADR 0026)
        send(user, key, "two")
    assert over.value.code == 429 and over.value.message.startswith("Token budget exceeded (session: ")
    assert len(fake.requests) == requests_before


def test_compaction_trigger(user: GatewayClient, fake: FakeLLM) -> None:
    key = session()
    user.call("config.set", {"path": "providers.openai.contextWindow", "value": 4000})
    user.call("config.set", {"path": "compaction", "value": {"reserveTokens": 1000, "keepRecentTokens": 400}})
    try:

        def respond(request: Any) -> Any:
            last = [m for m in request.body["messages"] if m["role"] == "user"][-1]["content"]
            if isinstance(last, str) and "compacting the history" in last:
                return reply("<summary>Earlier we chatted.</summary>")
            return reply("y" * 2500, usage={"input": 3500, "output": 700})  # the provider reports a full context

        fake.responder = respond
        for i in range(4):
            follow_run(user, send(user, key, f"round {i} " + "x" * 2500)["runId"], timeout=60)
        first = user.call("session.preview", {"sessionKey": key})["messages"][0]
        assert first["content"].startswith("[Conversation summary from automatic context compaction]")
    finally:
        user.call("config.set", {"path": "compaction"})
        user.call("config.set", {"path": "providers.openai.contextWindow"})


def test_stock_web_ui_and_cli_see_their_replies(gateway: Any, fake: FakeLLM) -> None:
    """What the stock GSV clients do: the web UI connects as `web-xxxxxxxx` with key `agent:main:web:dm:local`, sends
    with its own runId and waits for `chat` events carrying exactly that key; the Rust CLI does the same with
    `agent:main:cli:dm:main`. Both map to `agent:main:main`, and each must still see its own key (F2)."""
    fake.responder = lambda request: reply("Hello from Orbital")
    for client_id, key in (("web-1a2b3c4d", "agent:main:web:dm:local"), ("cli-e2e", "agent:main:cli:dm:main")):
        with GatewayClient(gateway.url, timeout=20) as ui:
            hello = ui.call(
                "connect",
                {
                    "minProtocol": 1,
                    "maxProtocol": 1,
                    "client": {"id": client_id, "version": "0.1.0", "platform": "web", "mode": "client"},
                },
            )
            assert hello["type"] == "hello-ok"
            ui.hello = hello
            for method, params in (("tools.list", None), ("sessions.list", {"limit": 100, "offset": 0})):
                ui.call(method, params)
            ui.call("session.preview", {"sessionKey": key, "limit": 100})
            run_id = str(uuid.uuid4())
            ui.call("chat.send", {"sessionKey": key, "message": "hi", "runId": run_id})
            events = follow_run(ui, run_id)
            assert {e["sessionKey"] for e in events} == {key}
            final = events[-1]
            assert final["state"] == "final" and final["message"]["content"][0]["text"] == "Hello from Orbital"
            history = ui.call("session.preview", {"sessionKey": key, "limit": 100})["messages"]
            assert history[-1]["role"] == "assistant"
