"""Tool approvals end to end: the real `orbital dev` in a subprocess, a real `orbital node`, real WebSocket clients
and the scripted model on loopback. Mirrors GSV's late suite ("Tool HIL Approval", gsv-protocol-late.md §17 items 5
and 6) and adds what Orbital promises beyond it: a paused run survives a restart of the gateway."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.client import GatewayClient

from tests.conftest import wait_for
from tests.e2e.conftest import GatewayProcess, NodeProcess
from tests.support.agent import configure_fake_model
from tests.support.fake_llm import FakeLLM, call, reply


@pytest.fixture(scope="module")
def llm(gateway: Any) -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        with GatewayClient(gateway.url, timeout=15) as admin:
            admin.connect("client", "hil-admin")
            configure_fake_model(admin, server.base_url)
        yield server


@pytest.fixture
def user(gateway: Any, llm: FakeLLM) -> Iterator[GatewayClient]:
    llm.reset()
    with GatewayClient(gateway.url, timeout=20) as c:
        c.connect("client", f"hil-{uuid.uuid4().hex[:6]}")
        yield c
    llm.reset()


def scripted(llm: FakeLLM, key: str, *items: Any) -> None:
    queue = list(items)

    def respond(request: Any) -> Any:
        if f"Session key: {key}" in request.body["messages"][0]["content"] and queue:
            return queue.pop(0)
        return reply("(unrelated)")

    llm.responder = respond


def ask_for(client: GatewayClient, tool: str, **extra: Any) -> None:
    client.call(
        "config.set",
        {
            "path": "toolApproval",
            "value": {"defaultDecision": "allow", "rules": [{"id": "ask-hil-tool", "tool": tool, "decision": "ask"}]},
        },
    )
    for path, value in extra.items():
        client.call("config.set", {"path": path, "value": value})


def next_state(client: GatewayClient, run_id: str, states: tuple[str, ...], timeout: float = 60) -> dict[str, Any]:
    """The next `chat` event of the run in one of `states` (the others are skipped)."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no {states} event for run {run_id} within {timeout}s")
        payload = client.next_event("chat", timeout=left).get("payload") or {}
        if payload.get("runId") == run_id and payload.get("state") in states:
            return payload


def marker_lines(node: NodeProcess) -> list[str]:
    path = node.workspace / "hil-marker.txt"
    return path.read_text().splitlines() if path.exists() else []


