"""Clients of GSV's last protocol-1 release (2026-03-02) against a real `orbital dev`, over real WebSockets, speaking
exactly as they do: nodes whose `connect` has no `hostRole` and that never answer `node.probe`, the late e2e suite's
"Node Registry Forget" test step by step, the late gating sentence for `node.exec.event`; and a real `orbital node`
forgotten with force."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from orbital.client import GatewayClient, RpcFailedError

from tests.conftest import wait_for
from tests.e2e.conftest import GatewayProcess, NodeProcess
from tests.support.agent import configure_fake_model, follow_run
from tests.support.fake_llm import FakeLLM, call, reply

LATE_TOOLS = [
    {
        "name": "Bash",
        "description": "Execute a shell command",
        "inputSchema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
    {
        "name": "Read",
        "description": "Read a file",
        "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
]
ALL_CAPABILITIES = sorted(
    ["filesystem.edit", "filesystem.list", "filesystem.read", "filesystem.write", "shell.exec", "text.search"]
)
LATE_RUNTIME = {
    "hostCapabilities": ALL_CAPABILITIES,
    "toolCapabilities": {"Bash": ["shell.exec"], "Read": ["filesystem.read"]},
}
"""`build_execution_node_runtime` of the late `gsv node`: capabilities only."""


def late_node(gateway: Any, node_id: str, *, tools: list[dict[str, Any]] | None = None, runtime: Any = None) -> Any:
    """A socket connected exactly as a late `gsv node` connects (its build version, its platform, no role)."""
    ws = GatewayClient(gateway.url, timeout=15)
    ws.connect(
        "node",
        node_id,
        client={"version": "0.0.1+dev.42.abcdef123456", "platform": "linux"},
        tools=tools or LATE_TOOLS,
        nodeRuntime=runtime or LATE_RUNTIME,
    )
    return ws


def names(client: GatewayClient) -> list[str]:
    return [t["name"] for t in client.call("tools.list")["tools"]]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def admin(gateway: Any) -> Iterator[GatewayClient]:
    with GatewayClient(gateway.url, timeout=20) as c:
        c.connect("client", unique("late-admin"))
        yield c


def test_a_node_without_host_role_connects_and_the_seed_checks_still_hold(gateway: Any, admin: GatewayClient) -> None:
    node_id = unique("node-late")
    with late_node(gateway, node_id) as node:
        assert node.hello["type"] == "hello-ok" and node.hello["protocol"] == 1
        assert {f"{node_id}__Bash", f"{node_id}__Read"} <= set(names(admin))
        assert node.call("tools.list")["tools"]  # the late node's keepalive
        # "rejects unnamespaced shared tools": a specialized late node of one capability
        special_id = unique("node-special")
        grep = [{"name": f"Grep{uuid.uuid4().hex[:6]}", "description": "search", "inputSchema": {"type": "object"}}]
        special = {"hostCapabilities": ["text.search"], "toolCapabilities": {grep[0]["name"]: ["text.search"]}}
        with late_node(gateway, special_id, tools=grep, runtime=special):
            assert f"{special_id}__{grep[0]['name']}" in names(admin)
            with pytest.raises(RpcFailedError) as err:
                admin.call("tool.invoke", {"tool": grep[0]["name"], "args": {}})
            assert (err.value.code, err.value.message) == (404, f"No node provides tool: {grep[0]['name']}")
        status = admin.call("skills.status", {})
        [facts] = [n for n in status["nodes"] if n["nodeId"] == node_id]
        assert facts["online"] is True and facts["hostCapabilities"] == ALL_CAPABILITIES
        assert facts["hostRole"] == "execution" and facts["canProbeBins"] is False
    # "rejects node connect when nodeRuntime is missing" (both releases' suites)
    with GatewayClient(gateway.url, timeout=15) as bare:
        res = bare.request(
            "connect", {"minProtocol": 1, "client": {"mode": "node", "id": unique("n")}, "tools": LATE_TOOLS}
        )
        assert res["error"]["code"] == 103 and "Invalid nodeRuntime" in res["error"]["message"]


def test_node_registry_forget(gateway: Any, admin: GatewayClient) -> None:
    """The late suite's "Node Registry Forget": requires force for connected nodes and removes node registry
    entries."""
    node_id = unique("node-forget")
    tool = f"Echo{uuid.uuid4().hex[:6]}"
    tools = [{"name": tool, "description": "echo", "inputSchema": {"type": "object"}}]
    runtime = {"hostCapabilities": ["shell.exec"], "toolCapabilities": {tool: ["shell.exec"]}}
    node = late_node(gateway, node_id, tools=tools, runtime=runtime)  # 1. connects without hostRole
    try:
        assert f"{node_id}__{tool}" in names(admin)  # 2.
        with pytest.raises(RpcFailedError) as err:  # 3.
            admin.call("node.forget", {"nodeId": node_id})
        assert "still connected" in err.value.message
        assert err.value.code == 409
        forgotten = admin.call("node.forget", {"nodeId": node_id, "force": True})  # 4.
        assert forgotten["ok"] is True
        assert forgotten["nodeId"] == node_id
        assert forgotten["removed"] is True
        assert forgotten["disconnected"] is True
        # 5. within 10 s, tools.list no longer lists the tool
        wait_for(lambda: f"{node_id}__{tool}" not in names(admin), 10, 0.1, what="the forgotten node's tool unlisted")
        closing = node.next_event("connection.closing", timeout=10)["payload"]
        assert closing == {"code": 1000, "reason": "Forgotten from node registry"}
    finally:
        node.close()
    # an offline known node is forgotten without force; an unknown id is no error
    other = unique("node-offline")
    late_node(gateway, other).close()
    wait_for(lambda: f"{other}__Bash" not in names(admin))
    assert admin.call("node.forget", {"nodeId": other}) == {
        "ok": True,
        "nodeId": other,
        "removed": True,
        "disconnected": False,
    }
    assert admin.call("node.forget", {"nodeId": other})["removed"] is False


def test_exec_events_from_a_client_are_refused_in_both_releases_words(gateway: Any, admin: GatewayClient) -> None:
    """The late suite's "rejects node.exec.event from non-node clients" and the seed's."""
    with pytest.raises(RpcFailedError) as err:
        admin.call(
            "node.exec.event",
            {"eventId": "e1", "sessionId": "s1", "event": "finished", "exitCode": 0, "endedAt": 1},
        )
    assert err.value.code == 403
    assert "Method node.exec.event not allowed for mode" in err.value.message
    assert "Only node clients can submit exec events" in err.value.message


@pytest.fixture(scope="module")
def llm(gateway: Any) -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        with GatewayClient(gateway.url, timeout=15) as c:
            c.connect("client", "late-model-admin")
            configure_fake_model(c, server.base_url)
        yield server


def test_a_late_node_that_never_answers_probes_gets_tool_calls(
    gateway: Any, admin: GatewayClient, llm: FakeLLM
) -> None:
    """A skill that needs a bin stays listed for the model, and the model's call reaches the late node."""
    llm.reset()
    skill = unique("ghskill")
    text = (
        f'---\nname: {skill}\ndescription: GitHub work\nmetadata: {{"gsv": {{"requires": {{"bins": ["gh"]}}}}}}\n---\n'
    )
    admin.call("workspace.write", {"path": f"skills/{skill}/SKILL.md", "content": text})
    with contextlib.suppress(RpcFailedError):  # past the first run's commissioning, whose prompt lists no skills
        admin.call("workspace.delete", {"path": "BOOTSTRAP.md"})
    node_id = unique("node-late")
    key = f"agent:main:e2e-{uuid.uuid4().hex[:8]}"

    def respond(request: Any) -> Any:
        if f"Session key: {key}" not in request.body["messages"][0]["content"]:
            return reply("(unrelated)")
        if any(m["role"] == "tool" for m in request.body["messages"]):
            return reply("The node answered.")
        return reply(tool_calls=[call(f"{node_id}__Bash", {"command": "gh --version"})])

    llm.responder = respond
    with late_node(gateway, node_id) as node:
        admin.call("skills.update", {"force": True})  # would probe a seed node; a late one is never asked
        row = next(r for r in admin.call("skills.status", {})["skills"] if r["name"] == skill)
        assert row["eligible"] is True and node_id in row["eligibleHosts"]
        started = admin.call("chat.send", {"sessionKey": key, "message": "use gh", "runId": str(uuid.uuid4())})
        invoke = node.next_event("tool.invoke", timeout=30)["payload"]
        assert invoke["tool"] == "Bash" and invoke["args"] == {"command": "gh --version"}
        assert node.call("tool.result", {"callId": invoke["callId"], "result": "gh version 2.0"}) == {"ok": True}
        events = follow_run(admin, started["runId"], timeout=30)
        assert events[-1]["state"] == "final"
        node.call("tools.list")  # reads (and keeps) every event sent to it before the answer
        assert not [e for e in node.events if e.get("event") == "node.probe"]
    prompts = [m["content"] for r in llm.requests if f"Session key: {key}" in (m := r.body["messages"][0])["content"]]
    assert prompts and f'<skill name="{skill}">' in prompts[0]
    tool_results = [m["content"] for r in llm.requests for m in r.body["messages"] if m["role"] == "tool"]
    assert any("gh version 2.0" in str(c) for c in tool_results)


