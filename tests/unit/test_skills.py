"""Skills domain (spec §13.1-§13.2, §13.4 inventory, acceptance rows §15.6 skills parts and §15.12)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from orbital.domain import skills as sk
from orbital.domain.config import defaults, get_path

GITHUB_SKILL = """---
name: github
description: "GitHub integration"
metadata:
  {
    "openclaw": {
      "emoji": "🐙",
      "requires": {
        "bins": ["gh"],
        "env": ["GITHUB_TOKEN"],
      },
    },
  }
---

# GitHub

Use gh.
"""

BASELINE = ["filesystem.list", "filesystem.read", "filesystem.write", "shell.exec"]


def skill_md(name: str, requires: dict[str, Any] | None = None, *, ns: str = "gsv", extra: str = "") -> str:
    import json

    lines = ["---", f"name: {name}", f"description: {name} skill"]
    if requires is not None:
        lines.append("metadata: " + json.dumps({ns: {"requires": requires}}))
    if extra:
        lines.append(extra)
    lines += ["---", "", f"# {name}", ""]
    return "\n".join(lines)


def node(node_id: str, runtime: dict[str, Any] | None, tools: list[str] | None = None) -> SimpleNamespace:
    return SimpleNamespace(node_id=node_id, tools=[{"name": t} for t in (tools or [])], runtime=runtime)


def inventory(*nodes: SimpleNamespace) -> list[dict[str, Any]]:
    return sk.build_node_inventory(nodes)


EXEC_HOST = node(
    "exec-1", {"hostRole": "execution", "hostCapabilities": BASELINE, "toolCapabilities": {"Bash": ["shell.exec"]}}
)


def eligible(skill: sk.Skill, inv: list[dict[str, Any]], config: dict[str, Any] | None = None) -> sk.Eligibility:
    config = config if config is not None else defaults()
    policy = sk.resolve_policy(skill, sk.skills_entries(config))
    assert policy is not None
    return sk.evaluate_eligibility(policy, inv, config)


# --- §15.12 ---------------------------------------------------------------------------------------------------------


def test_parse_skill_entry_github_with_relaxed_json_metadata():
    skill = sk.parse_skill("skills/github/SKILL.md", GITHUB_SKILL)
    assert skill.name == "github"
    assert skill.description == "GitHub integration"
    assert skill.metadata["openclaw"]["emoji"] == "🐙"
    assert skill.metadata["openclaw"]["requires"]["bins"] == ["gh"]
    assert skill.metadata["openclaw"]["requires"]["env"] == ["GITHUB_TOKEN"]
    assert skill.dir_name == "github"


def test_parse_frontmatter_keeps_the_body():
    fields, body = sk.parse_frontmatter(
        "---\nname: coding-agent\ndescription: Agent skill\n---\n\n# Coding Agent\nHello.\n"
    )
    assert fields == {"name": "coding-agent", "description": "Agent skill"}
    assert "# Coding Agent" in body
    assert "Hello." in body


# --- §13.1 frontmatter details --------------------------------------------------------------------------------------


def test_frontmatter_dialect():
    text = (
        "---\r\nname: 'quoted'\r\nalways: true\r\nflag: false\r\nodd: \"mismatch'\r\nurl: http://x:1\r\n"
        ": nokey\r\n---\r\nbody"
    )
    fields, body = sk.parse_frontmatter(text)
    assert fields == {"name": "quoted", "always": True, "flag": False, "odd": "\"mismatch'", "url": "http://x:1"}
    assert body == "body"
    assert sk.parse_frontmatter("no frontmatter\n") == ({}, "no frontmatter\n")
    assert sk.parse_frontmatter("---\nname: x\nnever closed\n")[0] == {}
    fields, _ = sk.parse_frontmatter("---\ndescription:\n  first line\n  second line\nname: n\n---\n")
    assert fields == {"description": "first line\nsecond line", "name": "n"}


def test_relaxed_json_only_removes_commas_outside_strings():
    assert sk.parse_relaxed_json('{"a": [1, 2,], "b": "x,}",}') == {"a": [1, 2], "b": "x,}"}
    assert sk.parse_relaxed_json('{"a": "quote \\" ,]"  ,  }') == {"a": 'quote " ,]'}
    assert sk.parse_relaxed_json("{not json") is None
    assert sk.parse_metadata('{"gsv": {"a": 1}, "openclaw": "no", "other": {}}') == {"gsv": {"a": 1}}
    assert sk.parse_metadata("[1]") == {}


def test_summary_defaults_from_directory_and_first_paragraph():
    body = '---\nalways: "true"\n---\n# Title\n\n## Sub\n\nFirst line\nsecond line.\n\nLater paragraph.\n'
    skill = sk.parse_skill("agents/main/skills/notes/SKILL.md", body)
    assert skill.name == "notes"
    assert skill.description == "First line second line."
    assert skill.always is False  # only a real boolean counts
    long = sk.parse_skill("skills/long/SKILL.md", "word " * 100)
    assert len(long.description) == 200
    assert sk.parse_skill("skills/a/SKILL.md", "---\nalways: true\n---\n").always is True


# --- §13.2 policy ---------------------------------------------------------------------------------------------------


def test_policy_fields_come_from_entry_when_present_else_manifest():
    skill = sk.parse_skill(
        "skills/search/SKILL.md",
        skill_md("search-skill", {"hostRoles": ["specialized"], "capabilities": ["text.search"], "os": ["Darwin"]}),
    )
    policy = sk.resolve_policy(skill, {})
    assert policy is not None and policy.requires is not None
    assert policy.requires["hostRoles"] == ["specialized"]
    assert policy.requires["os"] == ["darwin"]
    entries = {"search-skill": {"requires": {"hostRoles": ["execution"], "capabilities": ["shell.exec", "shell.exec"]}}}
    policy = sk.resolve_policy(skill, entries)
    assert policy is not None and policy.requires is not None
    assert policy.requires["hostRoles"] == ["execution"]
    assert policy.requires["capabilities"] == ["shell.exec"]
    assert policy.requires["os"] == ["darwin"]  # per field: os still comes from the manifest


def test_policy_lookup_order_disable_and_always():
    skill = sk.parse_skill("agents/main/skills/dir-name/SKILL.md", skill_md("pretty-name", {"bins": ["x"]}))
    assert sk.resolve_policy(skill, {"pretty-name": {"enabled": False}}) is None
    assert sk.resolve_policy(skill, {"dir-name": {"enabled": False}}) is None
    assert sk.resolve_policy(skill, {"agents/main/skills/dir-name/SKILL.md": {"enabled": False}}) is None
    # the name wins over the directory
    assert sk.resolve_policy(skill, {"pretty-name": {}, "dir-name": {"enabled": False}}) is not None
    policy = sk.resolve_policy(skill, {"dir-name": {"always": True}})
    assert policy is not None and policy.always is True
    plain = sk.parse_skill("skills/p/SKILL.md", skill_md("plain"))
    policy = sk.resolve_policy(plain, {})
    assert policy is not None and policy.requires is None and not policy.invalid


def test_invalid_requirement_lists():
    for bad in (
        {"capabilities": ["shell.exe"]},
        {"hostRoles": ["server"]},
        {"bins": "gh"},
        {"env": ["", "A"]},
        {"anyBins": [1]},
    ):
        skill = sk.parse_skill("skills/bad/SKILL.md", skill_md("bad", bad))
        policy = sk.resolve_policy(skill, {})
        assert policy is not None and policy.invalid, bad
        assert sk.evaluate_eligibility(policy, inventory(EXEC_HOST), defaults()).reasons == [sk.INVALID_REASON]
    safe = sk.parse_skill("skills/safe/SKILL.md", skill_md("safe", {"capabilities": ["shell.exec"]}))
    policy = sk.resolve_policy(safe, {"safe": {"requires": {"capabilities": ["shell.exe"]}}})
    assert policy is not None and policy.invalid


# --- §15.6 skills rows, through eligibility and the prompt filters --------------------------------------------------

EXEC_SKILL = skill_md("exec-skill", {"hostRoles": ["execution"], "capabilities": ["shell.exec"]})
IOS_SKILL = skill_md("ios-skill", {"hostRoles": ["specialized"], "capabilities": ["text.search"]})


def test_host_roles_and_capabilities_filter_skills():
    skills = [sk.parse_skill("skills/exec/SKILL.md", EXEC_SKILL), sk.parse_skill("skills/ios/SKILL.md", IOS_SKILL)]
    inv = inventory(EXEC_HOST)
    assert eligible(skills[0], inv) == sk.Eligibility(True, ["exec-1"], [])
    result = eligible(skills[1], inv)
    assert not result.eligible
    assert result.reasons == ["requires hostRoles: specialized", "requires capabilities: text.search"]
    picked = sk.select_prompt_skills(skills, "main", defaults(), inv)
    assert [s.name for s, _ in picked.visible] == ["exec-skill"]
    assert picked.hidden_runtime == 1 and picked.hidden_by_config == 0 and picked.hidden_invalid == 0


def test_github_skill_needs_bins_env_config_and_os():
    github = sk.parse_skill(
        "skills/github/SKILL.md",
        skill_md(
            "github",
            {"bins": ["gh"], "env": ["GITHUB_TOKEN"], "config": ["apiKeys.openai"], "os": ["darwin"]},
            ns="openclaw",
        ),
    )
    mac = node(
        "mac",
        {
            "hostRole": "execution",
            "hostCapabilities": BASELINE,
            "toolCapabilities": {},
            "hostOs": "darwin",
            "hostEnv": ["GITHUB_TOKEN"],
            "hostBinStatus": {"gh": True},
        },
    )
    inv = inventory(mac)
    with_key = {**defaults(), "apiKeys": {"openai": "sk-test"}}
    assert eligible(github, inv, with_key) == sk.Eligibility(True, ["mac"], [])
    assert [s.name for s, _ in sk.select_prompt_skills([github], "main", with_key, inv).visible] == ["github"]
    without = eligible(github, inv, {**defaults(), "apiKeys": {}})
    assert not without.eligible and without.reasons == ["requires config: apiKeys.openai"]
    assert sk.select_prompt_skills([github], "main", {**defaults(), "apiKeys": {}}, inv).visible == []
    linux = node(
        "linux",
        {
            "hostRole": "execution",
            "hostCapabilities": BASELINE,
            "toolCapabilities": {},
            "hostOs": "linux",
            "hostEnv": ["GITHUB_TOKEN"],
            "hostBinStatus": {"gh": False},
        },
    )
    result = eligible(github, inventory(linux), with_key)
    assert result.reasons == ["requires os: darwin", "requires env: GITHUB_TOKEN", "requires bins: gh"]
    assert eligible(github, [], with_key).reasons == [sk.NO_HOSTS_REASON]


def test_config_filter_hides_disabled_skills():
    skills = [sk.parse_skill("skills/exec/SKILL.md", EXEC_SKILL), sk.parse_skill("skills/ios/SKILL.md", IOS_SKILL)]
    config = {**defaults(), "skills": {"entries": {"ios-skill": {"enabled": False}}}}
    picked = sk.select_prompt_skills(skills, "main", config, inventory(EXEC_HOST))
    assert [s.name for s, _ in picked.visible] == ["exec-skill"]
    assert picked.hidden_by_config == 1 and picked.hidden_runtime == 0


def test_entry_override_makes_a_specialized_skill_runnable_on_execution_host():
    search = sk.parse_skill(
        "skills/search/SKILL.md",
        skill_md("search-skill", {"hostRoles": ["specialized"], "capabilities": ["text.search"]}),
    )
    override = {"search-skill": {"requires": {"hostRoles": ["execution"], "capabilities": ["shell.exec"]}}}
    config = {**defaults(), "skills": {"entries": override}}
    picked = sk.select_prompt_skills([search], "main", config, inventory(EXEC_HOST))
    assert [s.name for s, _ in picked.visible] == ["search-skill"] and picked.hidden_runtime == 0


def test_requirement_filter_counts_invalid_skills_unless_always():
    invalid = sk.parse_skill("skills/invalid/SKILL.md", skill_md("invalid-skill", {"capabilities": ["shell.exe"]}))
    safe = sk.parse_skill("skills/safe/SKILL.md", skill_md("safe-skill"))
    picked = sk.select_prompt_skills([invalid, safe], "main", defaults(), inventory(EXEC_HOST))
    assert [s.name for s, _ in picked.visible] == ["safe-skill"] and picked.hidden_invalid == 1
    forced = {**defaults(), "skills": {"entries": {"invalid-skill": {"always": True}}}}
    picked = sk.select_prompt_skills([invalid, safe], "main", forced, inventory(EXEC_HOST))
    assert [s.name for s, _ in picked.visible] == ["invalid-skill", "safe-skill"]


def test_prompt_read_paths():
    assert sk.prompt_read_path("agents/main/skills/demo/SKILL.md", "main") == "skills/demo/SKILL.md"
    assert sk.prompt_read_path("skills/global/SKILL.md", "main") == "skills/global/SKILL.md"
    assert sk.prompt_read_path("agents/other/skills/x/SKILL.md", "main") is None


# --- eligibility details --------------------------------------------------------------------------------------------


def test_any_lists_and_config_truthiness():
    skill = sk.parse_skill(
        "skills/a/SKILL.md",
        skill_md("a", {"anyBins": ["rg", "grep"], "anyCapabilities": ["text.search", "shell.exec"]}),
    )
    host = node(
        "h",
        {
            "hostRole": "specialized",
            "hostCapabilities": ["text.search"],
            "toolCapabilities": {},
            "hostBinStatus": {"grep": True, "rg": False},
        },
    )
    assert eligible(skill, inventory(host)).eligible
    cfg = {"a": {"s": "  ", "t": "x", "z": 0, "f": False, "l": [], "d": {"k": 1}, "n": None}}
    paths = ("a.s", "a.t", "a.z", "a.f", "a.l", "a.d", "a.n", "a.missing")
    assert [p for p in paths if sk.is_truthy_config(get_path(cfg, p))] == ["a.t", "a.z", "a.d"]


def test_node_inventory_shape():
    mac = node(
        "b-mac",
        {
            "hostRole": "execution",
            "hostCapabilities": ["shell.exec", "filesystem.write", "filesystem.read", "filesystem.list"],
            "toolCapabilities": {"Read": ["filesystem.read"], "Bash": ["shell.exec"]},
            "hostOs": "darwin",
            "hostEnv": ["Z", "A"],
            "hostBinStatus": {"jq": False, "gh": True},
            "hostBinStatusUpdatedAt": 1700000000000,
        },
        tools=["Read", "Bash"],
    )
    bare = node("a-phone", None, tools=["Camera"])
    inv = inventory(mac, bare)
    assert [e["nodeId"] for e in inv] == ["a-phone", "b-mac"]
    assert inv[0] == {
        "nodeId": "a-phone",
        "hostRole": "specialized",
        "hostCapabilities": [],
        "toolCapabilities": {},
        "tools": ["Camera"],
        "hostOs": None,
        "hostEnv": [],
        "hostBins": [],
        "hostBinStatus": {},
        "hostBinStatusUpdatedAt": None,
        "hostFactsKnown": True,
        "binsKnown": True,
    }
    assert inv[1]["hostCapabilities"] == BASELINE
    assert list(inv[1]["toolCapabilities"]) == ["Bash", "Read"]
    assert inv[1]["tools"] == ["Bash", "Read"]
    assert inv[1]["hostEnv"] == ["A", "Z"]
    assert inv[1]["hostBins"] == ["gh"]
    assert list(inv[1]["hostBinStatus"]) == ["gh", "jq"]
    assert inv[1]["hostBinStatusUpdatedAt"] == 1700000000000
    status = sk.status_node(inv[1])
    assert status["canProbeBins"] is True and status["hostOs"] == "darwin"
    assert "hostOs" not in sk.status_node(inv[0]) and sk.status_node(inv[0])["canProbeBins"] is False


def test_a_late_node_has_a_role_from_its_capabilities_and_unknown_host_facts():
    """GSV's last protocol-1 release: no hostRole, no host facts, no probes."""
    late = node("late", {"hostCapabilities": BASELINE, "toolCapabilities": {"Bash": ["shell.exec"]}}, tools=["Bash"])
    search = node("search", {"hostCapabilities": ["text.search"], "toolCapabilities": {"Grep": ["text.search"]}})
    inv = inventory(late, search)
    assert [(e["nodeId"], e["hostRole"], e["hostFactsKnown"], e["binsKnown"]) for e in inv] == [
        ("late", "execution", False, False),
        ("search", "specialized", False, False),
    ]
    assert sk.status_node(inv[0])["canProbeBins"] is False
    wants = sk.parse_skill("skills/x/SKILL.md", skill_md("x", {"bins": ["gh"], "os": ["linux"], "env": ["HOME"]}))
    result = eligible(wants, inv)
    assert (result.eligible, result.hosts, result.reasons) == (True, ["late", "search"], [])
    shell = sk.parse_skill("skills/s/SKILL.md", skill_md("s", {"capabilities": ["shell.exec"], "bins": ["gh"]}))
    assert eligible(shell, inv).hosts == ["late"]
    # a seed node whose probe went unanswered: its bins are unknown, its other facts are not
    silent = node("silent", {**SEED_RUNTIME_FOR_LATE, "binsUnanswered": True})
    [entry] = inventory(silent)
    assert (entry["hostFactsKnown"], entry["binsKnown"]) == (True, False)
    bins_only = sk.parse_skill("skills/b/SKILL.md", skill_md("b", {"bins": ["gh"]}))
    assert eligible(bins_only, [entry]).eligible
    assert not eligible(wants, [entry]).eligible  # its os and env are known (none reported)


