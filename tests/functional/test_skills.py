"""skills.status / skills.update against moto S3 and DynamoDB (spec §13.1, §13.2, §13.5)."""

from __future__ import annotations

import json
from typing import Any

from orbital.methods import registry

NO_SHELL_RUNTIME = {
    "hostRole": "specialized",
    "hostCapabilities": ["filesystem.read", "text.search"],
    "toolCapabilities": {"Read": ["filesystem.read"]},
}
READ_TOOL = [{"name": "Read", "description": "Read a file", "inputSchema": {"type": "object"}}]


def valid(method: str, payload: dict) -> dict:
    spec = registry().get(method)
    assert spec is not None and spec.result is not None
    spec.result.model_validate(payload)
    return payload


def put_skill(services: Any, key: str, name: str, requires: dict | None = None, description: str = "") -> None:
    lines = ["---", f"name: {name}"]
    if description:
        lines.append(f"description: {description}")
    if requires is not None:
        lines.append("metadata: " + json.dumps({"gsv": {"requires": requires}}))
    lines += ["---", "", f"# {name}", "", f"About {name}.", ""]
    services.workspace.put(key, "\n".join(lines).encode(), content_type="text/markdown")


def test_status_on_an_empty_store(rpc):
    status = valid("skills.status", rpc.call("skills.status", {}))
    assert isinstance(status["refreshedAt"], int) and status["refreshedAt"] > 0
    assert {k: v for k, v in status.items() if k != "refreshedAt"} == {
        "agentId": "main",
        "requiredBins": [],
        "nodes": [],
        "skills": [],
    }
    assert rpc.call("skills.status", {"agentId": "  Ops Team "})["agentId"] == "ops-team"
    update = valid("skills.update", rpc.call("skills.update", {}))
    assert (update["updatedNodeCount"], update["skippedNodeIds"], update["errors"]) == (0, [], [])


def test_agent_skill_overrides_the_global_one(services, rpc):
    put_skill(services, "skills/demo/SKILL.md", "demo", description="global demo")
    put_skill(services, "skills/ops/SKILL.md", "ops")
    put_skill(services, "agents/main/skills/demo/SKILL.md", "demo", description="agent demo")
    put_skill(services, "agents/main/skills/local/SKILL.md", "local")
    services.workspace.put("agents/main/skills/local/NOTES.md", b"not a skill")
    services.workspace.put("skills/SKILL.md", b"a file at the root is not a skill")
    rows = valid("skills.status", rpc.call("skills.status", {}))["skills"]
    assert [(r["name"], r["location"], r["description"]) for r in rows] == [
        ("demo", "agents/main/skills/demo/SKILL.md", "agent demo"),
        ("local", "agents/main/skills/local/SKILL.md", "About local."),
        ("ops", "skills/ops/SKILL.md", "About ops."),
    ]
    assert all(r["eligible"] and r["reasons"] == [] and r["always"] is False for r in rows)
    other = rpc.call("skills.status", {"agentId": "other"})["skills"]
    assert [(r["name"], r["location"]) for r in other] == [
        ("demo", "skills/demo/SKILL.md"),
        ("ops", "skills/ops/SKILL.md"),
    ]


