"""One agent on its own: its archive, its import under the same or another id, its copy inside one gateway.

`export_agent` writes what belongs to one agent into a zip archive; `import_agent` writes such an archive into a
table and bucket under the agent's own id or a new one; `copy_agent` does both at once inside one store (no file).
They work on the `Items` / `Objects` ports of `orbital.store.portable` (locally `orbital.local.portable`, on AWS
`orbital.store.portable_aws`), so an agent moves between the local runtime and a stack either way.

What belongs to agent `{id}` (`keys.py`, "one agent's share"): the sessions whose key starts with `agent:{id}:` —
their meta, messages, queued inputs, approval history, registry entries, spend notices and media
(`media/agent:{id}:…`, which holds message bodies too large for an item) —, its workspace `agents/{id}/…` (identity,
memory, skill overrides, other files, session archives), its heartbeat state and last-active context, its cron jobs
(`agentId`) with their run history, its spend counters (scopes `agent:{id}`, `session:{key}` of its sessions,
`cron:{jobId}` of its jobs) kept as history, and the flag that its workspace was seeded. Its entry of the
configuration's `agents.list` goes in the manifest (secrets removed), and so do its `agents.bindings` — listed, never
made active by an import. Left out: live state (`portable.LIVE_ITEM_KINDS`), items whose ttl passed, the watch
records of cron runs in progress (`cron-active`), everything of the gateway as a whole (the configuration and its
secrets, API keys, channel tokens, MCP servers with their headers and OAuth grants, device tokens, pairings, usage
of the month, channel registry) and everything of another agent.

The archive is a zip like the gateway's export (mode 0600, written under a temporary name and renamed):

    items.jsonl        the agent's items in DynamoDB JSON, as stored
    objects/00000001   the bytes of one object each
    manifest.json      {"format": "orbital-agent", "version": 1, "agentId": "main", "createdAt": "...",
                        "orbitalVersion": "...", "counts": {"items": {...}, "objects": {...}},
                        "skipped": {"items": {...}}, "expects": {"secrets": ["apiKeys.anthropic", ...],
                        "bindings": [{"agentId": "main", "match": {...}}]}, "config": {"agent": {...} | null},
                        "items": {"file": "items.jsonl", "count": N, "size": N, "sha256": "..."},
                        "objects": [{"key": "agents/main/MEMORY.md", "file": "objects/00000001", ...}, ...]}

`expects.secrets` names (never holds) the secrets the agent uses where it was: every API key and provider or MCP
header set, and the tokens of the channels its bindings name (of every channel, for the default agent).

Import: the archive is checked whole before anything is written — its checksums, and that every item and object
belongs to the agent it names (a session key of that agent, its workspace or media, its heartbeat, its jobs: an
item of any other kind, another agent's key, a path that climbs out with `..`, an index key that is not the one its
kind has, is refused with what it is). Then the id is rewritten everywhere: in keys, in session keys and workspace
paths inside the data, `agentId` fields; every cron job gets a new id (references rewritten too), so two imports of
one archive under two ids are two independent agents. An id that already exists is refused (`AgentExistsError`)
unless `replace`, which first deletes that agent's own items and objects (nothing else). The agent's entry is added
to `agents.list` of the target's configuration (without `default`, with the id rewritten), unless the caller does
that itself (`add_to_config=False`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import tempfile
import time
import uuid
import zipfile
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orbital import __version__
from orbital.domain.ids import normalize_agent_id
from orbital.store import agent_share as share
from orbital.store import keys
from orbital.store.portable import (
    ITEMS_FILE,
    LIVE_ITEM_KINDS,
    MANIFEST_FILE,
    OBJECTS_DIR,
    ArchiveError,
    Items,
    Key,
    ObjectEntry,
    Objects,
    PortableError,
    Progress,
    archive_items,
    count_of,
    counts_of,
    digest_of,
    expired,
    item_key,
    item_to_json,
    manifest_json,
    member_matches,
    no_progress,
    object_entry_from_json,
    open_archive,
    read_member,
    write_object,
    zip_member,
)

FORMAT = "orbital-agent"
VERSION = 1

_VALID_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_BATCH = 25


class AgentArchiveError(ArchiveError):
    """The file is not an agent archive, is damaged, or holds something that does not belong to its agent."""


class AgentExistsError(PortableError):
    """The target already has an agent with that id (and `replace` was not given)."""


class AgentNotFoundError(PortableError):
    """The source has no agent with that id."""


def check_agent_id(raw: str) -> str:
    """`raw` if it is a valid agent id (lowercase letters, digits, `-`, `_`; 1 to 64, starting with a letter or a
    digit); PortableError otherwise (an id is never silently changed into another one)."""
    if not isinstance(raw, str) or not _VALID_ID.match(raw):
        raise PortableError(
            f"invalid agent id {raw!r}: use 1 to 64 lowercase letters, digits, '-' or '_', starting with a letter "
            "or a digit"
        )
    return raw


# --- the manifest -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentManifest:
    """What an agent archive holds, and how to check it."""

    agent_id: str
    created_at: str
    orbital_version: str | None
    item_counts: dict[str, int]
    object_counts: dict[str, int]
    skipped_items: dict[str, int]
    expects: dict[str, Any]
    """`secrets`: config paths of the secrets the agent used (names only); `bindings`: its bindings, not active."""
    agent_config: dict[str, Any] | None
    """The agent's entry of `agents.list` (secrets removed), or None when it had none."""
    items_count: int
    items_size: int
    items_sha256: str
    objects: list[ObjectEntry]

    @property
    def object_bytes(self) -> int:
        return sum(o.size for o in self.objects)

    @property
    def sessions(self) -> int:
        return self.item_counts.get("session", 0)

    @property
    def cron_jobs(self) -> int:
        return self.item_counts.get("cron-job", 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "agentId": self.agent_id,
            "createdAt": self.created_at,
            "orbitalVersion": self.orbital_version,
            "counts": {
                "items": dict(sorted(self.item_counts.items())),
                "objects": dict(sorted(self.object_counts.items())),
            },
            "skipped": {"items": dict(sorted(self.skipped_items.items()))},
            "expects": self.expects,
            "config": {"agent": self.agent_config},
            "items": {
                "file": ITEMS_FILE,
                "count": self.items_count,
                "size": self.items_size,
                "sha256": self.items_sha256,
            },
            "objects": [o.to_json() for o in self.objects],
        }

    @classmethod
    def from_json(cls, data: Any) -> AgentManifest:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            if isinstance(data, dict) and data.get("format") == "orbital-export":
                raise AgentArchiveError("this is a whole gateway's export, not one agent's archive")
            raise AgentArchiveError("not an Orbital agent archive (its manifest names another format)")
        version = data.get("version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise AgentArchiveError("damaged agent archive: the manifest has no format version")
        if version != VERSION:
            newer = " (written by a newer Orbital: upgrade this one)" if version > VERSION else ""
            raise AgentArchiveError(
                f"agent archive format version {version} is not supported; this reads {VERSION}{newer}"
            )
        try:
            agent_id = check_agent_id(data["agentId"])
            items = data["items"]
            if items.get("file") != ITEMS_FILE:
                raise ValueError("items file")
            counts = data.get("counts") or {}
            expects = data.get("expects") or {}
            secrets = expects.get("secrets") or []
            bindings = expects.get("bindings") or []
            if not isinstance(secrets, list) or not all(isinstance(s, str) for s in secrets):
                raise ValueError("expects.secrets")
            if not isinstance(bindings, list) or not all(isinstance(b, dict) for b in bindings):
                raise ValueError("expects.bindings")
            agent_config = (data.get("config") or {}).get("agent")
            if agent_config is not None and not isinstance(agent_config, dict):
                raise ValueError("config.agent")
            objects = [object_entry_from_json(o) for o in data["objects"]]
            manifest = cls(
                agent_id=agent_id,
                created_at=str(data.get("createdAt") or ""),
                orbital_version=data.get("orbitalVersion") if isinstance(data.get("orbitalVersion"), str) else None,
                item_counts=counts_of(counts.get("items")),
                object_counts=counts_of(counts.get("objects")),
                skipped_items=counts_of((data.get("skipped") or {}).get("items")),
                expects={"secrets": list(secrets), "bindings": list(bindings)},
                agent_config=agent_config,
                items_count=count_of(items.get("count")),
                items_size=count_of(items.get("size")),
                items_sha256=digest_of(items.get("sha256")),
                objects=objects,
            )
        except PortableError as exc:
            raise AgentArchiveError(f"damaged agent archive: {exc}") from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise AgentArchiveError(f"damaged agent archive: malformed manifest ({exc})") from None
        seen: set[str] = set()
        for entry in manifest.objects:
            if entry.key in seen:
                raise AgentArchiveError(f"damaged agent archive: object {entry.key!r} appears twice")
            seen.add(entry.key)
        return manifest


Manifest = AgentManifest


# --- export -----------------------------------------------------------------------------------------------------------


def agent_ids(items: Items, objects: Objects) -> list[str]:
    """Every agent the store knows: in the configuration's `agents.list`, in session keys, heartbeats, last-active
    contexts, cron jobs and workspaces."""
    found: set[str] = set()
    for item in items.scan():
        pk, sk = item_key(item)
        ident: str | None = None
        if (pk, sk) == keys.CONFIG:
            found.update(
                normalize_agent_id(e["id"])
                for e in share.agent_list(share.data_of(item))
                if isinstance(e, dict) and e.get("id")
            )
        elif pk.startswith(keys.SESSION_PK_PREFIX) and sk == "META":
            ident = _session_agent(pk[len(keys.SESSION_PK_PREFIX) :])
        elif pk == keys.SESSION_REGISTRY_PK:
            ident = _session_agent(sk)
        elif pk in (keys.HEARTBEAT_PK, keys.LAST_ACTIVE_PK):
            ident = sk
        elif share.is_job(pk, sk):
            ident = share.job_agent(item)
        if ident and _VALID_ID.match(ident):
            found.add(ident)
    for key in objects.list_prefix(keys.agent_root("")):
        ident = key[len(keys.agent_root("")) :].split("/", 1)[0]
        if _VALID_ID.match(ident):
            found.add(ident)
    return sorted(found)


def _session_agent(session_key: str) -> str | None:
    parts = session_key.split(":")
    return parts[1] if len(parts) >= 3 and parts[0] == "agent" else None


def agent_exists(items: Items, objects: Objects, agent_id: str) -> bool:
    """Whether the store holds anything of agent `agent_id` (its workspace, an entry of `agents.list`, a session,
    a heartbeat, a cron job, ...)."""
    agent = check_agent_id(agent_id)
    if next(iter(objects.list_prefix(keys.agent_workspace_root(agent))), None) is not None:
        return True
    return agent in agent_ids(items, objects)


@dataclass
class _Selection:
    """An agent's items and objects, as found in a store."""

    items: list[dict[str, Any]]
    object_keys: list[str]
    skipped: Counter[str]
    config: dict[str, Any]


def _select(items: Items, objects: Objects, agent: str, now: float) -> _Selection:
    jobs: set[str] = set()
    held: list[dict[str, Any]] = []  # job-keyed items seen before their job
    chosen: list[dict[str, Any]] = []
    skipped: Counter[str] = Counter()
    config: dict[str, Any] = {}
    for item in items.scan():
        pk, sk = item_key(item)
        if (pk, sk) == keys.CONFIG:
            config = share.data_of(item)
            continue
        kind = keys.item_kind(pk, sk)
        if share.is_job(pk, sk):
            if share.job_agent(item) != agent:
                continue
            jobs.add(share.job_id(sk))
        elif pk.startswith(keys.CRON_RUNS_PK_PREFIX) or pk.startswith(keys.SPEND_PREFIX):
            held.append(item)
            continue
        elif pk.startswith(keys.cron_active_pk("")):
            continue  # a run in progress belongs to the gateway running it
        if not share.belongs(pk, sk, agent, jobs):
            if kind in LIVE_ITEM_KINDS and _belongs_live(pk, sk, agent):
                skipped[kind] += 1
            continue
        if expired(item, now):
            skipped["expired"] += 1
            continue
        chosen.append(item)
    for item in held:
        if share.belongs(*item_key(item), agent, jobs):
            if expired(item, now):
                skipped["expired"] += 1
            else:
                chosen.append(item)
    object_keys: list[str] = []
    for prefix in (keys.agent_workspace_root(agent), keys.agent_media_prefix(agent)):
        object_keys.extend(sorted(objects.list_prefix(prefix)))
    return _Selection(chosen, object_keys, skipped, config)


def _belongs_live(pk: str, sk: str, agent: str) -> bool:
    """A live item of the agent's sessions (left out, but counted): the keys clients use for them."""
    prefix = keys.agent_session_prefix(agent)
    if pk == keys.CLIENTS_PK and sk.startswith(keys.CLIENT_ALIAS_PREFIX):
        return f"~{prefix}" in sk
    return pk.startswith(keys.SESSION_PK_PREFIX + prefix)


def export_agent(
    items: Items,
    objects: Objects,
    agent_id: str,
    path: Path,
    *,
    progress: Progress | None = None,
    now: float | None = None,
) -> AgentManifest:
    """Write agent `agent_id`'s items and objects into the archive `path` (mode 0600, replaced atomically).
    AgentNotFoundError if the store has nothing of that agent."""
    agent = check_agent_id(agent_id)
    report = progress or no_progress
    cutoff = time.time() if now is None else now
    selection = _select(items, objects, agent, cutoff)
    entry = share.entry_of(selection.config, agent)
    if not selection.items and not selection.object_keys and entry is None:
        raise AgentNotFoundError(f"no agent {agent!r} here")
    out = Path(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent)
    tmp = Path(tmp_name)
    try:
        tmp.chmod(0o600)
        with os.fdopen(fd, "wb") as fh:
            with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
                manifest = _write(zf, objects, agent, selection, report)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return manifest


def _write(
    zf: zipfile.ZipFile, objects: Objects, agent: str, selection: _Selection, progress: Progress
) -> AgentManifest:
    digest = hashlib.sha256()
    size = 0
    counts: Counter[str] = Counter()
    progress("items", 0, len(selection.items))
    with zf.open(zip_member(ITEMS_FILE), "w", force_zip64=True) as member:
        for done, item in enumerate(sorted(selection.items, key=item_key), 1):
            line = (json.dumps(item_to_json(item), ensure_ascii=False, separators=(",", ":")) + "\n").encode()
            member.write(line)
            digest.update(line)
            size += len(line)
            counts[keys.item_kind(*item_key(item))] += 1
            if done % 100 == 0:
                progress("items", done, len(selection.items))
    progress("items", len(selection.items), len(selection.items))
    entries: list[ObjectEntry] = []
    object_counts: Counter[str] = Counter()
    skipped = Counter(selection.skipped)
    progress("objects", 0, len(selection.object_keys))
    for done, key in enumerate(selection.object_keys, 1):
        entry = write_object(zf, objects, key, f"{OBJECTS_DIR}{len(entries) + 1:08d}")
        if entry is None:
            skipped["vanished"] += 1
        else:
            entries.append(entry)
            object_counts[keys.object_kind(key)] += 1
        progress("objects", done, len(selection.object_keys))
    bindings = share.bindings_of(selection.config, agent)
    manifest = AgentManifest(
        agent_id=agent,
        created_at=dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        orbital_version=__version__,
        item_counts=dict(counts),
        object_counts=dict(object_counts),
        skipped_items=dict(skipped),
        expects=share.expects_of(selection.config, agent, bindings),
        agent_config=share.clean_entry(share.entry_of(selection.config, agent)),
        items_count=sum(counts.values()),
        items_size=size,
        items_sha256=digest.hexdigest(),
        objects=entries,
    )
    zf.writestr(zip_member(MANIFEST_FILE), json.dumps(manifest.to_json(), indent=1, ensure_ascii=False))
    return manifest


# --- import -----------------------------------------------------------------------------------------------------------


@dataclass
class AgentImportReport:
    """What an import (or a copy) wrote."""

    source_id: str
    agent_id: str
    items: int = 0
    objects: int = 0
    sessions: int = 0
    cron_jobs: int = 0
    replaced_items: int = 0
    replaced_objects: int = 0
    job_ids: dict[str, str] = field(default_factory=dict)
    """Old cron job id → the new one."""
    expects: dict[str, Any] = field(default_factory=dict)
    config_added: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "from": self.source_id,
            "agentId": self.agent_id,
            "items": self.items,
            "objects": self.objects,
            "sessions": self.sessions,
            "cronJobs": self.cron_jobs,
            "replaced": {"items": self.replaced_items, "objects": self.replaced_objects},
            "jobIds": dict(self.job_ids),
            "expects": self.expects,
            "configAdded": self.config_added,
        }