SEED_RUNTIME_FOR_LATE = {
    "hostRole": "execution",
    "hostCapabilities": BASELINE,
    "toolCapabilities": {"Bash": ["shell.exec"]},
}


def test_required_and_probe_bins():
    skills = [
        sk.parse_skill("skills/a/SKILL.md", skill_md("a", {"bins": ["gh", "jq"], "anyBins": ["rg"]})),
        sk.parse_skill("skills/b/SKILL.md", skill_md("b", {"bins": ["bad name", "awk"]})),
        sk.parse_skill("skills/c/SKILL.md", skill_md("c", {"bins": ["always-bin"]}, extra="always: true")),
        sk.parse_skill("skills/d/SKILL.md", skill_md("d", {"bins": ["off"]})),
    ]
    entries = {"d": {"enabled": False}}
    assert sk.required_bins(skills, entries) == ["always-bin", "awk", "bad name", "gh", "jq", "rg"]
    assert sk.probe_bins(skills, entries) == ["awk", "gh", "jq", "rg"]


def test_status_rows():
    skills = [
        sk.parse_skill("skills/z/SKILL.md", skill_md("zeta", {"bins": ["gh"]})),
        sk.parse_skill("skills/a/SKILL.md", skill_md("alpha")),
        sk.parse_skill("skills/off/SKILL.md", skill_md("off", {"bins": ["x"]}, extra="always: true")),
        sk.parse_skill("skills/bad/SKILL.md", skill_md("bad", {"hostRoles": ["nope"]})),
    ]
    config = {**defaults(), "skills": {"entries": {"off": {"enabled": False}}}}
    status = sk.build_status("main", 42, skills, inventory(EXEC_HOST), config)
    assert status["agentId"] == "main" and status["refreshedAt"] == 42
    assert status["requiredBins"] == ["gh"]
    rows = {r["name"]: r for r in status["skills"]}
    assert [r["name"] for r in status["skills"]] == ["alpha", "bad", "off", "zeta"]
    assert rows["off"] == {
        "name": "off",
        "description": "off skill",
        "location": "skills/off/SKILL.md",
        "always": False,
        "eligible": False,
        "eligibleHosts": [],
        "reasons": ["disabled by skills.entries policy"],
    }
    assert rows["bad"]["reasons"] == ["invalid requirement identifiers"] and "requirements" not in rows["bad"]
    assert rows["alpha"]["eligible"] is True and "requirements" not in rows["alpha"]
    assert rows["zeta"]["reasons"] == ["requires bins: gh"]
    assert rows["zeta"]["requirements"]["bins"] == ["gh"]
