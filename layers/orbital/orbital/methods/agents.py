"""Methods of the `agents` family: the gateway's agents, and cloning one inside the gateway (ADR 0046).

`agents.clone` copies everything of one agent to a new id without a file: its sessions with their messages, its
workspace (identity, memory, skills overrides, other files, session archives), its cron jobs (new job ids), its
heartbeat state, last-active context and usage and spend counters, each rewritten to the new id
(`orbital.store.agent_archive.copy_agent`, the same rules as `orbital import --agent`). It works on the gateway's own
table and workspace as the portable archive's stores (`Services.portable_stores`: the local data directory, or the
stack's DynamoDB table and S3 bucket). The new agent gets an entry of its own in `agents.list` with the settings of
the original's entry (its heartbeat, its spend caps), never its bindings: no channel traffic moves to the clone until
a binding names it. Secrets are not copied: they are the gateway's, not the agent's, and the clone uses them as the
original does.
"""

from __future__ import annotations

import copy
import json
import re
from typing import TYPE_CHECKING, Any

from pydantic import Field

from orbital.domain import config as cfg
from orbital.domain import roles
from orbital.domain.session_keys import session_agent_id
from orbital.errors import BadRequestError, ConflictError, NotFoundError
from orbital.protocol.params import Flag, Text
from orbital.protocol.registry import CLIENT, NoParams, Params, Result, Router
from orbital.store.contention import retrying

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.protocol.context import CallContext

router = Router("agents")

AGENT_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
"""An agent id as session keys and workspace paths hold it: lowercase letters, digits, `-` and `_`, at most 64."""


class AgentSummary(Result):
    id: str
    default: bool
    """The agent of the main session (`agents.list[].default`, else `main`)."""
    sessions: int
    """Its sessions in the session registry."""
    lastActiveAt: int | None
    """When one of its sessions was last active (epoch ms); null for none."""


class AgentsListResult(Result):
    agents: list[AgentSummary]


class AgentsCloneParams(Params):
    from_: Text = Field(default=None, alias="from")
    """The agent to copy."""
    to: Text = None
    """The new agent's id: lowercase letters, digits, `-` and `_`, at most 64 characters."""
    replace: Flag = None
    """Replace an agent that already has the id `to` (only its own sessions, files and jobs are removed first)."""


class AgentsCloneResult(Result):
    from_: str = Field(alias="from")
    to: str
    items: int
    """Table items written for the clone."""
    objects: int
    """Workspace objects written for the clone."""
    sessions: int
    cronJobs: int


def _entries(config: dict[str, Any]) -> list[dict[str, Any]]:
    listed = (config.get("agents") or {}).get("list")
    return [e for e in listed if isinstance(e, dict)] if isinstance(listed, list) else []


def _configured(config: dict[str, Any]) -> list[str]:
    ids: list[str] = []
    for entry in _entries(config):
        raw = entry.get("id")
        if isinstance(raw, str) and raw.strip() and raw.strip().lower() not in ids:
            ids.append(raw.strip().lower())
    return ids


def list_agents(services: Services) -> list[dict[str, Any]]:
    """The default agent, those of `agents.list`, then those with sessions only; each with its session count and
    last activity."""
    config = services.config.effective()
    default = cfg.default_agent_id(config)
    ids = [default, *(i for i in _configured(config) if i != default)]
    sessions: dict[str, int] = {}
    active: dict[str, int] = {}
    for entry in services.sessions.list_registry():
        key = entry.get("sessionKey")
        if not isinstance(key, str):
            continue
        agent = session_agent_id(key)
        if agent not in ids:
            ids.append(agent)
        sessions[agent] = sessions.get(agent, 0) + 1
        at = entry.get("lastActiveAt")
        if isinstance(at, int | float) and not isinstance(at, bool) and int(at) > active.get(agent, -1):
            active[agent] = int(at)
    return [
        {"id": i, "default": i == default, "sessions": sessions.get(i, 0), "lastActiveAt": active.get(i)} for i in ids
    ]


