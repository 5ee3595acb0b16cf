"""What belongs to one agent in a gateway's items and objects, and the rewriting of its id (and its cron jobs' ids)
when it moves: the rules the agent archive (`orbital.store.agent_archive`) selects, checks and rewrites by, and the
agent's part of the configuration an archive carries (its `agents.list` entry without secrets, its bindings, the
secrets it expects).

Items are in DynamoDB JSON, as the `Items` port of `orbital.store.portable` moves them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from orbital.domain import config as cfg
from orbital.domain.config_schema import AgentEntry
from orbital.domain.ids import normalize_agent_id
from orbital.store import keys
from orbital.store.portable import LIVE_ITEM_KINDS, Items, Key, item_key

MAX_OBJECT_KEY = 1024


# --- what belongs to an agent -----------------------------------------------------------------------------------------


def data_of(item: Mapping[str, Any]) -> dict[str, Any]:
    raw = item.get("d")
    if not isinstance(raw, Mapping) or not isinstance(raw.get("S"), str):
        return {}
    try:
        data = json.loads(raw["S"])
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def job_agent(item: Mapping[str, Any]) -> str | None:
    """The agent of a cron job item (its `agentId`; a job without one is the default agent's)."""
    agent = data_of(item).get("agentId")
    return normalize_agent_id(agent if isinstance(agent, str) else None)


def job_id(sk: str) -> str:
    return sk[len(keys.CRON_JOB_PREFIX) :]


def is_job(pk: str, sk: str) -> bool:
    return pk == keys.CRON_PK and sk.startswith(keys.CRON_JOB_PREFIX)


def belongs(pk: str, sk: str, agent: str, jobs: set[str]) -> bool:
    """Whether the item at (pk, sk) is agent `agent`'s, given the ids of its cron jobs (a job item itself is checked
    by its `agentId` before)."""
    if keys.item_kind(pk, sk) in LIVE_ITEM_KINDS:
        return False
    prefix = keys.agent_session_prefix(agent)
    if pk.startswith(keys.SESSION_PK_PREFIX):
        return pk[len(keys.SESSION_PK_PREFIX) :].startswith(prefix)
    if pk == keys.SESSION_REGISTRY_PK:
        return sk.startswith(prefix)
    if pk in (keys.HEARTBEAT_PK, keys.LAST_ACTIVE_PK):
        return sk == agent
    if is_job(pk, sk):
        return job_id(sk) in jobs
    if pk.startswith(keys.CRON_RUNS_PK_PREFIX):
        return pk[len(keys.CRON_RUNS_PK_PREFIX) :] in jobs
    if pk.startswith(keys.SPEND_PREFIX):
        return (
            sk == keys.spend_scope_agent(agent)
            or sk.startswith(keys.spend_scope_session(prefix))
            or any(sk == keys.spend_scope_cron(job) for job in jobs)
        )
    if pk.startswith(keys.SPEND_NOTICE_PREFIX):
        return pk[len(keys.SPEND_NOTICE_PREFIX) :].startswith(prefix)
    return (pk, sk) == keys.workspace_seeded_flag(agent)


def owns_object(key: str, agent: str) -> bool:
    return key.startswith((keys.agent_workspace_root(agent), keys.agent_media_prefix(agent)))


def object_key_problem(key: str, agent: str) -> str | None:
    """Why an archive may not write the object `key` for agent `agent` (None: it may)."""
    if not owns_object(key, agent):
        return "it is not in the agent's workspace or its sessions' media"
    if len(key) > MAX_OBJECT_KEY:
        return "its key is too long"
    if "\\" in key or any(ord(c) < 32 or ord(c) == 127 for c in key):
        return "its key holds a backslash or a control character"
    if any(part in ("", ".", "..") for part in key.split("/")):
        return "its key has an empty, '.' or '..' segment"
    return None


def index_problem(item: Mapping[str, Any], pk: str, sk: str) -> str | None:
    """An item of an agent has the index keys of its kind only: a due cron job, a cron run, or none."""
    gsi = item.get("GSI1PK")
    if gsi is None and item.get("GSI1SK") is None:
        return None
    gsi_pk = gsi.get("S") if isinstance(gsi, Mapping) else None
    gsi_sk = item.get("GSI1SK", {}).get("S") if isinstance(item.get("GSI1SK"), Mapping) else None
    if not isinstance(gsi_pk, str) or not isinstance(gsi_sk, str):
        return "its index keys are not strings"
    if is_job(pk, sk) and gsi_pk == keys.CRON_DUE_GSI_PK and gsi_sk.endswith(f"#{job_id(sk)}"):
        return None
    if pk.startswith(keys.CRON_RUNS_PK_PREFIX) and gsi_pk == keys.CRON_RUNS_GSI_PK:
        return None
    return f"its index key {gsi_pk!r} is not one an item of its kind has"


# --- rewriting an agent's id and its jobs' ids ------------------------------------------------------------------------


class Rewrite:
    """Renames agent `old` to `new` and cron job ids by `jobs`, in keys and in the data of items."""

    def __init__(self, old: str, new: str, jobs: Mapping[str, str]) -> None:
        self.old, self.new, self.jobs = old, new, dict(jobs)
        ids = re.escape(old)
        self._agent = re.compile(rf"(?<![A-Za-z0-9_-])(agent:|agents/){ids}(?=[:/]|$)")

    @property
    def identity(self) -> bool:
        return self.old == self.new and all(a == b for a, b in self.jobs.items())

    def text(self, value: str) -> str:
        """A key, session key, path or scope with the agent and job ids rewritten (whitespace-free text only: prose
        that mentions a key is left as written)."""
        if not value or any(c.isspace() for c in value):
            return value
        if self.old != self.new and self.old in value:
            value = self._agent.sub(lambda m: f"{m.group(1)}{self.new}", value)
        for old_job, new_job in self.jobs.items():
            if old_job in value:
                value = value.replace(old_job, new_job)
        return value

    def data(self, value: Any, name: str | None = None) -> Any:
        if isinstance(value, str):
            if name == "agentId" and value == self.old:
                return self.new
            return self.text(value)
        if isinstance(value, list):
            return [self.data(v) for v in value]
        if isinstance(value, dict):
            return {k: self.data(v, k) for k, v in value.items()}
        return value

    def key(self, pk: str, sk: str) -> Key:
        if pk in (keys.HEARTBEAT_PK, keys.LAST_ACTIVE_PK) and sk == self.old:
            return pk, self.new
        if (pk, sk) == keys.workspace_seeded_flag(self.old):
            return keys.workspace_seeded_flag(self.new)
        if pk.startswith(keys.SPEND_PREFIX) and sk == keys.spend_scope_agent(self.old):
            return self.text(pk), keys.spend_scope_agent(self.new)
        return self.text(pk), self.text(sk)

    def item(self, item: Mapping[str, Any]) -> dict[str, Any]:
        if self.identity:
            return dict(item)
        pk, sk = self.key(*item_key(item))
        out: dict[str, Any] = {}
        for name, value in item.items():
            if name == "PK":
                out[name] = {"S": pk}
            elif name == "SK":
                out[name] = {"S": sk}
            elif name == "d" and isinstance(value, Mapping) and isinstance(value.get("S"), str):
                out[name] = {"S": self._json_text(value["S"])}
            elif isinstance(value, Mapping) and isinstance(value.get("S"), str):
                out[name] = {"S": self.text(value["S"])}
            else:
                out[name] = value
        return out

    def _json_text(self, text: str) -> str:
        try:
            data = json.loads(text)
        except ValueError:
            return text
        rewritten = self.data(data)
        if rewritten == data:
            return text  # unchanged data keeps its stored text as it is
        return json.dumps(rewritten, separators=(",", ":"), ensure_ascii=False)

    def object_key(self, key: str) -> str:
        return self.text(key) if self.old != self.new or self.jobs else key


# --- the configuration: the agent's entry, its bindings, the secrets it expects ---------------------------------------


def stored_config(items: Items) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The stored configuration overrides and the CONFIG item itself (None: none stored)."""
    found = items.get_many([keys.CONFIG]).get(keys.CONFIG)
    return (data_of(found) if found else {}), found


def agent_list(config: Mapping[str, Any]) -> list[Any]:
    agents = config.get("agents")
    entries = agents.get("list") if isinstance(agents, dict) else None
    return entries if isinstance(entries, list) else []


def entry_of(config: Mapping[str, Any], agent: str) -> dict[str, Any] | None:
    for entry in agent_list(config):
        if isinstance(entry, dict) and isinstance(entry.get("id"), str) and normalize_agent_id(entry["id"]) == agent:
            return entry
    return None


def bindings_of(config: Mapping[str, Any], agent: str) -> list[dict[str, Any]]:
    agents = config.get("agents")
    bindings = agents.get("bindings") if isinstance(agents, dict) else None
    return [
        b
        for b in (bindings if isinstance(bindings, list) else [])
        if isinstance(b, dict) and isinstance(b.get("agentId"), str) and normalize_agent_id(b["agentId"]) == agent
    ]


def without_secrets(value: Any, path: list[str]) -> Any:
    if isinstance(value, dict):
        return {k: without_secrets(v, [*path, k]) for k, v in value.items() if not cfg.is_secret([*path, k])}
    if isinstance(value, list):
        return [without_secrets(v, [*path, str(i)]) for i, v in enumerate(value)]
    return value


def secret_paths(value: Any, path: list[str]) -> Iterator[list[str]]:
    """The paths of the secrets set in `value` (the first secret segment of each; its value never read)."""
    if path and cfg.is_secret(path):
        if value not in (None, "", {}, []):
            yield path
        return
    if isinstance(value, dict):
        for k, v in value.items():
            yield from secret_paths(v, [*path, str(k)])
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from secret_paths(v, [*path, str(i)])


def expects_of(config: Mapping[str, Any], agent: str, bindings: list[dict[str, Any]]) -> dict[str, Any]:
    channels = {
        str(b["match"]["channel"]).lower()
        for b in bindings
        if isinstance(b.get("match"), dict) and isinstance(b["match"].get("channel"), str)
    }
    default = cfg.default_agent_id(dict(config)) == agent
    secrets = []
    for path in secret_paths(config, []):
        if path[0] == "channels" and len(path) > 1 and not default and path[1].lower() not in channels:
            continue  # the token of a channel this agent does not answer on
        secrets.append(".".join(path))
    return {"secrets": sorted(set(secrets)), "bindings": bindings}


def clean_entry(entry: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """An `agents.list` entry as an archive carries it: the settings the schema knows, no secrets, no `default`."""
    if entry is None:
        return None
    kept = {k: v for k, v in entry.items() if k in AgentEntry.model_fields and k not in ("id", "default")}
    return without_secrets(kept, ["agents", "list", "0"])
