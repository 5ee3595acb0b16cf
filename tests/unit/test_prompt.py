"""The system prompt (spec §7.3, §13.3, heartbeat file rule §10; acceptance rows §15.6)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from orbital.domain import prompt as p
from orbital.domain import skills as sk
from orbital.domain.config import DEFAULT_HEARTBEAT_PROMPT, defaults

BASELINE = ["filesystem.list", "filesystem.read", "filesystem.write", "shell.exec"]
SCAFFOLD = ("## Tooling", "## Tool Call Style", "## Safety", "## Workspace", "## Workspace Files (Injected)")
SEED_HEARTBEAT = """<!--
Heartbeat checklist.

  - Check the inbox for anything urgent and tell me.
-->
"""


def runtime(**kw: Any) -> p.RuntimeInfo:
    base: dict[str, Any] = {
        "agent_id": "main",
        "is_main": True,
        "session_key": "agent:main:main",
        "model": "anthropic/claude",
        "timezone": "UTC",
    }
    return p.RuntimeInfo(**{**base, **kw})


def inputs(**kw: Any) -> p.PromptInputs:
    base: dict[str, Any] = {
        "base_prompt": None,
        "agent_id": "main",
        "files": {},
        "today": None,
        "yesterday": None,
        "is_main_session": True,
        "tools": [],
        "skills": None,
        "heartbeat_prompt": None,
        "runtime": runtime(),
    }
    return p.PromptInputs(**{**base, **kw})


def skill_md(name: str, requires: dict[str, Any] | None = None, *, ns: str = "gsv") -> str:
    lines = ["---", f"name: {name}", f"description: {name} skill"]
    if requires is not None:
        lines.append("metadata: " + json.dumps({ns: {"requires": requires}}))
    return "\n".join([*lines, "---", "", f"# {name}", ""])


def node(node_id: str, runtime_info: dict[str, Any] | None, tools: list[str] | None = None) -> SimpleNamespace:
    return SimpleNamespace(node_id=node_id, tools=[{"name": t} for t in tools or []], runtime=runtime_info)


def execution(node_id: str, tools: list[str] | None = None, **extra: Any) -> SimpleNamespace:
    caps = {t: ["shell.exec"] for t in tools or []}
    return node(
        node_id, {"hostRole": "execution", "hostCapabilities": BASELINE, "toolCapabilities": caps, **extra}, tools
    )


EXEC_1 = execution("exec-1")
EXEC_SKILL = skill_md("exec-skill", {"hostRoles": ["execution"], "capabilities": ["shell.exec"]})
IOS_SKILL = skill_md("ios-skill", {"hostRoles": ["specialized"], "capabilities": ["text.search"]})
SEARCH_SKILL = skill_md("search-skill", {"hostRoles": ["specialized"], "capabilities": ["text.search"]})


def skills_prompt(
    skill_files: dict[str, str],
    *,
    config: dict[str, Any] | None = None,
    hosts: tuple[SimpleNamespace, ...] = (EXEC_1,),
    tools: list[dict[str, Any]] | None = None,
) -> str:
    config = config if config is not None else defaults()
    inventory = sk.build_node_inventory(hosts)
    skills = [sk.parse_skill(location, text) for location, text in skill_files.items()]
    picked = sk.select_prompt_skills(skills, "main", config, inventory)
    return p.build_system_prompt(inputs(skills=picked, tools=tools or [], runtime=runtime(inventory=inventory)))


def sections(text: str) -> list[str]:
    return text.split("\n\n---\n\n")


def headings(text: str) -> list[str]:
    return [s.split("\n", 1)[0] for s in sections(text)]


# --- §15.6 scaffold and bootstrap ------------------------------------------------------------------------------------


def test_default_base_prompt_and_scaffold():
    text = p.build_system_prompt(inputs())
    assert "You are a helpful AI assistant running inside Orbital." in text
    for heading in SCAFFOLD:
        assert heading in text
    assert headings(text) == [
        "You are a helpful AI assistant running inside Orbital.",
        *SCAFFOLD,
        "## Runtime",
    ]
    assert "Agent workspace root: agents/main/" in text
    assert "No tools are attached to this run." in text


def test_blank_base_prompt_falls_back_and_custom_base_is_trimmed():
    assert sections(p.build_system_prompt(inputs(base_prompt="   ")))[0] == p.DEFAULT_BASE_PROMPT
    assert sections(p.build_system_prompt(inputs(base_prompt="  Be brief.\n")))[0] == "Be brief."


def test_bootstrap_first_run():
    files = {
        "BOOTSTRAP.md": "Commissioning instructions.",
        "SOUL.md": "Soul text.",
        "IDENTITY.md": "Identity text.",
        "USER.md": "User text.",
        "AGENTS.md": "Agents text.",
        "MEMORY.md": "Memory text.",
        "TOOLS.md": "Tools text.",
    }
    demo = sk.parse_skill("skills/demo/SKILL.md", skill_md("demo"))
    picked = sk.select_prompt_skills([demo], "main", defaults(), [])
    text = p.build_system_prompt(
        inputs(
            base_prompt="Base prompt",
            files=files,
            today="Today note.",
            yesterday="Yesterday note.",
            skills=picked,
            heartbeat_prompt="Heartbeat poll",
        )
    )
    assert "Base prompt" in text
    for heading in SCAFFOLD:
        assert heading in text
    assert "## COMMISSIONING CEREMONY (First Run)" in text
    assert "Commissioning instructions." in text
    assert "**IMPORTANT" in text
    assert headings(text) == [
        "Base prompt",
        *SCAFFOLD,
        "## COMMISSIONING CEREMONY (First Run)",
        "## Current Soul (update during commissioning)",
        "## Current Identity (fill in during commissioning)",
        "## About Your Human",
        "## Heartbeats",
        "## Runtime",
    ]
    for absent in (
        "Agents text.",
        "Memory text.",
        "Tools text.",
        "Today note.",
        "Yesterday note.",
        "<available_skills>",
    ):
        assert absent not in text
    for present in ("Soul text.", "Identity text.", "User text."):
        assert present in text


def test_blank_bootstrap_is_not_a_first_run():
    text = p.build_system_prompt(inputs(files={"BOOTSTRAP.md": "  \n", "SOUL.md": "Soul."}))
    assert "COMMISSIONING" not in text and "## Your Soul\n\nSoul." in text


# --- §15.6 skills ---------------------------------------------------------------------------------------------------


def test_skills_section_lists_agent_and_global_skills():
    text = skills_prompt(
        {"agents/main/skills/demo/SKILL.md": skill_md("demo"), "skills/global/SKILL.md": skill_md("global")},
        tools=[{"name": "gsv__ReadFile", "description": "Read a file"}],
    )
    assert "## Skills (Mandatory Scan)" in text
    assert "gsv__ReadFile" in text
    assert "<read_path>skills/demo/SKILL.md</read_path>" in text
    assert "<read_path>skills/global/SKILL.md</read_path>" in text


def test_runtime_filter_hides_skills_for_missing_hosts():
    text = skills_prompt(
        {
            "skills/exec/SKILL.md": EXEC_SKILL,
            "skills/ios/SKILL.md": IOS_SKILL,
        }
    )
    assert '<skill name="exec-skill">' in text
    assert '<skill name="ios-skill">' not in text
    assert "Runtime filter: 1 skill(s) hidden due unmet runtime capability requirements." in text
    assert "Config filter:" not in text and "Requirement filter:" not in text


def test_github_skill_depends_on_config_root():
    files = {
        "skills/github/SKILL.md": skill_md(
            "github",
            {"bins": ["gh"], "env": ["GITHUB_TOKEN"], "config": ["apiKeys.openai"], "os": ["darwin"]},
            ns="openclaw",
        )
    }
    mac = execution("mac", hostOs="darwin", hostEnv=["GITHUB_TOKEN"], hostBinStatus={"gh": True})
    with_key = skills_prompt(files, config={**defaults(), "apiKeys": {"openai": "sk-test"}}, hosts=(mac,))
    assert '<skill name="github">' in with_key
    without = skills_prompt(files, config={**defaults(), "apiKeys": {}}, hosts=(mac,))
    assert '<skill name="github">' not in without
    assert "## Skills (Mandatory Scan)" not in without  # no visible skill → no section at all


def test_config_filter_counts_disabled_skills():
    text = skills_prompt(
        {
            "skills/exec/SKILL.md": EXEC_SKILL,
            "skills/ios/SKILL.md": IOS_SKILL,
        },
        config={**defaults(), "skills": {"entries": {"ios-skill": {"enabled": False}}}},
    )
    assert '<skill name="exec-skill">' in text and '<skill name="ios-skill">' not in text
    assert "Config filter: 1 skill(s) hidden by skills.entries policy." in text


def test_entry_override_requirements_win():
    text = skills_prompt(
        {"skills/search/SKILL.md": SEARCH_SKILL},
        config={
            **defaults(),
            "skills": {
                "entries": {"search-skill": {"requires": {"hostRoles": ["execution"], "capabilities": ["shell.exec"]}}}
            },
        },
    )
    assert '<skill name="search-skill">' in text
    assert "Runtime filter:" not in text


REQUIREMENT_LINE = "Requirement filter: 1 skill(s) hidden due invalid runtime requirement identifiers."


def test_requirement_filter_for_invalid_frontmatter():
    text = skills_prompt(
        {
            "skills/invalid/SKILL.md": skill_md("invalid-skill", {"capabilities": ["shell.exe"]}),
            "skills/safe/SKILL.md": skill_md("safe-skill"),
        }
    )
    assert '<skill name="invalid-skill">' not in text and '<skill name="safe-skill">' in text
    assert REQUIREMENT_LINE in text


def test_requirement_filter_for_invalid_entry_override():
    text = skills_prompt(
        {
            "skills/search/SKILL.md": skill_md("search-skill", {"hostRoles": ["execution"]}),
            "skills/safe/SKILL.md": skill_md("safe-skill"),
        },
        config={**defaults(), "skills": {"entries": {"search-skill": {"requires": {"capabilities": ["shell.exe"]}}}}},
    )
    assert '<skill name="search-skill">' not in text and '<skill name="safe-skill">' in text
    assert REQUIREMENT_LINE in text


def test_skills_section_format():
    demo = sk.parse_skill("agents/main/skills/demo/SKILL.md", skill_md("demo"))
    always = sk.parse_skill("skills/a&b/SKILL.md", "---\nname: a&b\ndescription: x < y\nalways: true\n---\n")
    other_agent = sk.parse_skill("agents/other/skills/x/SKILL.md", skill_md("x"))
    picked = sk.select_prompt_skills([demo, always, other_agent], "main", defaults(), [])
    picked.hidden_by_config, picked.hidden_invalid, picked.hidden_runtime = 2, 0, 3
    section = p.build_skills_section(picked, "main", [{"name": "GSV__readfile"}])
    assert section is not None
    assert section == "\n".join(
        [
            "## Skills (Mandatory Scan)",
            "",
            *section.split("\n")[2:5],
            "Config filter: 2 skill(s) hidden by skills.entries policy.",
            "Runtime filter: 3 skill(s) hidden due unmet runtime capability requirements.",
            "",
            "<available_skills>",
            '  <skill name="demo">',
            "    <description>demo skill</description>",
            "    <location>agents/main/skills/demo/SKILL.md</location>",
            "    <read_path>skills/demo/SKILL.md</read_path>",
            "  </skill>",
            '  <skill name="a&b" always="true">',
            "    <description>x < y</description>",
            "    <location>skills/a&b/SKILL.md</location>",
            "    <read_path>skills/a&b/SKILL.md</read_path>",
            "  </skill>",
            "</available_skills>",
        ]
    )
    assert "GSV__readfile" in section  # the attached tool's own spelling
    assert "gsv__ReadFile" in (p.build_skills_section(picked, "main", []) or "")
    assert p.build_skills_section(None, "main", []) is None
    assert p.build_skills_section(sk.PromptSkills(visible=[], hidden_runtime=4), "main", []) is None


# --- §15.6 heartbeats and runtime -----------------------------------------------------------------------------------


def test_heartbeats_and_runtime():
    hosts = (
        execution("exec-node-1", ["Bash", "Read", "Write"]),
        execution("exec-node-2"),
        node(
            "iphone-node",
            {"hostRole": "specialized", "hostCapabilities": ["text.search"], "toolCapabilities": {}},
        ),
    )
    inventory = sk.build_node_inventory(hosts)
    text = p.build_system_prompt(
        inputs(
            files={"HEARTBEAT.md": "# Checks\n\nLook for missed follow-ups."},
            heartbeat_prompt="Heartbeat poll",
            runtime=runtime(
                session_key="agent:main:cli:dm:me",
                inventory=inventory,
                execution_host_id="exec-node-1",
                specialized_host_ids=["iphone-node"],
            ),
        )
    )
    for needle in (
        "## Heartbeats",
        "Configured heartbeat prompt: Heartbeat poll",
        "### HEARTBEAT.md",
        "Look for missed follow-ups.",
        "## Runtime",
        "Agent: main",
        "Session: main",
        "Model: anthropic/claude",
        "Primary execution host: exec-node-1",
        "Execution hosts: exec-node-1, exec-node-2",
        "Specialized hosts: iphone-node",
        p.CAPABILITIES_NOTE,
        "- exec-node-1 (execution) envKeys=0 bins=0 capabilities=[filesystem.list, filesystem.read, filesystem.write, "
        "shell.exec] tools=[Bash, Read, Write]",
    ):
        assert needle in text, needle
    assert "HEARTBEAT_OK" in text
    assert p.CAPABILITIES_NOTE == (
        "Capabilities are internal routing metadata. Do not call capability IDs as tools; call only listed tool names."
    )
    assert "- iphone-node (specialized) envKeys=0 bins=0 capabilities=[text.search] tools=[]" in text
    assert headings(text)[-2:] == ["## Heartbeats", "## Runtime"]


def test_runtime_lines_exactly():
    mac = execution("mac", ["Bash"], hostOs="darwin", hostEnv=["A", "B"], hostBinStatus={"gh": True, "jq": False})
    section = p.build_runtime_section(
        runtime(
            is_main=False,
            session_key="agent:main:whatsapp:group:1",
            timezone="Europe/Berlin",
            channel="whatsapp",
            inventory=sk.build_node_inventory([mac]),
            execution_host_id="mac",
        )
    )
    assert section == "\n".join(
        [
            "## Runtime",
            "",
            "Agent: main",
            "Session: non-main",
            "Session key: agent:main:whatsapp:group:1",
            "Model: anthropic/claude",
            "Timezone: Europe/Berlin",
            "Channel: whatsapp",
            "Primary execution host: mac",
            "Execution hosts: mac",
            "Specialized hosts: none",
            p.CAPABILITIES_NOTE,
            "Connected hosts:",
            "- mac (execution) os=darwin envKeys=2 bins=1 "
            "capabilities=[filesystem.list, filesystem.read, filesystem.write, shell.exec] tools=[Bash]",
        ]
    )


def test_runtime_without_inventory_or_hosts():
    unknown = p.build_runtime_section(runtime(session_key=None))
    assert "Session key:" not in unknown and "Primary execution host" not in unknown and "Channel:" not in unknown
    empty = p.build_runtime_section(runtime(inventory=[]))
    assert "Primary execution host: none selected" in empty
    assert "Execution hosts: none" in empty and "Specialized hosts: none" in empty
    assert p.CAPABILITIES_NOTE in empty and "Connected hosts:" not in empty


def test_heartbeat_section_presence():
    assert p.build_heartbeat_section(None, None) == ""
    assert p.build_heartbeat_section("  ", SEED_HEARTBEAT) == ""
    prompt_only = p.build_heartbeat_section(DEFAULT_HEARTBEAT_PROMPT, SEED_HEARTBEAT)
    assert f"Configured heartbeat prompt: {DEFAULT_HEARTBEAT_PROMPT}" in prompt_only
    assert "### HEARTBEAT.md" not in prompt_only
    file_only = p.build_heartbeat_section(None, "- water the plants\n")
    assert "Configured heartbeat prompt" not in file_only
    assert file_only.endswith("\n\n### HEARTBEAT.md\n\n- water the plants")


@pytest.mark.parametrize(
    ("text", "meaningful"),
    [
        (None, False),
        ("", False),
        ("\n  \n", False),
        (SEED_HEARTBEAT, False),
        ("#\n##\n---\n===\n-\n# ---\n## --\n<!-- a -->\n<!--\nmulti\nline\n-->", False),
        ("# Checks\n\nLook for missed follow-ups.", True),
        ("- water the plants", True),
        ("<!-- note --> real task", True),
        ("# Heading", True),  # §10: only bare `#` markers are placeholders
    ],
)
def test_heartbeat_file_meaningful(text, meaningful):
    assert p.is_heartbeat_file_meaningful(text) is meaningful


# --- order, memory, dropping, tools ---------------------------------------------------------------------------------


FULL_FILES = {
    "SOUL.md": "Soul.",
    "IDENTITY.md": "Identity.",
    "USER.md": "User.",
    "AGENTS.md": "Agents.",
    "MEMORY.md": "Memory.",
    "TOOLS.md": "Tools.",
    "HEARTBEAT.md": "- task",
}


def test_normal_section_order():
    demo = sk.parse_skill("skills/demo/SKILL.md", skill_md("demo"))
    text = p.build_system_prompt(
        inputs(
            files=FULL_FILES,
            today="T.",
            yesterday="Y.",
            skills=sk.select_prompt_skills([demo], "main", defaults(), []),
        )
    )
    assert headings(text) == [
        p.DEFAULT_BASE_PROMPT,
        *SCAFFOLD,
        "## Your Soul",
        "## Your Identity",
        "## About Your Human",
        "## Operating Instructions",
        "## Long-Term Memory",
        "## Recent Context",
        "## Tool Notes",
        "## Heartbeats",
        "## Skills (Mandatory Scan)",
        "## Runtime",
    ]
    assert "## Your Soul\n\nSoul." in text and "## Long-Term Memory\n\nMemory." in text


def test_memory_only_in_main_sessions():
    text = p.build_system_prompt(inputs(files=FULL_FILES, is_main_session=False))
    assert "## Long-Term Memory" not in text and "Memory." not in text
    assert "## Your Soul" in text


def test_daily_memory_yesterday_before_today():
    text = p.build_system_prompt(inputs(today="Today entry.\n", yesterday="Yesterday entry."))
    assert "## Recent Context\n\n### Yesterday\n\nYesterday entry.\n\n### Today\n\nToday entry." in text
    only_today = p.build_system_prompt(inputs(today="Only today."))
    assert "## Recent Context\n\n### Today\n\nOnly today." in only_today and "### Yesterday" not in only_today
    assert "## Recent Context" not in p.build_system_prompt(inputs(today=" ", yesterday=""))


def test_empty_sections_are_dropped():
    text = p.build_system_prompt(inputs(files=dict.fromkeys(FULL_FILES, "  \n")))
    assert headings(text) == [p.DEFAULT_BASE_PROMPT, *SCAFFOLD, "## Runtime"]
    assert "\n\n---\n\n\n\n---\n\n" not in text


def test_tooling_lines_and_counts():
    tools = [
        {"name": "gsv__ReadFile", "description": "Read a\n  file   from the workspace."},
        {"name": "gsv__WriteFile", "description": "x" * 200},
        {"name": "mac__Bash", "description": "y" * 180},
        {"name": "loose"},
    ]
    section = p.build_tooling_section(tools)
    assert "Native tools: 2. Node tools: 1." in section
    assert "No tools are attached" not in section
    lines = section.split("\n")
    start = lines.index("Available tools:")
    assert lines[start + 1 :] == [
        "- gsv__ReadFile: Read a file from the workspace.",
        "- gsv__WriteFile: " + "x" * 177 + "...",
        "- mac__Bash: " + "y" * 180,
        "- loose",
    ]
    assert "gsv__*" in section and "<nodeId>__<toolName>" in section


def test_workspace_section_mentions_skills_paths():
    section = p.build_workspace_section("ops")
    assert "Agent workspace root: agents/ops/" in section
    assert "skills/" in section