def test_entries_disable_and_requirements(services, rpc):
    put_skill(services, "skills/gh/SKILL.md", "github", {"bins": ["gh"], "env": ["GITHUB_TOKEN"]})
    put_skill(services, "skills/tidy/SKILL.md", "tidy", {"bins": ["tidy"]})
    put_skill(services, "skills/bad/SKILL.md", "bad", {"capabilities": ["shell.exe"]})
    rpc.call("config.set", {"path": "skills.entries", "value": {"tidy": {"enabled": False}}})
    status = valid("skills.status", rpc.call("skills.status", {}))
    assert status["requiredBins"] == ["gh"]
    rows = {r["name"]: r for r in status["skills"]}
    assert rows["tidy"] == {
        "name": "tidy",
        "description": "About tidy.",
        "location": "skills/tidy/SKILL.md",
        "always": False,
        "eligible": False,
        "eligibleHosts": [],
        "reasons": ["disabled by skills.entries policy"],
    }
    assert rows["bad"]["eligible"] is False and rows["bad"]["reasons"] == ["invalid requirement identifiers"]
    assert rows["github"]["reasons"] == ["no connected hosts"]
    assert rows["github"]["requirements"]["env"] == ["GITHUB_TOKEN"]
    # the entry can also re-enable by directory name with its own requirements
    rpc.call("config.set", {"path": "skills.entries", "value": {"gh": {"requires": {"bins": []}, "always": True}}})
    rows = {r["name"]: r for r in rpc.call("skills.status", {})["skills"]}
    assert rows["github"]["always"] is True and rows["github"]["eligible"] is True


def test_nodes_in_status_and_nodes_that_cannot_probe(services, connect, rpc):
    connect("node", "phone", tools=READ_TOOL, nodeRuntime=NO_SHELL_RUNTIME)
    connect(
        "node",
        "mac",
        nodeRuntime={
            "hostRole": "execution",
            "hostCapabilities": ["filesystem.list", "filesystem.read", "filesystem.write", "shell.exec"],
            "toolCapabilities": {"Bash": ["shell.exec"], "Read": ["filesystem.read"]},
            "hostOs": "Darwin",
            "hostEnv": ["GITHUB_TOKEN"],
            "hostBinStatus": {"gh": True, "jq": False},
            "hostBinStatusUpdatedAt": services.now_ms(),
        },
    )
    put_skill(services, "skills/gh/SKILL.md", "github", {"bins": ["gh"], "env": ["GITHUB_TOKEN"], "os": ["darwin"]})
    put_skill(services, "skills/jq/SKILL.md", "jq", {"bins": ["jq"]})
    status = valid("skills.status", rpc.call("skills.status", {}))
    assert [n["nodeId"] for n in status["nodes"]] == ["mac", "phone"]
    mac, phone = status["nodes"]
    assert mac["hostOs"] == "darwin" and mac["hostBins"] == ["gh"] and mac["canProbeBins"] is True
    assert mac["hostEnv"] == ["GITHUB_TOKEN"] and isinstance(mac["hostBinStatusUpdatedAt"], int)
    assert phone == {
        "nodeId": "phone",
        "online": True,
        "hostRole": "specialized",
        "hostCapabilities": ["filesystem.read", "text.search"],
        "hostEnv": [],
        "hostBins": [],
        "canProbeBins": False,
    }
    rows = {r["name"]: r for r in status["skills"]}
    assert rows["github"]["eligible"] is True and rows["github"]["eligibleHosts"] == ["mac"]
    assert rows["jq"]["eligible"] is False and rows["jq"]["reasons"] == ["requires bins: jq"]
    # mac's facts are fresh and already cover both bins: nothing to probe; phone cannot run commands
    update = valid("skills.update", rpc.call("skills.update", {}))
    assert (update["updatedNodeCount"], update["skippedNodeIds"], update["errors"]) == (0, ["phone"], [])
    assert rows.keys() == {r["name"] for r in update["skills"]}


def test_discovery_reads_every_page_of_the_listing(services, rpc):
    client = services.workspace.client
    for i in range(1001):  # one full page of other files first
        client.put_object(Bucket=services.workspace.bucket, Key=f"agents/main/skills/aaa/ref/{i:04d}.md", Body=b"x")
    put_skill(services, "agents/main/skills/zzz/SKILL.md", "late")
    put_skill(services, "skills/zzz/SKILL.md", "shadowed")
    rows = rpc.call("skills.status", {})["skills"]
    assert [(r["name"], r["location"]) for r in rows] == [("late", "agents/main/skills/zzz/SKILL.md")]