def test_a_real_orbital_node_forgotten_with_force_stops(gateway: Any, admin: GatewayClient, tmp_path: Any) -> None:
    node_id = unique("orbital-node")
    node = NodeProcess(gateway, node_id, tmp_path / node_id / "ws").start()
    try:
        with pytest.raises(RpcFailedError) as err:
            admin.call("node.forget", {"nodeId": node_id})
        assert (err.value.code, err.value.message) == (
            409,
            f"Node {node_id} is still connected (use force=true to disconnect and forget)",
        )
        assert admin.call("node.forget", {"nodeId": node_id, "force": True}) == {
            "ok": True,
            "nodeId": node_id,
            "removed": True,
            "disconnected": True,
        }
        assert node.proc is not None
        assert node.proc.wait(timeout=30) == 3  # it does not come back to take its id again
        assert f"{node_id}__Bash" not in names(admin)
        assert "removed node" in node.log_file.read_text()
    finally:
        node.stop()


def test_a_real_orbital_node_is_still_probed_beside_a_late_node(
    gateway: Any, admin: GatewayClient, node_factory: Any
) -> None:
    """Seed-era and late nodes side by side: `orbital node` answers its probe and its bins count; the late node is
    never asked and is not ruled out by a bin nobody has."""
    present, absent = unique("present"), unique("absent")
    for name, bins in ((present, ["sh"]), (absent, [f"no-such-bin-{uuid.uuid4().hex[:6]}"])):
        text = f'---\nname: {name}\nmetadata: {{"gsv": {{"requires": {{"bins": {bins}}}}}}}\n---\n'.replace("'", '"')
        admin.call("workspace.write", {"path": f"skills/{name}/SKILL.md", "content": text})
    seed = node_factory(unique("orbital"))
    late_id = unique("node-late")
    with late_node(gateway, late_id) as late:
        admin.call("skills.update", {"force": True})

        def rows() -> dict[str, Any]:
            return {r["name"]: r for r in admin.call("skills.status", {})["skills"]}

        def seed_answered() -> bool:
            nodes = {n["nodeId"]: n for n in admin.call("skills.status", {})["nodes"]}
            return "sh" in nodes[seed.node_id]["hostBins"]

        wait_for(seed_answered, timeout=30)
        assert wait_for(lambda: seed.node_id in rows()[present]["eligibleHosts"], timeout=30)
        assert late_id in rows()[present]["eligibleHosts"]
        assert rows()[absent]["eligibleHosts"] == [late_id]
        nodes = {n["nodeId"]: n for n in admin.call("skills.status", {})["nodes"]}
        assert nodes[seed.node_id]["canProbeBins"] is True and nodes[late_id]["canProbeBins"] is False
        late.call("tools.list")  # reads (and keeps) every event sent to it before the answer
        assert not [e for e in late.events if e.get("event") == "node.probe"]


def test_a_known_node_outlives_a_restart_until_forgotten(data_dir: Any) -> None:
    gw = GatewayProcess(data_dir).start()
    try:
        node_id = unique("node-late")
        late_node(gateway=gw, node_id=node_id).close()
        gw.stop()
        gw.start()
        with GatewayClient(gw.url, timeout=15) as admin:
            admin.connect("client", unique("late-admin"))
            assert f"{node_id}__Bash" not in names(admin)  # offline: its tools are not offered
            assert admin.call("node.forget", {"nodeId": node_id}) == {
                "ok": True,
                "nodeId": node_id,
                "removed": True,
                "disconnected": False,
            }
    finally:
        gw.stop()