def no_invoke_for(node: NodeProcess, seconds: float) -> None:
    """The node ran nothing: its marker file stays absent for `seconds` (GSV's own check waits the same way)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert marker_lines(node) == []
        time.sleep(0.1)


def bash(node: NodeProcess) -> Any:
    return call(f"{node.node_id}__Bash", {"command": f"echo HIL_RAN >> {node.workspace / 'hil-marker.txt'}"})


def test_pauses_until_approval_then_dispatches_and_completes(
    user: GatewayClient, llm: FakeLLM, node_factory: Any
) -> None:
    node = node_factory(f"hil-{uuid.uuid4().hex[:6]}")
    key = f"agent:main:hil-{uuid.uuid4().hex[:8]}"
    ask_for(user, f"{node.node_id}__Bash")
    scripted(llm, key, reply(tool_calls=[bash(node)]), reply("HIL_E2E_DONE"))
    run_id = f"hil-run-{uuid.uuid4().hex[:8]}"
    started = user.call("chat.send", {"sessionKey": key, "message": "run the tool", "runId": run_id})
    assert started == {"status": "started", "runId": run_id}
    paused = next_state(user, run_id, ("paused", "final", "error"))
    assert paused["state"] == "paused", paused
    assert paused["message"]["content"][0]["text"].startswith("Run paused: tool approval required.")
    no_invoke_for(node, 2.5)
    waiting = user.call("chat.send", {"sessionKey": key, "message": "still waiting?"})
    assert waiting["status"] == "paused" and "paused" in waiting["response"].lower()
    assert waiting["approvalId"] == paused["approval"]["approvalId"]
    approved = user.call("chat.send", {"sessionKey": key, "message": "yes"})
    assert approved["status"] == "paused" and "approved" in approved["response"].lower()
    assert approved["runId"] == run_id
    wait_for(lambda: marker_lines(node) == ["HIL_RAN"], timeout=15)
    final = next_state(user, run_id, ("final", "error"))
    assert final["state"] == "final", final
    preview = user.call("session.preview", {"sessionKey": key})
    latest = [m for m in preview["messages"] if m["role"] == "assistant"][-1]
    assert "HIL_E2E_DONE" in str(latest["content"])
    assert marker_lines(node) == ["HIL_RAN"]


def test_denies_when_the_user_rejects_and_completes_without_dispatch(
    user: GatewayClient, llm: FakeLLM, node_factory: Any
) -> None:
    node = node_factory(f"hil-{uuid.uuid4().hex[:6]}")
    key = f"agent:main:hil-{uuid.uuid4().hex[:8]}"
    ask_for(user, f"{node.node_id}__Bash")
    # the model retries once after the denial and is denied again (GSV's test allows it)
    scripted(llm, key, reply(tool_calls=[bash(node)]), reply(tool_calls=[bash(node)]), reply("gave up"))
    started = user.call("chat.send", {"sessionKey": key, "message": "run the tool"})
    run_id = started["runId"]
    assert next_state(user, run_id, ("paused", "final", "error"))["state"] == "paused"
    no_invoke_for(node, 2.5)
    denied = user.call("chat.send", {"sessionKey": key, "message": "no"})
    assert denied["status"] == "paused" and "denied" in denied["response"].lower()
    after = next_state(user, run_id, ("paused", "final", "error"))
    assert after["state"] != "error", after
    assert after["state"] == "paused"  # the retry asks again
    again = user.call("chat.send", {"sessionKey": key, "message": "no"})
    assert again["status"] == "paused"
    assert next_state(user, run_id, ("paused", "final", "error"))["state"] == "final"
    no_invoke_for(node, 1)
    history = user.call("approval.history", {"sessionKey": key})["entries"]
    assert [e["decision"] for e in history] == ["deny", "deny"]
    assert {e["via"] for e in history} == {"chat"}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["stopped", "killed"])
def test_a_paused_run_survives_a_restart_and_runs_the_call_once(tmp_path: Path, sig: int) -> None:
    data_dir = tmp_path / "data"
    with FakeLLM() as llm:
        gateway = GatewayProcess(data_dir).start()
        node = None
        try:
            node = NodeProcess(gateway, "keeper", tmp_path / "keeper" / "ws").start()
            key = "agent:main:restart-hil"
            with GatewayClient(gateway.url, timeout=20) as client:
                client.connect("client", "restart-admin")
                configure_fake_model(client, llm.base_url)
                ask_for(client, "keeper__Bash")
                scripted(llm, key, reply(tool_calls=[bash(node)]), reply("done after the restart"))
                started = client.call("chat.send", {"sessionKey": key, "message": "go"})
                run_id = started["runId"]
                paused = next_state(client, run_id, ("paused", "final", "error"))
                assert paused["state"] == "paused", paused
                approval_id = paused["approval"]["approvalId"]
            port = gateway.port
            gateway.stop(sig)
            gateway.start(port=port)  # the same data directory and port: the node reconnects by itself
            with GatewayClient(gateway.url, timeout=20) as client:
                client.connect("client", "restart-admin-2")
                listed = client.call("approval.list", {"sessionKey": key})["approvals"]
                assert [a["approvalId"] for a in listed] == [approval_id]
                assert client.call("session.stats", {"sessionKey": key})["isProcessing"] is True
                wait_for(lambda: "keeper__Bash" in [t["name"] for t in client.call("tools.list")["tools"]], timeout=30)
                assert marker_lines(node) == []
                answer = client.call("chat.send", {"sessionKey": key, "message": "yes"})
                assert answer == {
                    "status": "paused",
                    "runId": run_id,
                    "response": "Approved keeper__Bash. Continuing run.",
                }
                again = client.call("approval.resolve", {"approvalId": approval_id, "decision": "approve"})
                assert again["resolved"] is False and again["decision"] == "approve"
                final = next_state(client, run_id, ("final", "error"))
                assert final["state"] == "final", final
                assert marker_lines(node) == ["HIL_RAN"]  # dispatched exactly once
        finally:
            if node is not None:
                node.stop()
            gateway.stop()