@dataclass
class _Payload:
    """An agent's items and objects, checked, ready to be written under another id."""

    agent_id: str
    items: list[dict[str, Any]]
    objects: list[tuple[ObjectEntry, Callable[[], bytes]]]
    agent_config: dict[str, Any] | None
    expects: dict[str, Any]


def _check_items(payload_items: list[dict[str, Any]], agent: str, target: Items | None) -> set[str]:
    """Refuse (AgentArchiveError) an item that is not agent `agent`'s; the ids of its cron jobs."""
    jobs: set[str] = set()
    for item in payload_items:
        pk, sk = item_key(item)
        if share.is_job(pk, sk):
            if share.job_agent(item) != agent:
                raise AgentArchiveError(f"the archive holds cron job {share.job_id(sk)!r} of another agent")
            jobs.add(share.job_id(sk))
    seen: set[Key] = set()
    for item in payload_items:
        key = item_key(item)
        if key in seen:
            raise AgentArchiveError(f"damaged agent archive: item {key[0]} / {key[1]} appears twice")
        seen.add(key)
        if not share.belongs(*key, agent, jobs):
            raise AgentArchiveError(f"the archive holds item {key[0]} / {key[1]}, which is not agent {agent!r}'s")
        if why := share.index_problem(item, *key):
            raise AgentArchiveError(f"the archive's item {key[0]} / {key[1]} is refused: {why}")
        if target is not None and (why := target.refusal(item)):
            raise PortableError(f"item {key[0]} / {key[1]} cannot be imported into {target.name}: {why}")
    return jobs


