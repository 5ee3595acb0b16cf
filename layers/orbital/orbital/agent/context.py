"""What a model call is made of besides the messages: the effective model and thinking level, the tool list, and
the system prompt built from the agent's workspace (spec §7.2, §7.3, §13.3; fix F15 for the effective model).

Workspace files are read through a small per-process cache keyed by (object key, last modified, size): each prompt
lists the workspace root and `memory/` (and the skill directories) and fetches only files that changed since the last
prompt, so a warm container makes a handful of S3 calls per model call instead of one per file.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from orbital.domain import prompt as prompt_rules
from orbital.domain.compaction import estimate_context_tokens, estimate_text_tokens
from orbital.domain.config import DEFAULT_HEARTBEAT_PROMPT, as_dict
from orbital.domain.session_keys import is_main_session_key
from orbital.domain.skills import build_node_inventory, parse_skill, select_prompt_skills, skill_dir_name
from orbital.store import keys
from orbital.store.history import History
from orbital.store.skills import is_skill_file
from orbital.tools.catalog import all_tools

if TYPE_CHECKING:
    from cachetools import LRUCache

    from orbital.ports.services import Services
    from orbital.store.connections import NodeEntry
    from orbital.store.workspace import Listing, ObjectInfo

log = logging.getLogger("orbital.agent.context")

IDENTITY_FILES = (
    "AGENTS.md",
    "SOUL.md",
    "IDENTITY.md",
    "USER.md",
    "TOOLS.md",
    "HEARTBEAT.md",
    "BOOTSTRAP.md",
    "MEMORY.md",
)
CACHE_BYTES = 8 * 1024 * 1024


# --- model and thinking ------------------------------------------------------------------------------------------


def _model(value: Any) -> dict[str, str] | None:
    if isinstance(value, dict) and isinstance(value.get("id"), str) and value.get("id"):
        provider = value.get("provider")
        return {"provider": str(provider) if provider else "", "id": str(value["id"])}
    return None


def effective_model(config: dict[str, Any], meta: dict[str, Any], overrides: dict[str, Any]) -> dict[str, str]:
    """Per-message override, else the session's model, else the configured one. A model without a provider keeps
    the provider of the next level down."""
    base = _model(config.get("model")) or {"provider": "anthropic", "id": "claude-sonnet-4-20250514"}
    chosen = base
    settings = as_dict(meta.get("settings"))
    for level in (settings.get("model"), overrides.get("model")):
        picked = _model(level)
        if picked is not None:
            chosen = {"provider": picked["provider"] or chosen["provider"], "id": picked["id"]}
    return chosen


def effective_thinking(meta: dict[str, Any], overrides: dict[str, Any]) -> str | None:
    settings = as_dict(meta.get("settings"))
    level = overrides.get("thinkLevel") or settings.get("thinkingLevel")
    return str(level) if level and level != "none" else None


def model_label(model: dict[str, str]) -> str:
    return f"{model['provider']}/{model['id']}"


def model_tools(services: Services, nodes: list[NodeEntry]) -> list[dict[str, Any]]:
    return all_tools(services, nodes)


def estimate_request_tokens(system: str, messages: list[dict[str, Any]] | History) -> int:
    """The estimated tokens of a request: the system prompt's and the messages' (a `History` keeps its own)."""
    counted = messages.tokens if isinstance(messages, History) else estimate_context_tokens(messages)
    return estimate_text_tokens(system) + counted


# --- workspace files ---------------------------------------------------------------------------------------------


class _FileCache:
    """Object bodies by key, with the (last modified, size, bucket) they were read at: at most `limit` characters in
    all, the least recently used out first (cachetools' `LRUCache`, made at the first read)."""

    def __init__(self, limit: int = CACHE_BYTES) -> None:
        self.limit = limit
        self._made: LRUCache[str, tuple[tuple[Any, ...], str]] | None = None
        self._lock = threading.Lock()

    @property
    def _items(self) -> LRUCache[str, tuple[tuple[Any, ...], str]]:
        if self._made is None:
            # lazy: ws_message imports this module but never reads a workspace file; importing cachetools there cost
            # 1-2 ms of its cold start (measured after the function's own imports)
            from cachetools import LRUCache

            self._made = LRUCache(maxsize=self.limit, getsizeof=lambda entry: len(entry[1]))
        return self._made

    def text(self, services: Services, info: ObjectInfo) -> str | None:
        stamp = (info.last_modified, info.size, services.settings.bucket_name)
        with self._lock:
            hit = self._items.get(info.key)
            if hit is not None and hit[0] == stamp:
                return hit[1]
        found = services.workspace.get(info.key)
        if found is None:
            return None
        text = found[0].decode("utf-8", "replace")
        with self._lock:
            self._items.pop(info.key, None)
            if len(text) <= self.limit:  # a body larger than the whole bound is not kept
                self._items[info.key] = (stamp, text)
        return text

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


files = _FileCache()


def _listing(services: Services, prefix: str) -> Listing | None:
    try:
        return services.workspace.listing(prefix)
    except Exception:
        log.exception("listing %s failed", prefix)
        return None


def _keys(listing: Listing | None) -> dict[str, ObjectInfo]:
    return {info.key: info for info in listing.keys} if listing is not None else {}


def _absent(root: Listing | None, prefix: str) -> bool:
    """Whether the agent's root listing shows that nothing is stored under `prefix` (one of its directories): then
    that directory need not be listed (on AWS each listing is an S3 LIST request, per model call)."""
    return root is not None and prefix not in root.prefixes


def workspace_files(
    services: Services, agent_id: str, now: datetime, *, root: Listing | None = None
) -> tuple[dict[str, str], str | None, str | None]:
    """The identity files that exist, and today's / yesterday's memory notes (UTC dates). `root`: the agent's root
    listing, if the caller has it."""
    root_listing = root if root is not None else _listing(services, keys.workspace_prefix(agent_id, ""))
    top = _keys(root_listing)
    found: dict[str, str] = {}
    for name in IDENTITY_FILES:
        info = top.get(keys.workspace_object(agent_id, name))
        if info is not None:
            text = files.text(services, info)
            if text is not None:
                found[name] = text
    memory_prefix = keys.workspace_prefix(agent_id, "memory")
    memory = {} if _absent(root_listing, memory_prefix) else _keys(_listing(services, memory_prefix))

    def daily(day: datetime) -> str | None:
        info = memory.get(keys.workspace_object(agent_id, f"memory/{day.strftime('%Y-%m-%d')}.md"))
        return files.text(services, info) if info is not None else None

    return found, daily(now), daily(now - timedelta(days=1))


def workspace_skills(services: Services, agent_id: str, *, root: Listing | None = None) -> list[Any]:
    """The agent's skills (its own `skills/*/SKILL.md`, then global ones it does not override), read through the
    cache: two listings (one when the agent's root listing `root` shows it has no `skills/`) and only changed files
    fetched."""
    listed: list[list[ObjectInfo]] = []
    for prefix in (keys.workspace_prefix(agent_id, "skills"), keys.global_skills_prefix("")):
        if prefix != keys.global_skills_prefix("") and _absent(root, prefix):
            listed.append([])
            continue
        try:
            infos = services.workspace.listing(prefix, delimiter=None).keys
        except Exception:
            log.exception("listing %s failed", prefix)
            infos = []
        listed.append(sorted((i for i in infos if is_skill_file(i.key, prefix)), key=lambda i: i.key))
    local, shared = listed
    names = {skill_dir_name(i.key) for i in local}
    skills = []
    for info in [*local, *(i for i in shared if skill_dir_name(i.key) not in names)]:
        text = files.text(services, info)
        if text is not None:
            skills.append(parse_skill(info.key, text))
    return skills


# --- the prompt --------------------------------------------------------------------------------------------------


def _agent_entry(config: dict[str, Any], agent_id: str) -> dict[str, Any]:
    agents = as_dict(config.get("agents"))
    for entry in agents.get("list") or []:
        if isinstance(entry, dict) and str(entry.get("id") or "").lower() == agent_id:
            return entry
    return {}


def heartbeat_prompt(config: dict[str, Any], agent_id: str) -> str | None:
    own = _agent_entry(config, agent_id).get("heartbeat")
    if isinstance(own, dict) and isinstance(own.get("prompt"), str) and own["prompt"].strip():
        return str(own["prompt"])
    agents = as_dict(config.get("agents"))
    default = as_dict(agents.get("defaultHeartbeat"))
    prompt = default.get("prompt", DEFAULT_HEARTBEAT_PROMPT)
    return str(prompt) if isinstance(prompt, str) else None


def guest_system_prompt(tools: list[dict[str, Any]], model: dict[str, str]) -> str:
    """The system prompt of a guest's run (`client_tools.is_guest`): its tools and model, no workspace file read."""
    return prompt_rules.build_guest_prompt(tools, model_label(model))


def system_prompt(
    services: Services,
    config: dict[str, Any],
    meta: dict[str, Any],
    session_key: str,
    agent_id: str,
    tools: list[dict[str, Any]],
    model: dict[str, str],
    nodes: list[NodeEntry],
    *,
    now: datetime | None = None,
) -> str:
    now = now or datetime.now(UTC)
    section = as_dict(config.get("session"))
    is_main = is_main_session_key(session_key, main_key=section.get("mainKey"), dm_scope=section.get("dmScope"))
    root = _listing(services, keys.workspace_prefix(agent_id, ""))
    found, today, yesterday = workspace_files(services, agent_id, now, root=root)
    inventory = build_node_inventory(nodes)
    skills = select_prompt_skills(workspace_skills(services, agent_id, root=root), agent_id, config, inventory)
    settings = as_dict(meta.get("settings"))
    base = settings.get("systemPrompt") or config.get("systemPrompt")
    channel_context = as_dict(meta.get("channelContext"))
    execution_hosts = sorted(e["nodeId"] for e in inventory if e.get("hostRole") == "execution")
    runtime = prompt_rules.RuntimeInfo(
        agent_id=agent_id,
        is_main=is_main,
        session_key=session_key,
        model=model_label(model),
        timezone=str(config.get("userTimezone") or "UTC"),
        channel=channel_context.get("channel"),
        inventory=inventory,
        execution_host_id=execution_hosts[0] if execution_hosts else None,
        specialized_host_ids=sorted(e["nodeId"] for e in inventory if e.get("hostRole") != "execution"),
    )
    inputs = prompt_rules.PromptInputs(
        base_prompt=base if isinstance(base, str) else None,
        agent_id=agent_id,
        files=found,
        today=today,
        yesterday=yesterday,
        is_main_session=is_main,
        tools=tools,
        skills=skills,
        heartbeat_prompt=heartbeat_prompt(config, agent_id),
        runtime=runtime,
    )
    return prompt_rules.build_system_prompt(inputs)
