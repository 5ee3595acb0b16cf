"""Seeding a new agent workspace with the starter templates."""

from __future__ import annotations

import re
from typing import Any

from orbital.agent.seed import SEED_FILES, ensure_seeded, is_seeded, seed_workspace, template
from orbital.store import keys


def _count_puts(services: Any) -> list[str]:
    """Keys of every PutObject the workspace client sends from now on."""
    seen: list[str] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        seen.append(params["Key"])

    services.workspace.client.meta.events.register("provide-client-params.s3.PutObject", record)
    return seen


def _heartbeat_file_is_empty(text: str) -> bool:
    """Spec §10: after removing HTML comments, only blank lines, `#` runs, `-`/`=` runs or `#`s + dashes remain."""
    stripped = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    for line in stripped.splitlines():
        s = line.strip()
        if not s or re.fullmatch(r"#+", s) or re.fullmatch(r"[-=]+", s) or re.fullmatch(r"#+\s*-+", s):
            continue
        return False
    return True


def test_templates_load_and_heartbeat_counts_as_empty() -> None:
    assert SEED_FILES == (
        "AGENTS.md",
        "SOUL.md",
        "IDENTITY.md",
        "USER.md",
        "TOOLS.md",
        "HEARTBEAT.md",
        "MEMORY.md",
        "BOOTSTRAP.md",
    )
    for name in SEED_FILES:
        assert template(name).strip()
    assert _heartbeat_file_is_empty(template("HEARTBEAT.md"))
    assert not _heartbeat_file_is_empty("# Tasks\n- check mail\n")
    assert "gsv__DeleteFile" in template("BOOTSTRAP.md")


def test_seed_writes_all_templates(services: Any) -> None:
    written = seed_workspace(services, "main")
    assert written == [keys.workspace_object("main", name) for name in SEED_FILES]
    for name in SEED_FILES:
        body, info = services.workspace.get(keys.workspace_object("main", name))
        assert body.decode() == template(name)
        assert info.content_type == "text/markdown"
    assert is_seeded(services, "main")


def test_seed_keeps_existing_files(services: Any, rpc: Any) -> None:
    rpc.call("workspace.write", {"path": "SOUL.md", "content": "my own soul"})
    written = seed_workspace(services, "main")
    assert keys.workspace_object("main", "SOUL.md") not in written
    assert len(written) == len(SEED_FILES) - 1
    assert rpc.call("workspace.read", {"path": "SOUL.md"})["content"] == "my own soul"
    assert rpc.call("workspace.read", {"path": "AGENTS.md"})["content"] == template("AGENTS.md")


def test_ensure_seeded_runs_once(services: Any) -> None:
    puts = _count_puts(services)
    first = ensure_seeded(services)
    assert len(first) == len(SEED_FILES)
    assert len(puts) == len(SEED_FILES)

    # the agent finishes commissioning and removes BOOTSTRAP.md: it must not come back
    services.workspace.delete(keys.workspace_object("main", "BOOTSTRAP.md"))
    assert ensure_seeded(services) == []
    assert ensure_seeded(services, "main") == []
    assert len(puts) == len(SEED_FILES)
    assert services.workspace.head(keys.workspace_object("main", "BOOTSTRAP.md")) is None


def test_ensure_seeded_uses_default_agent(services: Any, rpc: Any) -> None:
    rpc.call("config.set", {"path": "agents.list", "value": [{"id": "Helper", "default": True}]})
    written = ensure_seeded(services)
    assert written[0] == keys.workspace_object("helper", "AGENTS.md")
    assert is_seeded(services, "helper")
    assert not is_seeded(services, "main")
