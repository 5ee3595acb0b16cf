"""A clone that chats with the original's memory while the original is unchanged: a real `orbital dev`, a real
WebSocket client and the scripted model on loopback. `main` gets a memory and a conversation, `agents.clone` copies
it to `twin`, a message to the twin's session reaches the model with main's memory in its system prompt and main's
conversation as its history; every item and object of `main` is the same, byte for byte, before and after."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.client import GatewayClient
from orbital.local.portable import TableItems, WorkspaceObjects
from orbital.local.store import LocalStore

from tests.conftest import wait_for
from tests.e2e.conftest import GatewayProcess
from tests.support.agent import configure_fake_model, follow_run
from tests.support.fake_llm import FakeLLM, reply

MEMORY = "# Memory\n\n- The user's cat is called Pixel-7f3a.\n"


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@pytest.fixture
def gateway(tmp_path: Path, llm: FakeLLM) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(tmp_path / "data").start()
    try:
        with GatewayClient(gw.url, timeout=15) as admin:
            admin.connect("client", "clone-admin")
            configure_fake_model(admin, llm.base_url)
        yield gw
    finally:
        gw.stop()


def chat(client: GatewayClient, llm: FakeLLM, key: str, text: str, answer: str) -> None:
    def respond(request: Any) -> Any:
        return reply(answer) if f"Session key: {key}" in request.body["messages"][0]["content"] else None

    llm.responder = respond
    started = client.call("chat.send", {"sessionKey": key, "message": text, "idempotencyKey": uuid.uuid4().hex})
    events = follow_run(client, started["runId"])
    assert events[-1]["state"] == "final", events[-1]
    # the run's end is recorded after its final event: wait for it, so what is compared is at rest
    wait_for(lambda: not client.call("session.stats", {"sessionKey": key})["isProcessing"], timeout=30, interval=0.05)


def _belongs(agent: str, pk: str, sk: str) -> bool:
    return f"agent:{agent}:" in pk or f"agent:{agent}:" in sk or pk.endswith(f"#{agent}") or sk == agent


def agent_state(gw: GatewayProcess, agent: str) -> tuple[dict[str, str], dict[str, bytes]]:
    """Every item of `agent` (keyed by a session key of its own or its id) as stored, and every object under its
    workspace with its bytes: read from the data directory beside the running gateway."""
    store = LocalStore.open(gw.data_dir, exclusive=False)
    try:
        items, objects = TableItems(store.table), WorkspaceObjects(store.workspace)
        found = {
            f"{i['PK']['S']}|{i['SK']['S']}": json.dumps(i, sort_keys=True)
            for i in items.scan()
            if _belongs(agent, i["PK"]["S"], i["SK"]["S"])
        }
        files: dict[str, bytes] = {}
        for key in objects.list_keys():
            if key.startswith(f"agents/{agent}/") or f"agent:{agent}:" in key:
                opened = objects.read(key)
                assert opened is not None
                stream, _ = opened
                try:
                    files[key] = stream.read()
                finally:
                    stream.close()
        return found, files
    finally:
        store.close()


def test_a_clone_chats_with_the_originals_memory_and_the_original_is_unchanged(
    gateway: GatewayProcess, llm: FakeLLM
) -> None:
    with GatewayClient(gateway.url, timeout=30) as client:
        client.connect("client", "clone-user")
        client.call("workspace.delete", {"path": "BOOTSTRAP.md"})  # commissioned: past its first run
        client.call("workspace.write", {"path": "MEMORY.md", "content": MEMORY})
        chat(client, llm, "agent:main:main", "My cat is called Pixel-7f3a.", "I will remember Pixel-7f3a.")
        chat(client, llm, "agent:main:errands", "Buy cat food.", "Noted: cat food.")
        before = agent_state(gateway, "main")
        assert "agent:main:main" in json.dumps(sorted(before[0]))
        assert before[1]["agents/main/MEMORY.md"] == MEMORY.encode()

        res = client.call("agents.clone", {"from": "main", "to": "twin"})
        assert res["from"] == "main" and res["to"] == "twin"
        assert res["sessions"] == 2 and res["objects"] >= 1

        llm.requests.clear()
        chat(client, llm, "agent:twin:main", "What is my cat called?", "Pixel-7f3a.")
        twin_requests = [r for r in llm.requests if "Session key: agent:twin:main" in r.body["messages"][0]["content"]]
        assert len(twin_requests) == 1
        request = twin_requests[0].body["messages"]
        assert "Pixel-7f3a" in request[0]["content"]  # the memory, in the system prompt
        said = json.dumps(request[1:])
        assert "My cat is called Pixel-7f3a." in said and "I will remember Pixel-7f3a." in said  # the history
        assert "Buy cat food." not in said  # another session's history stays in its own session

        listed = {a["id"]: a for a in client.call("agents.list")["agents"]}
        assert listed["twin"]["sessions"] == 2 and listed["main"]["sessions"] == 2
        twin_history = client.call("session.preview", {"sessionKey": "agent:twin:main"})["messages"]
        main_history = client.call("session.preview", {"sessionKey": "agent:main:main"})["messages"]
        assert len(twin_history) == len(main_history) + 2

    after = agent_state(gateway, "main")
    assert after[1] == before[1]  # main's files, byte for byte
    assert after[0] == before[0]  # main's sessions, messages, registry entries, heartbeat: item by item
    twin_files = agent_state(gateway, "twin")[1]
    assert twin_files["agents/twin/MEMORY.md"] == MEMORY.encode()
