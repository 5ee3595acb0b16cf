"""GSV's last protocol-1 release (2026-03-02) beside the seed's: nodes without `hostRole` that never answer
`node.probe`, `node.forget` over the known nodes, GSV's late refusal sentence for a connection's mode, and pending
tool calls failed when their node is replaced."""

from __future__ import annotations

import json
from typing import Any

from orbital.store import keys

from tests.conftest import NODE_RUNTIME, NODE_TOOLS, wait_for

LATE_TOOLS = [
    {"name": "Bash", "description": "Run a shell command", "inputSchema": {"type": "object"}},
    {"name": "Read", "description": "Read a file", "inputSchema": {"type": "object"}},
]
LATE_RUNTIME = {
    "hostCapabilities": ["filesystem.edit", "filesystem.list", "filesystem.read", "filesystem.write", "shell.exec"],
    "toolCapabilities": {"Bash": ["shell.exec"], "Read": ["filesystem.read"]},
}
"""What a late GSV node sends: capabilities only, no role, no host facts."""


def late_node(connect: Any, node_id: str, **extra: Any) -> Any:
    return connect(
        "node", node_id, tools=extra.pop("tools", LATE_TOOLS), nodeRuntime=extra.pop("nodeRuntime", LATE_RUNTIME)
    )


def put_skill(services: Any, key: str, name: str, requires: dict) -> None:
    text = f"---\nname: {name}\nmetadata: {json.dumps({'gsv': {'requires': requires}})}\n---\n# {name}\n"
    services.workspace.put(key, text.encode())


def events(sender: Any, connection_id: str, name: str) -> list[dict[str, Any]]:
    return [f["payload"] for f in sender.frames_to(connection_id) if isinstance(f, dict) and f.get("event") == name]


def responses(sender: Any, connection_id: str) -> list[dict[str, Any]]:
    return [f for f in sender.frames_to(connection_id) if isinstance(f, dict) and f.get("type") == "res"]


def tool_names(client: Any) -> list[str]:
    return [t["name"] for t in client.call("tools.list")["tools"]]


# --- connect -----------------------------------------------------------------------------------------------------


def test_a_node_without_host_role_connects_and_its_capabilities_alone_route(services, connect):
    node = late_node(connect, "late-1")
    client = connect("client", "c1")
    assert {"late-1__Bash", "late-1__Read"} <= set(tool_names(client))
    runtime = services.connections.node("late-1").runtime
    assert runtime == {
        "hostCapabilities": LATE_RUNTIME["hostCapabilities"],
        "toolCapabilities": LATE_RUNTIME["toolCapabilities"],
    }
    # a specialized late node (the late suite's): one capability, no execution baseline
    special = {"hostCapabilities": ["text.search"], "toolCapabilities": {"Grep": ["text.search"]}}
    grep = [{"name": "Grep", "description": "search", "inputSchema": {"type": "object"}}]
    late_node(connect, "late-2", tools=grep, nodeRuntime=special)
    assert "late-2__Grep" in tool_names(client)
    assert node.call("tools.list")["tools"]  # its keepalive


def test_late_validation_keeps_the_capability_rules_and_ignores_unknown_keys(services, connect):
    from tests.conftest import Rpc

    def refused(runtime: Any) -> dict[str, Any]:
        rpc = Rpc(services, "conn-late-bad")
        params = {
            "minProtocol": 1,
            "client": {"mode": "node", "id": "bad"},
            "tools": LATE_TOOLS,
            "nodeRuntime": runtime,
        }
        return rpc.error("connect", params)

    assert refused(None) == {"code": 103, "message": "Invalid nodeRuntime: nodeRuntime for bad is required"}
    missing = dict(LATE_RUNTIME, toolCapabilities={"Bash": ["shell.exec"]})
    assert refused(missing)["message"] == (
        "Invalid nodeRuntime: nodeRuntime for bad toolCapabilities missing entry for tool: Read"
    )
    assert "unknown capability: gpu" in refused(dict(LATE_RUNTIME, hostCapabilities=["gpu"]))["message"]
    # a role that is given must still be one of the seed's (a seed-era node is checked as the seed checked it)
    assert "hostRole must be one of" in refused(dict(LATE_RUNTIME, hostRole="robot"))["message"]
    seed_without_baseline = dict(NODE_RUNTIME, hostCapabilities=["filesystem.read", "shell.exec"])
    assert "missing execution baseline" in refused(seed_without_baseline)["message"]
    # unknown keys, and the seed's host facts in whatever shape, are ignored on a runtime without a role
    odd = dict(LATE_RUNTIME, hostOs=7, hostEnv="PATH", hostBinStatus=[1], futureKey={"x": 1})
    late_node(connect, "late-odd", nodeRuntime=odd)
    assert services.connections.node("late-odd").runtime == {
        "hostCapabilities": LATE_RUNTIME["hostCapabilities"],
        "toolCapabilities": LATE_RUNTIME["toolCapabilities"],
    }
    # a seed node still connects with its role and host facts kept
    connect("node", "seed-1")
    assert services.connections.node("seed-1").runtime["hostRole"] == "execution"


