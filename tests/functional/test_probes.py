"""node.probe lifecycle on deferred calls executed by moto (spec §13.4): dispatch on connect, results, wrong
answerers, timeouts with one re-send, node loss and reconnect with the same probeId, garbage collection."""

from __future__ import annotations

import json
from typing import Any

import boto3
from orbital.engines import deferred, probes
from orbital.ports import lifecycle
from orbital.store import keys

from tests.conftest import deferred_execution_arn, wait_for


def put_skill(services: Any, key: str, name: str, requires: dict) -> None:
    text = f"---\nname: {name}\nmetadata: {json.dumps({'gsv': {'requires': requires}})}\n---\n# {name}\n"
    services.workspace.put(key, text.encode())


def probe_events(sender: Any, connection_id: str) -> list[dict[str, Any]]:
    frames = sender.frames_to(connection_id)
    return [f["payload"] for f in frames if isinstance(f, dict) and f.get("event") == "node.probe"]


def stored_probes(services: Any, node_id: str) -> list[probes.Probe]:
    return probes.node_probes(services, node_id)


def executions_finished(flows: dict[str, str], services: Any, call_ids: list[str]) -> bool:
    """The timers of the seconds these calls were due in have run."""
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    arns = {deferred_execution_arn(flows, services, cid) for cid in call_ids}
    return all(sfn.describe_execution(executionArn=arn)["status"] != "RUNNING" for arn in arns)


def call_state(services: Any, call_id: str | None) -> str | None:
    found = deferred.get(services, call_id) if call_id else None
    return found.state if found else None


def runtime_of(services: Any, node_id: str) -> dict[str, Any]:
    entry = services.connections.node(node_id)
    assert entry is not None and entry.runtime is not None
    return entry.runtime


def test_connect_probes_and_the_answer_makes_the_skill_eligible(flows, services, sender, connect):
    put_skill(services, "skills/gh/SKILL.md", "github", {"bins": ["gh", "jq"]})
    put_skill(services, "skills/any/SKILL.md", "finder", {"anyBins": ["rg", "grep"], "bins": ["bad name"]})
    node = connect("node", "n1")
    [event] = probe_events(sender, node.connection_id)
    assert event["kind"] == "bins" and event["timeoutMs"] == 15000
    assert event["bins"] == ["gh", "grep", "jq", "rg"]  # sorted, unsafe names left out
    [probe] = stored_probes(services, "n1")
    assert (probe.probe_id, probe.state, probe.attempts, probe.agent_id) == (event["probeId"], "sent", 1, "main")
    client = connect("client", "c1")
    rows = {r["name"]: r for r in client.call("skills.status", {})["skills"]}
    assert rows["github"]["eligible"] is False and rows["github"]["reasons"] == ["requires bins: gh, jq"]

    answer = {"probeId": event["probeId"], "ok": True, "bins": {"gh": True, "jq": "yes", "rg": False}}
    assert node.call("node.probe.result", answer) == {"ok": True}
    runtime = runtime_of(services, "n1")
    assert runtime["hostBinStatus"] == {"gh": True, "grep": False, "jq": False, "rg": False}
    assert isinstance(runtime["hostBinStatusUpdatedAt"], int)
    assert stored_probes(services, "n1") == []
    assert call_state(services, probe.call_id) == "done"
    # a repeated answer is late
    assert node.call("node.probe.result", answer) == {"ok": True, "dropped": True}

    assert client.call("skills.status", {})["nodes"][0]["hostBins"] == ["gh"]
    # facts are fresh: an update probes nothing; forced, it probes every required bin again
    assert client.call("skills.update", {})["updatedNodeCount"] == 0
    forced = client.call("skills.update", {"force": True})
    assert forced["updatedNodeCount"] == 1 and forced["skippedNodeIds"] == []
    again = probe_events(sender, node.connection_id)[-1]
    assert again["probeId"] != event["probeId"] and again["bins"] == ["gh", "grep", "jq", "rg"]
    answer = {"probeId": again["probeId"], "ok": True, "bins": {"gh": True, "jq": True, "grep": True}}
    assert node.call("node.probe.result", answer) == {"ok": True}
    rows = {r["name"]: r for r in client.call("skills.status", {})["skills"]}
    assert rows["github"]["eligible"] is True and rows["github"]["eligibleHosts"] == ["n1"]


def test_only_the_addressed_node_may_answer(flows, services, sender, connect):
    put_skill(services, "skills/gh/SKILL.md", "github", {"bins": ["gh"]})
    n1 = connect("node", "n1")
    n2 = connect("node", "n2")
    client = connect("client", "c1")
    probe_id = probe_events(sender, n1.connection_id)[0]["probeId"]
    assert n2.error("node.probe.result", {"probeId": probe_id, "ok": True, "bins": {"gh": True}}) == {
        "code": 500,
        "message": f"Node n2 is not authorized for probe {probe_id}",
    }
    assert client.error("node.probe.result", {"probeId": probe_id, "ok": True}) == {
        "code": 403,
        "message": "Method node.probe.result not allowed for mode client: Only node clients can submit probe results",
    }
    assert n1.error("node.probe.result", {"ok": True}) == {"code": 400, "message": "probeId required"}
    assert n1.call("node.probe.result", {"probeId": "unknown", "ok": True}) == {"ok": True, "dropped": True}
    assert "gh" not in (runtime_of(services, "n1").get("hostBinStatus") or {})
    # the node's own failure report still counts as an answer: the bins it did not report are missing
    assert n1.call("node.probe.result", {"probeId": probe_id, "ok": False, "error": "boom"}) == {"ok": True}
    assert runtime_of(services, "n1")["hostBinStatus"] == {"gh": False}