def _check_objects(entries: list[ObjectEntry], agent: str) -> None:
    for entry in entries:
        if why := share.object_key_problem(entry.key, agent):
            raise AgentArchiveError(f"the archive's object {entry.key!r} is refused: {why}")


def _apply(
    items: Items,
    objects: Objects,
    payload: _Payload,
    target_id: str,
    *,
    replace: bool,
    add_to_config: bool,
    progress: Progress,
    now: float,
) -> AgentImportReport:
    source = payload.agent_id
    jobs = _check_items(payload.items, source, items)
    _check_objects([entry for entry, _ in payload.objects], source)
    rewrite = share.Rewrite(source, target_id, {job: str(uuid.uuid4()) for job in sorted(jobs)})
    new_items = [rewrite.item(item) for item in payload.items if not expired(item, now)]
    new_jobs = set(rewrite.jobs.values())
    for item in new_items:  # what is written is the target agent's, whatever the rewrite made of it
        if not share.belongs(*item_key(item), target_id, new_jobs):
            raise AgentArchiveError(f"item {item_key(item)} would not belong to agent {target_id!r}")
    new_keys = [rewrite.object_key(entry.key) for entry, _ in payload.objects]
    for key in new_keys:
        if why := share.object_key_problem(key, target_id):
            raise AgentArchiveError(f"object {key!r} is refused: {why}")
    report = AgentImportReport(source_id=source, agent_id=target_id, job_ids=dict(rewrite.jobs))
    report.expects = {
        "secrets": list(payload.expects.get("secrets") or []),
        "bindings": [rewrite.data(b) for b in payload.expects.get("bindings") or []],
    }
    if agent_exists(items, objects, target_id):
        if not replace:
            raise AgentExistsError(f"agent {target_id!r} already exists here (replace it with --replace)")
        report.replaced_items, report.replaced_objects = _remove(items, objects, target_id)

    progress("items", 0, len(new_items))
    for start in range(0, len(new_items), max(1, min(items.batch, _BATCH))):
        batch = new_items[start : start + max(1, min(items.batch, _BATCH))]
        items.put_many(batch)
        report.items += len(batch)
        progress("items", report.items, len(new_items))
    for item in new_items:
        kind = keys.item_kind(*item_key(item))
        report.sessions += kind == "session"
        report.cron_jobs += kind == "cron-job"
    progress("objects", 0, len(new_keys))
    for done, ((entry, body), key) in enumerate(zip(payload.objects, new_keys, strict=True), 1):
        data = body()
        if len(data) != entry.size or hashlib.sha256(data).hexdigest() != entry.sha256:
            raise AgentArchiveError(f"damaged agent archive: the bytes of {entry.key!r} do not match their checksum")
        objects.write(key, data, ObjectEntry(key, entry.file, entry.size, entry.sha256, entry.headers, entry.metadata))
        report.objects += 1
        progress("objects", done, len(new_keys))
    if add_to_config:
        report.config_added = _add_to_config(items, target_id, payload.agent_config, rewrite)
    return report


