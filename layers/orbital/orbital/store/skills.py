"""Skill discovery in object storage (spec §13.1).

An agent's skills are every `agents/{agentId}/skills/**/SKILL.md`, then every global `skills/**/SKILL.md` whose
directory name the agent does not already have (the agent's copy overrides the global one).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from orbital.domain.skills import SKILL_FILE, Skill, parse_skill, skill_dir_name
from orbital.store import keys

if TYPE_CHECKING:
    from orbital.store.workspace import Workspace

log = logging.getLogger("orbital.skills")

_SUFFIX = "/" + SKILL_FILE


def agent_skills_prefix(agent_id: str) -> str:
    return keys.workspace_prefix(agent_id, "skills")


def global_skills_prefix() -> str:
    return keys.global_skills_prefix("")


def is_skill_file(key: str, prefix: str) -> bool:
    """Whether `key` is a SKILL.md inside a directory below `prefix`."""
    rest = key[len(prefix) :] if key.startswith(prefix) else ""
    return rest.endswith(_SUFFIX) and len(rest) > len(_SUFFIX)


def _skill_keys(workspace: Workspace, prefix: str) -> list[str]:
    """Keys of SKILL.md files inside a directory below `prefix` (every page of the listing)."""
    return sorted(
        info.key for info in workspace.listing(prefix, delimiter=None).keys if is_skill_file(info.key, prefix)
    )


def skill_locations(workspace: Workspace, agent_id: str) -> list[str]:
    """Agent-local SKILL.md keys, then the global ones not overridden by an agent directory of the same name."""
    local = _skill_keys(workspace, agent_skills_prefix(agent_id))
    names = {skill_dir_name(key) for key in local}
    shared = [key for key in _skill_keys(workspace, global_skills_prefix()) if skill_dir_name(key) not in names]
    return local + shared


def list_skills(workspace: Workspace, agent_id: str) -> list[Skill]:
    """Parsed summaries of the agent's skills (a file deleted while listing is skipped)."""
    skills = []
    for key in skill_locations(workspace, agent_id):
        found = workspace.get(key)
        if found is None:
            continue
        body, _ = found
        skills.append(parse_skill(key, body.decode("utf-8", "replace")))
    return skills