def test_timeout_resends_the_same_probe_once_then_drops_it(flows, services, sender, connect):
    node = connect("node", "n1")
    client = connect("client", "c1")
    assert probe_events(sender, node.connection_id) == []
    put_skill(services, "skills/gh/SKILL.md", "github", {"bins": ["gh"]})
    update = client.call("skills.update", {"timeoutMs": 1000.7})
    assert update["updatedNodeCount"] == 1
    first = probe_events(sender, node.connection_id)[0]
    assert first["timeoutMs"] == 1000
    second = wait_for(lambda: probe_events(sender, node.connection_id)[1:], timeout=20)[0]
    assert second == first
    [probe] = stored_probes(services, "n1")
    assert probe.attempts == 2 and probe.sends == 2
    wait_for(lambda: not stored_probes(services, "n1"), timeout=20)
    # the owner record goes right after the probe (two deletes by the workflow's thread): wait for it too
    wait_for(lambda: services.table.get(keys.probe_owner(first["probeId"])) is None, timeout=20)
    assert len(probe_events(sender, node.connection_id)) == 2
    ids = [f"{first['probeId']}-1", f"{first['probeId']}-2"]
    assert wait_for(lambda: executions_finished(flows, services, ids))
    assert node.call("node.probe.result", {"probeId": first["probeId"], "ok": True}) == {"ok": True, "dropped": True}


def test_reconnect_resends_the_same_probe(flows, services, sender, connect):
    put_skill(services, "skills/gh/SKILL.md", "github", {"bins": ["gh"]})
    old = connect("node", "n1")
    [sent] = probe_events(sender, old.connection_id)
    call_id = stored_probes(services, "n1")[0].call_id
    lifecycle.disconnect(services, old.connection_id)
    [probe] = stored_probes(services, "n1")
    assert (probe.state, probe.attempts) == ("queued", 0)
    assert call_state(services, call_id) == "done"  # nothing waits for the lost socket any more
    new = connect("node", "n1")
    assert probe_events(sender, new.connection_id) == [sent]
    [probe] = stored_probes(services, "n1")
    assert (probe.state, probe.attempts, probe.connection_id) == ("sent", 1, new.connection_id)
    assert probe.call_id != call_id and call_state(services, probe.call_id) == "pending"
    # the old socket is no longer the node; the node itself still is
    assert new.call("node.probe.result", {"probeId": sent["probeId"], "bins": {"gh": True}}) == {"ok": True}
    assert runtime_of(services, "n1")["hostBinStatus"] == {"gh": True}


def test_replacement_moves_sent_probes_to_the_new_socket(flows, services, sender, connect):
    put_skill(services, "skills/gh/SKILL.md", "github", {"bins": ["gh"]})
    old = connect("node", "n1")
    [sent] = probe_events(sender, old.connection_id)
    first_call = stored_probes(services, "n1")[0].call_id
    new = connect("node", "n1")  # the old socket has not closed yet
    assert probe_events(sender, new.connection_id) == [sent]
    assert call_state(services, first_call) == "done"
    lifecycle.disconnect(services, old.connection_id)  # stale close: the probe stays with the new socket
    [probe] = stored_probes(services, "n1")
    assert (probe.state, probe.connection_id) == ("sent", new.connection_id)


def test_reconnect_after_max_age_produces_a_new_probe(flows, services, sender, connect):
    put_skill(services, "skills/gh/SKILL.md", "github", {"bins": ["gh"]})
    client = connect("client", "c1")
    client.call("config.set", {"path": "timeouts.skillProbeMaxAgeMs", "value": 1000})
    old = connect("node", "n1")
    [sent] = probe_events(sender, old.connection_id)
    created = stored_probes(services, "n1")[0].created_at
    lifecycle.disconnect(services, old.connection_id)
    wait_for(lambda: services.now_ms() - created > 1000, timeout=5)
    new = connect("node", "n1")
    [fresh] = probe_events(sender, new.connection_id)
    assert fresh["probeId"] != sent["probeId"] and fresh["bins"] == ["gh"]
    assert [p.probe_id for p in stored_probes(services, "n1")] == [fresh["probeId"]]
    assert services.table.get(keys.probe_owner(sent["probeId"])) is None
    assert new.call("node.probe.result", {"probeId": sent["probeId"], "ok": True}) == {"ok": True, "dropped": True}


def test_connect_refreshes_every_configured_agent(flows, services, sender, connect):
    client = connect("client", "c1")
    client.call("config.set", {"path": "agents.list", "value": [{"id": "Ops"}, {"id": "main"}, {"name": "x"}]})
    put_skill(services, "agents/ops/skills/deploy/SKILL.md", "deploy", {"bins": ["kubectl"]})
    put_skill(services, "skills/gh/SKILL.md", "github", {"bins": ["gh", "kubectl"]})
    node = connect("node", "n1")
    events = probe_events(sender, node.connection_id)
    # main first (gh, kubectl); ops then finds kubectl already being probed
    assert [e["bins"] for e in events] == [["gh", "kubectl"]]
    assert [p.agent_id for p in stored_probes(services, "n1")] == ["main"]
    put_skill(services, "agents/ops/skills/jq/SKILL.md", "jq", {"bins": ["jq"]})
    update = client.call("skills.update", {"agentId": "ops"})
    assert update["agentId"] == "ops" and update["updatedNodeCount"] == 1
    assert probe_events(sender, node.connection_id)[-1]["bins"] == ["jq"]
    assert sorted(p.agent_id for p in stored_probes(services, "n1")) == ["main", "ops"]