def _remove(items: Items, objects: Objects, agent: str) -> tuple[int, int]:
    """Delete agent `agent`'s own items (with the live ones of its sessions and its cron runs in progress) and
    objects; (items, objects) deleted."""
    scanned = [
        item_key(item) for item in items.scan() if not share.is_job(*item_key(item)) or share.job_agent(item) == agent
    ]
    jobs = {share.job_id(sk) for pk, sk in scanned if share.is_job(pk, sk)}
    active = tuple(keys.cron_active_pk(job) for job in jobs)
    doomed = [
        (pk, sk)
        for pk, sk in scanned
        if share.belongs(pk, sk, agent, jobs) or _belongs_live(pk, sk, agent) or (active and pk.startswith(active))
    ]
    for start in range(0, len(doomed), _BATCH):
        items.delete_many(doomed[start : start + _BATCH])
    gone = 0
    for prefix in (keys.agent_workspace_root(agent), keys.agent_media_prefix(agent)):
        for key in list(objects.list_prefix(prefix)):
            objects.delete(key)
            gone += 1
    return len(doomed), gone


def _add_to_config(items: Items, agent: str, entry: Mapping[str, Any] | None, rewrite: share.Rewrite) -> bool:
    """Put the agent's entry into `agents.list` of the stored configuration (replacing one with its id). The default
    agent `main` needs none when the archive had none."""
    if entry is None and agent == "main":
        return False
    config, stored = share.stored_config(items)
    new_entry = {"id": agent, **((share.clean_entry(rewrite.data(dict(entry))) or {}) if entry else {})}
    section = config.get("agents")
    agents: dict[str, Any] = section if isinstance(section, dict) else {}
    listed = [
        e for e in share.agent_list(config) if not (isinstance(e, dict) and normalize_agent_id(e.get("id")) == agent)
    ]
    updated = {**config, "agents": {**agents, "list": [*listed, new_entry]}}
    version = 0
    if stored is not None and isinstance(stored.get("v"), Mapping) and "N" in stored["v"]:
        version = int(str(stored["v"]["N"]))
    item: dict[str, Any] = dict(stored or {})
    item.update(
        {
            "PK": {"S": keys.CONFIG[0]},
            "SK": {"S": keys.CONFIG[1]},
            "d": {"S": json.dumps(updated, separators=(",", ":"), ensure_ascii=False)},
            "v": {"N": str(version + 1)},
        }
    )
    items.put_many([item])
    return True


