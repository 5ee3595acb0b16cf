"""Starter files for a new agent workspace.

The templates ship as package data (`orbital/seed/*.md`). Seeding writes each one to `agents/{agentId}/{name}`
only when no such object exists, so a user's own files are never replaced, then records a gateway flag. After
that, `ensure_seeded` costs a single table read.

BOOTSTRAP.md is part of the set: its presence puts the agent into first-run commissioning (the prompt builder
looks for it), and the agent deletes it when commissioning is done. The flag keeps it from coming back.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import TYPE_CHECKING

from orbital.domain.config import default_agent_id
from orbital.domain.session_keys import normalize_agent_id
from orbital.domain.workspace_paths import content_type_for
from orbital.store import keys

if TYPE_CHECKING:
    from orbital.ports.services import Services

SEED_FILES: tuple[str, ...] = (
    "AGENTS.md",
    "SOUL.md",
    "IDENTITY.md",
    "USER.md",
    "TOOLS.md",
    "HEARTBEAT.md",
    "MEMORY.md",
    "BOOTSTRAP.md",
)


@functools.cache
def template(name: str) -> str:
    """The text of one seed template."""
    if name not in SEED_FILES:
        raise KeyError(name)
    return (resources.files("orbital") / "seed" / name).read_text(encoding="utf-8")


def seed_workspace(services: Services, agent_id: str = "main") -> list[str]:
    """Write every template that the agent's workspace lacks; returns the keys written. Marks the agent seeded."""
    agent = normalize_agent_id(agent_id)
    store = services.workspace
    written: list[str] = []
    for name in SEED_FILES:
        key = keys.workspace_object(agent, name)
        if store.head(key) is not None:
            continue
        store.put(key, template(name).encode("utf-8"), content_type=content_type_for(name))
        written.append(key)
    services.table.put(
        keys.workspace_seeded_flag(agent), {"agentId": agent, "seededAt": services.now_ms(), "written": written}
    )
    return written


def is_seeded(services: Services, agent_id: str) -> bool:
    return services.table.get(keys.workspace_seeded_flag(normalize_agent_id(agent_id))) is not None


def ensure_seeded(services: Services, agent_id: str | None = None) -> list[str]:
    """Seed the agent's workspace once (default: the configured default agent); later calls only read the flag.
    Returns the keys written by this call (empty when the workspace was seeded before)."""
    if agent_id is None:
        agent_id = default_agent_id(services.config.effective())
    if is_seeded(services, agent_id):
        return []
    return seed_workspace(services, agent_id)