@router.method("agents.list", params=NoParams, result=AgentsListResult, reads_only=True, modes=CLIENT, scope=roles.READ)
def agents_list(ctx: CallContext, params: NoParams) -> dict[str, Any]:
    """The gateway's agents: the default one, those of `agents.list` and any other with sessions, each with its
    session count and when one of its sessions was last active."""
    return {"agents": list_agents(ctx.services)}


def _agent_id(value: str | None, name: str) -> str:
    text = (value or "").strip()
    if not text:
        raise BadRequestError(f"{name} required")
    if not AGENT_ID.match(text):
        raise BadRequestError(
            f"{name} is not an agent id: lowercase letters, digits, '-' and '_', starting with a letter or digit, "
            "at most 64 characters"
        )
    return text


def _add_entry(services: Services, source: str, target: str) -> None:
    """Give `target` an entry in `agents.list` with the settings of `source`'s (not `default`); an entry `target`
    had is replaced (keeping its `default`). When the list named no agent, the default agent gets an entry too, so
    that adding the clone does not take the heartbeat from it (the heartbeat runs for the listed agents, or the
    default one when none)."""

    def update(config: dict[str, Any]) -> list[dict[str, Any]]:
        entries = [copy.deepcopy(e) for e in _entries(config)]
        default = cfg.default_agent_id(config)
        if not _configured(config):
            entries.append({"id": default})
        own = next((e for e in entries if str(e.get("id") or "").strip().lower() == source), None)
        settings = {k: v for k, v in (own or {}).items() if k not in ("id", "default")}
        # a session key of the original's in its settings (a heartbeat's target) names the clone's own session
        clone = json.loads(json.dumps(settings).replace(f'"agent:{source}:', f'"agent:{target}:'))
        replaced = next((e for e in entries if str(e.get("id") or "").strip().lower() == target), None)
        if replaced is not None and "default" in replaced:
            clone["default"] = replaced["default"]  # the agent replaced stays the default one if it was
        kept = [e for e in entries if str(e.get("id") or "").strip().lower() != target]
        return [*kept, {"id": target, **clone}]

    repo = services.config

    def attempt() -> None:
        current, version = repo.load()
        # the list holds no secret: the effective one, updated, is written back as it is
        repo.save(cfg.set_path(current, "agents.list", update(cfg.effective(current, repo.base))), version)

    retrying("config", attempt)  # a concurrent change of the configuration is read again, never lost


@router.method("agents.clone", params=AgentsCloneParams, result=AgentsCloneResult, modes=CLIENT, scope=roles.ADMIN)
def agents_clone(ctx: CallContext, params: AgentsCloneParams) -> dict[str, Any]:
    """Copy an agent to a new id inside this gateway: its sessions and messages, workspace files (identity, memory,
    skills, session archives), cron jobs (with new job ids), heartbeat state and counters, all rewritten to the new
    id, and an `agents.list` entry with the original's settings (its bindings are not copied). The original is not
    changed. 404 for an unknown `from`; 409 when `to` exists, unless `replace`."""
    source = _agent_id(params.from_, "from")
    target = _agent_id(params.to, "to")
    if source == target:
        raise BadRequestError("from and to are the same agent")
    from orbital.store import (
        agent_archive,  # lazy: the archive's code loads when an agent is cloned, not per cold start
    )

    services = ctx.services
    items, objects = services.portable_stores()
    try:
        report = agent_archive.copy_agent(
            items, objects, source, target, replace=bool(params.replace), add_to_config=False
        )
    except agent_archive.AgentNotFoundError:
        raise NotFoundError(f"agent {source} not found") from None
    except agent_archive.AgentExistsError:
        raise ConflictError(f"agent {target} already exists (replace: true replaces it)") from None
    _add_entry(services, source, target)
    return {
        "from": source,
        "to": target,
        "items": report.items,
        "objects": report.objects,
        "sessions": report.sessions,
        "cronJobs": report.cron_jobs,
    }