def _read_archive(zf: zipfile.ZipFile, progress: Progress) -> tuple[AgentManifest, list[dict[str, Any]]]:
    manifest = AgentManifest.from_json(_manifest_json(zf))
    progress("verify", 0, 1 + len(manifest.objects))
    if not member_matches(zf, ITEMS_FILE, manifest.items_size, manifest.items_sha256):
        raise AgentArchiveError(f"damaged agent archive: {ITEMS_FILE} does not match its checksum")
    items = list(archive_items(zf))
    if len(items) != manifest.items_count:
        raise AgentArchiveError(
            f"damaged agent archive: {len(items)} items where the manifest lists {manifest.items_count}"
        )
    for done, entry in enumerate(manifest.objects, 2):
        if not member_matches(zf, entry.file, entry.size, entry.sha256):
            raise AgentArchiveError(f"damaged agent archive: the bytes of {entry.key!r} do not match their checksum")
        progress("verify", done, 1 + len(manifest.objects))
    return manifest, items


def read_agent_manifest(path: Path) -> AgentManifest:
    """The manifest of an agent archive, validated without reading the rest."""
    with open_archive(path) as zf:
        return AgentManifest.from_json(_manifest_json(zf))


def _manifest_json(zf: zipfile.ZipFile) -> Any:
    return manifest_json(zf, "an Orbital agent archive", "damaged agent archive", AgentArchiveError)