# --- skills without probes -------------------------------------------------------------------------------------------


def test_a_late_node_is_never_probed_and_bin_requirements_do_not_rule_it_out(services, sender, connect):
    put_skill(services, "skills/gh/SKILL.md", "github", {"bins": ["gh"]})
    put_skill(services, "skills/lin/SKILL.md", "linux-only", {"os": ["linux"], "env": ["HOME"]})
    put_skill(
        services, "skills/ed/SKILL.md", "editor", {"capabilities": ["filesystem.edit"], "hostRoles": ["execution"]}
    )
    put_skill(services, "skills/gpu/SKILL.md", "searcher", {"hostRoles": ["specialized"]})
    node = late_node(connect, "late-1")
    client = connect("client", "c1")
    assert events(sender, node.connection_id, "node.probe") == []
    update = client.call("skills.update", {"force": True})
    assert update["updatedNodeCount"] == 0 and update["skippedNodeIds"] == ["late-1"]
    assert events(sender, node.connection_id, "node.probe") == []
    status = client.call("skills.status", {})
    [facts] = status["nodes"]
    assert facts["nodeId"] == "late-1" and facts["online"] is True
    # no declared role: the execution baseline in its capabilities makes it an execution host
    assert facts["hostRole"] == "execution" and facts["canProbeBins"] is False
    rows = {r["name"]: r for r in status["skills"]}
    for name in ("github", "linux-only", "editor"):
        assert (rows[name]["eligible"], rows[name]["eligibleHosts"], rows[name]["reasons"]) == (True, ["late-1"], [])
    assert rows["searcher"]["eligible"] is False
    assert rows["searcher"]["reasons"] == ["requires hostRoles: specialized"]


def test_a_seed_node_still_has_its_bins_checked(services, sender, connect):
    put_skill(services, "skills/gh/SKILL.md", "github", {"bins": ["gh"]})
    node = connect("node", "seed-1")
    client = connect("client", "c1")
    [probe] = events(sender, node.connection_id, "node.probe")
    row = next(r for r in client.call("skills.status", {})["skills"] if r["name"] == "github")
    assert row["eligible"] is False and row["reasons"] == ["requires bins: gh"]
    node.call("node.probe.result", {"probeId": probe["probeId"], "ok": True, "bins": {"gh": False}})
    row = next(r for r in client.call("skills.status", {})["skills"] if r["name"] == "github")
    assert row["eligible"] is False


def test_a_seed_node_that_never_answers_its_probe_is_not_ruled_out_for_good(flows, services, sender, connect):
    node = connect("node", "seed-1")
    client = connect("client", "c1")
    put_skill(services, "skills/gh/SKILL.md", "github", {"bins": ["gh"]})
    assert client.call("skills.update", {"timeoutMs": 1000})["updatedNodeCount"] == 1
    first = events(sender, node.connection_id, "node.probe")[0]

    def github() -> dict[str, Any]:
        return next(r for r in client.call("skills.status", {})["skills"] if r["name"] == "github")

    assert github()["eligible"] is False
    # sent twice, unanswered both times: the bins are unknown, not missing
    wait_for(lambda: github()["eligible"], timeout=30)
    assert len(events(sender, node.connection_id, "node.probe")) == 2
    assert github()["eligibleHosts"] == ["seed-1"]
    # an answer later makes the facts known again
    client.call("skills.update", {"force": True, "timeoutMs": 5000})
    again = events(sender, node.connection_id, "node.probe")[-1]
    assert again["probeId"] != first["probeId"]
    node.call("node.probe.result", {"probeId": again["probeId"], "ok": True, "bins": {"gh": False}})
    assert github()["eligible"] is False and github()["reasons"] == ["requires bins: gh"]


# --- node.forget -----------------------------------------------------------------------------------------------------