def is_agent_archive(path: Path) -> bool:
    """Whether `path` is a zip whose manifest names the agent archive format (for `orbital import`)."""
    try:
        with open_archive(path) as zf:
            data = json.loads(zf.read(MANIFEST_FILE).decode("utf-8"))
    except (PortableError, KeyError, ValueError, OSError, zipfile.BadZipFile):
        return False
    return isinstance(data, dict) and data.get("format") == FORMAT


def import_agent(
    items: Items,
    objects: Objects,
    path: Path,
    agent_id: str | None = None,
    *,
    replace: bool = False,
    progress: Progress | None = None,
    add_to_config: bool = True,
    now: float | None = None,
) -> AgentImportReport:
    """Write the agent archive `path` into `items` and `objects` as agent `agent_id` (default: the archive's own
    id). Everything is checked before anything is written (module docstring)."""
    report_progress = progress or no_progress
    with open_archive(Path(path)) as zf:
        manifest, archived = _read_archive(zf, report_progress)
        target = check_agent_id(agent_id) if agent_id is not None else manifest.agent_id

        def member(entry: ObjectEntry) -> Callable[[], bytes]:
            return lambda: b"".join(read_member(zf, entry.file))

        payload = _Payload(
            agent_id=manifest.agent_id,
            items=archived,
            objects=[(entry, member(entry)) for entry in manifest.objects],
            agent_config=manifest.agent_config,
            expects=manifest.expects,
        )
        return _apply(
            items,
            objects,
            payload,
            target,
            replace=replace,
            add_to_config=add_to_config,
            progress=report_progress,
            now=time.time() if now is None else now,
        )


def copy_agent(
    items: Items,
    objects: Objects,
    source_id: str,
    target_id: str,
    *,
    replace: bool = False,
    add_to_config: bool = True,
    progress: Progress | None = None,
    now: float | None = None,
) -> AgentImportReport:
    """Copy agent `source_id` to `target_id` inside one store: what `export_agent` then `import_agent` would do,
    without a file. AgentNotFoundError for an unknown source; AgentExistsError for an existing target unless
    `replace`; PortableError when both are the same."""
    source = check_agent_id(source_id)
    target = check_agent_id(target_id)
    if source == target:
        raise PortableError("an agent cannot be copied onto itself")
    cutoff = time.time() if now is None else now
    selection = _select(items, objects, source, cutoff)
    entry = share.entry_of(selection.config, source)
    if not selection.items and not selection.object_keys and entry is None:
        raise AgentNotFoundError(f"no agent {source!r} here")
    read: list[tuple[ObjectEntry, Callable[[], bytes]]] = []
    for key in selection.object_keys:
        opened = objects.read(key)
        if opened is None:
            continue  # deleted since the listing
        stream, stored = opened
        try:
            body = stream.read()
        finally:
            stream.close()
        described = ObjectEntry(
            key=key,
            file="",
            size=len(body),
            sha256=hashlib.sha256(body).hexdigest(),
            headers=dict(stored.headers),
            metadata=dict(stored.metadata),
        )
        read.append((described, _constant(body)))
    bindings = share.bindings_of(selection.config, source)
    payload = _Payload(
        agent_id=source,
        items=selection.items,
        objects=read,
        agent_config=share.clean_entry(entry),
        expects=share.expects_of(selection.config, source, bindings),
    )
    return _apply(
        items,
        objects,
        payload,
        target,
        replace=replace,
        add_to_config=add_to_config,
        progress=progress or no_progress,
        now=cutoff,
    )


def _constant(body: bytes) -> Callable[[], bytes]:
    return lambda: body