def test_node_forget_checks_its_params_and_needs_force_for_a_connected_node(services, sender, connect):
    node = late_node(connect, "late-1")
    client = connect("client", "c1")
    for params in ({}, {"nodeId": ""}, {"nodeId": "   "}, {"nodeId": 7}):
        assert client.error("node.forget", params) == {"code": 400, "message": "nodeId required"}
    for force in (None, False, "true", 1):
        params: dict[str, Any] = {"nodeId": " late-1 "}
        if force is not None:
            params["force"] = force
        assert client.error("node.forget", params) == {
            "code": 409,
            "message": "Node late-1 is still connected (use force=true to disconnect and forget)",
        }
    assert "late-1__Bash" in tool_names(client)
    assert sender.closes == []
    assert node.error("node.forget", {"nodeId": "late-1", "force": True}) == {
        "code": 403,
        "message": "Method node.forget not allowed for mode node: only client connections may call it",
    }


def test_node_forget_with_force_disconnects_fails_pending_calls_and_removes_the_tools(flows, services, sender, connect):
    node = late_node(connect, "late-1")
    client = connect("client", "c1")
    assert client.frame("tool.invoke", {"tool": "late-1__Bash", "args": {"command": "sleep 60"}}) is None
    [invoke] = events(sender, node.connection_id, "tool.invoke")
    result = client.call("node.forget", {"nodeId": "late-1", "force": True})
    assert result == {"ok": True, "nodeId": "late-1", "removed": True, "disconnected": True}
    assert (node.connection_id, 1000, "Forgotten from node registry") in sender.closes
    assert "late-1__Bash" not in tool_names(client)
    assert responses(sender, client.connection_id)[-1]["error"] == {
        "code": 503,
        "message": "Node removed from registry: late-1",
    }
    # the socket is no node any more; its late answer finds nothing to complete
    assert services.connections.get(node.connection_id) is None
    assert node.error("tool.result", {"callId": invoke["callId"], "result": "late"})["code"] == 101
    # forgotten: a second forget knows nothing of it, and that is no error
    assert client.call("node.forget", {"nodeId": "late-1"}) == {
        "ok": True,
        "nodeId": "late-1",
        "removed": False,
        "disconnected": False,
    }


def test_an_offline_node_stays_known_until_forgotten(services, connect):
    from orbital.ports import lifecycle

    node = connect(
        "node",
        "late-1",
        tools=LATE_TOOLS,
        nodeRuntime=LATE_RUNTIME,
        client={"mode": "node", "id": "late-1", "platform": "linux", "version": "0.0.1+dev.42.abcdef123456"},
    )
    client = connect("client", "c1")
    [known] = services.connections.known_nodes()
    assert known["online"] is True and known["clientPlatform"] == "linux"
    assert known["clientVersion"] == "0.0.1+dev.42.abcdef123456"
    lifecycle.disconnect(services, node.connection_id)
    assert "late-1__Bash" not in tool_names(client)  # tools.list: connected nodes only
    [known] = services.connections.known_nodes()
    assert known["online"] is False and known["lastDisconnectedAt"] >= known["lastConnectedAt"]
    assert known["tools"] == ["Bash", "Read"]
    assert client.call("node.forget", {"nodeId": "late-1"}) == {
        "ok": True,
        "nodeId": "late-1",
        "removed": True,
        "disconnected": False,
    }
    assert services.connections.known_nodes() == []
    assert services.table.get(keys.node_catalog("late-1")) is None


# --- pending calls and the mode refusal ------------------------------------------------------------------------------


def test_a_replaced_node_fails_its_pending_tool_calls(flows, services, sender, connect):
    late_node(connect, "late-1")
    client = connect("client", "c1")
    assert client.frame("tool.invoke", {"tool": "late-1__Bash", "args": {"command": "sleep 60"}}) is None
    late_node(connect, "late-1")  # the same id on a new socket
    assert responses(sender, client.connection_id)[-1]["error"] == {
        "code": 503,
        "message": "Node replaced during tool request: late-1",
    }


def test_a_refused_mode_gets_both_releases_sentences(services, connect):
    client = connect("client", "c1")
    error = client.error("node.exec.event", {"sessionId": "s", "event": "finished"})
    assert error["code"] == 403
    assert "Method node.exec.event not allowed for mode" in error["message"]  # GSV's late e2e suite
    assert "Only node clients can submit exec events" in error["message"]  # the seed's
    node = connect("node", "n1", tools=NODE_TOOLS)
    # refused before its params are read (these would be a 400 for a client)
    assert node.error("logs.get", {"lines": 0}) == {
        "code": 101,
        "message": "Method logs.get not allowed for mode node: Not connected",
    }
    hello = client.call("connect", {"minProtocol": 1, "client": {"mode": "client", "id": "c1"}})
    assert "node.forget" in hello["features"]["methods"]
