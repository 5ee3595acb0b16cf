"""One agent's archive on stores in memory: what belongs to an agent and what never goes (secrets, other agents,
live state), the id and job ids rewritten, existing ids refused or replaced, and hostile archives refused before
anything is written."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.store import agent_archive as aa
from orbital.store import agent_share, keys, portable
from orbital.store.portable import Items, Key, ObjectEntry, Objects, StoredObject
from orbital.store.workspace import ByteStream

SECRET = "sk-agent-secret-0042"
BOT_TOKEN = "123456:bot-token-secret"
MCP_HEADER = "Bearer mcp-header-secret"
GRANT = "oauth-refresh-secret"
FUTURE = 4_000_000_000
JOB = "11111111-2222-4333-8444-555555555555"
OTHER_JOB = "99999999-2222-4333-8444-555555555555"
SID = "5e551011-0000-4000-8000-000000000001"


# --- stores in memory -------------------------------------------------------------------------------------------------


class MemItems(Items):
    def __init__(self) -> None:
        self.name = "mem"
        self.items: dict[Key, dict[str, Any]] = {}
        self.writes = 0

    def scan(self) -> Iterator[dict[str, Any]]:
        return iter([copy.deepcopy(i) for i in self.items.values()])

    def get_many(self, wanted: list[Key]) -> dict[Key, dict[str, Any]]:
        return {k: copy.deepcopy(self.items[k]) for k in wanted if k in self.items}

    def put_many(self, items: list[dict[str, Any]]) -> None:
        self.writes += 1
        for item in items:
            self.items[portable.item_key(item)] = copy.deepcopy(item)

    def put_counter(self, item: dict[str, Any]) -> bool:
        self.put_many([item])
        return True

    def delete_many(self, keys: list[Key]) -> None:
        self.writes += 1
        for key in keys:
            self.items.pop(key, None)


class MemObjects(Objects):
    def __init__(self) -> None:
        self.name = "mem-bucket"
        self.objects: dict[str, tuple[bytes, dict[str, str], dict[str, str]]] = {}
        self.writes = 0

    def list_keys(self) -> Iterator[str]:
        return iter(sorted(self.objects))

    def read(self, key: str) -> tuple[ByteStream, StoredObject] | None:
        if key not in self.objects:
            return None
        body, headers, metadata = self.objects[key]
        return io.BytesIO(body), StoredObject(len(body), dict(headers), dict(metadata))

    def head(self, key: str) -> StoredObject | None:
        opened = self.read(key)
        return None if opened is None else opened[1]

    def write(self, key: str, body: bytes, entry: ObjectEntry) -> None:
        self.writes += 1
        self.objects[key] = (body, dict(entry.headers), dict(entry.metadata))

    def delete(self, key: str) -> None:
        self.writes += 1
        self.objects.pop(key, None)


def _item(key: tuple[str, str], data: Any = None, **attrs: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"PK": {"S": key[0]}, "SK": {"S": key[1]}}
    if data is not None:
        item["d"] = {"S": json.dumps(data, separators=(",", ":"), ensure_ascii=False)}
    item.update(attrs)
    return item


CONFIG: dict[str, Any] = {
    "apiKeys": {"anthropic": SECRET},
    "channels": {"telegram": {"botToken": BOT_TOKEN}, "discord": {"botToken": "discord-secret"}},
    "mcp": {"servers": {"files": {"url": "https://mcp.example", "headers": {"Authorization": MCP_HEADER}}}},
    "agents": {
        "list": [
            {"id": "main", "default": True},
            {"id": "helper", "heartbeat": {"every": "30m"}, "spend": {"limits": {"daily": 2}}},
        ],
        "bindings": [
            {"agentId": "helper", "match": {"channel": "telegram", "peer": {"kind": "dm", "id": "42"}}},
            {"agentId": "main", "match": {"channel": "discord"}},
        ],
    },
}


def _store() -> tuple[MemItems, MemObjects]:
    """Agent `helper` with everything an agent has, beside `main`, `helper2` and the gateway's own state."""
    items, objects = MemItems(), MemObjects()
    key = "agent:helper:main"
    cron_key = f"agent:helper:cron:{JOB}:run-1"
    rows = [
        _item(keys.CONFIG, CONFIG, v={"N": "4"}),
        _item(keys.session_meta(key), {"sessionId": SID, "sessionKey": key}, v={"N": "2"}),
        _item(
            keys.message(key, SID, 0),
            {"role": "user", "content": [{"type": "text", "text": "hello agent:helper:main"}]},
        ),
        _item(keys.message(key, SID, 1), {"$body": keys.message_body(key, SID, 1), "role": "user"}),
        _item(keys.session_input(key, "in-1"), {"text": "queued"}, ttl={"N": str(FUTURE)}),
        _item(keys.approval_history(key, 5, "ap-1"), {"decision": "allow"}),
        _item(keys.session_registry(key), {"sessionKey": key, "label": "Main"}),
        _item(keys.session_meta(cron_key), {"sessionId": "s-cron", "sessionKey": cron_key}),
        _item(keys.session_registry(cron_key), {"sessionKey": cron_key}),
        _item(keys.heartbeat("helper"), {"agentId": "helper", "lastRunAt": 1}, v={"N": "1"}),
        _item(keys.last_active("helper"), {"agentId": "helper", "channel": "telegram"}),
        _item(
            keys.cron_job(JOB),
            {"id": JOB, "agentId": "helper", "name": "daily", "spec": {"sessionKey": key}},
            v={"N": "1"},
            GSI1PK={"S": keys.CRON_DUE_GSI_PK},
            GSI1SK={"S": keys.cron_due(1_800_000_000_000, JOB)[1]},
        ),
        _item(
            keys.cron_run(JOB, 1_700_000_000_000, 7),
            {"jobId": JOB, "sessionKey": cron_key, "status": "ok"},
            GSI1PK={"S": keys.CRON_RUNS_GSI_PK},
            GSI1SK={"S": keys.cron_run_index(1_700_000_000_000, 7)[1]},
        ),
        _item(keys.cron_active(JOB, "run-2"), {"jobId": JOB}),  # in flight: never goes
    ]
    rows += [
        _item(keys.spend_counter("daily", "2026-11-28", "agent:helper"), None, u={"N": "1500"}),
        _item(keys.spend_counter("session", SID, f"session:{key}"), None, u={"N": "700"}),
        _item(keys.spend_counter("daily", "2026-11-28", f"cron:{JOB}"), None, u={"N": "300"}),
        _item(keys.spend_notice(key, "daily:2026-11-28"), {"at": 1}, ttl={"N": str(FUTURE)}),
        _item(keys.workspace_seeded_flag("helper"), {"at": 1}),
        # expired: never goes
        _item(keys.session_input(key, "in-0"), {"text": "old"}, ttl={"N": "1000"}),
        # other agents: never go
        _item(keys.session_meta("agent:main:main"), {"sessionId": "m1", "sessionKey": "agent:main:main"}),
        _item(keys.session_meta("agent:helper2:main"), {"sessionId": "h2"}),
        _item(keys.session_registry("agent:helper2:main"), {"sessionKey": "agent:helper2:main"}),
        _item(keys.heartbeat("main"), {"agentId": "main"}),
        _item(keys.cron_job(OTHER_JOB), {"id": OTHER_JOB, "agentId": "main"}),
        _item(keys.cron_run(OTHER_JOB, 1, 1), {"jobId": OTHER_JOB}),
        _item(keys.spend_counter("daily", "2026-11-28", "agent:main"), None, u={"N": "9"}),
        _item(keys.spend_counter("daily", "2026-11-28", "global"), None, u={"N": "99"}),
        # the gateway's own (secrets among them): never go
        _item(keys.mcp_auth("files"), {"refreshToken": GRANT}),
        _item(keys.device("tok-1"), {"hash": "device-hash-secret"}),
        _item(keys.pair("telegram", "42"), {"channel": "telegram"}),
        _item(keys.token_usage("2026-11"), {"m": 1}),
        _item(keys.counter("transfer"), None, n={"N": "3"}),
        # live state of the agent's session: never goes
        _item(keys.client_alias("cli-1", key), {"x": 1}, ttl={"N": str(FUTURE)}),
    ]
    for row in rows:
        items.items[portable.item_key(row)] = row
    md = {"ContentType": "text/markdown"}
    objects.objects.update(
        {
            "agents/helper/MEMORY.md": (b"# Memory\n- tea\n", md, {}),
            "agents/helper/IDENTITY.md": (b"I am helper\n", md, {"origin": "seed"}),
            "agents/helper/skills/weather/SKILL.md": (b"---\nname: weather\n---\n", md, {}),
            f"agents/helper/sessions/{SID}.jsonl.gz": (b"\x1f\x8barchived", {"ContentType": "application/gzip"}, {}),
            keys.message_body(key, SID, 1): (
                b'{"role":"user","content":"big"}',
                {"ContentType": "application/json"},
                {},
            ),
            "agents/main/MEMORY.md": (b"# main's memory\n", md, {}),
            "agents/helper2/MEMORY.md": (b"# helper2\n", md, {}),
            "media/agent:helper2:main/x.png": (b"png", {"ContentType": "image/png"}, {}),
            "skills/weather/SKILL.md": (b"global skill\n", md, {}),
            "runs/exec-1/plan.json": (b"{}", {}, {}),
        }
    )
    return items, objects


def _archive(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, bytes]]:
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        lines = [json.loads(line) for line in zf.read("items.jsonl").decode().splitlines() if line]
        bodies = {o["key"]: zf.read(o["file"]) for o in manifest["objects"]}
    return manifest, lines, bodies


@pytest.fixture
def exported(tmp_path: Path) -> Path:
    items, objects = _store()
    out = tmp_path / "helper.zip"
    aa.export_agent(items, objects, "helper", out, now=2000.0)
    return out


# --- export -----------------------------------------------------------------------------------------------------------


def test_the_archive_holds_the_agent_and_nothing_else(exported: Path) -> None:
    manifest, lines, bodies = _archive(exported)
    got = {(i["PK"]["S"], i["SK"]["S"]) for i in lines}
    key, cron_key = "agent:helper:main", f"agent:helper:cron:{JOB}:run-1"
    assert got == {
        keys.session_meta(key),
        keys.message(key, SID, 0),
        keys.message(key, SID, 1),
        keys.session_input(key, "in-1"),
        keys.approval_history(key, 5, "ap-1"),
        keys.session_registry(key),
        keys.session_meta(cron_key),
        keys.session_registry(cron_key),
        keys.heartbeat("helper"),
        keys.last_active("helper"),
        keys.cron_job(JOB),
        keys.cron_run(JOB, 1_700_000_000_000, 7),
        keys.spend_counter("daily", "2026-11-28", "agent:helper"),
        keys.spend_counter("session", SID, f"session:{key}"),
        keys.spend_counter("daily", "2026-11-28", f"cron:{JOB}"),
        keys.spend_notice(key, "daily:2026-11-28"),
        keys.workspace_seeded_flag("helper"),
    }
    assert set(bodies) == {
        "agents/helper/MEMORY.md",
        "agents/helper/IDENTITY.md",
        "agents/helper/skills/weather/SKILL.md",
        f"agents/helper/sessions/{SID}.jsonl.gz",
        keys.message_body(key, SID, 1),
    }
    assert bodies["agents/helper/MEMORY.md"] == b"# Memory\n- tea\n"
    assert manifest["format"] == "orbital-agent" and manifest["version"] == 1 and manifest["agentId"] == "helper"
    assert manifest["counts"]["items"]["session"] == 2 and manifest["counts"]["items"]["cron-job"] == 1
    assert manifest["skipped"]["items"] == {"client-alias": 1, "expired": 1}
    assert manifest["config"]["agent"] == {"heartbeat": {"every": "30m"}, "spend": {"limits": {"daily": 2}}}
    assert exported.stat().st_mode & 0o777 == 0o600


def test_no_secret_is_in_the_archive_and_the_ones_expected_are_named(exported: Path) -> None:
    raw = exported.read_bytes()
    with zipfile.ZipFile(exported) as zf:
        unpacked = b"".join(zf.read(n) for n in zf.namelist())
    for secret in (SECRET, BOT_TOKEN, MCP_HEADER, GRANT, "discord-secret", "device-hash-secret"):
        assert secret.encode() not in raw and secret.encode() not in unpacked
    manifest, _, _ = _archive(exported)
    # the keys and headers it used, and the token of the channel it is bound to (not discord: main's)
    assert manifest["expects"]["secrets"] == [
        "apiKeys.anthropic",
        "channels.telegram.botToken",
        "mcp.servers.files.headers.Authorization",
    ]
    assert manifest["expects"]["bindings"] == [
        {"agentId": "helper", "match": {"channel": "telegram", "peer": {"kind": "dm", "id": "42"}}}
    ]


def test_an_unknown_agent_is_not_exported(tmp_path: Path) -> None:
    items, objects = _store()
    with pytest.raises(aa.AgentNotFoundError):
        aa.export_agent(items, objects, "nobody", tmp_path / "x.zip")
    assert not (tmp_path / "x.zip").exists()
    with pytest.raises(portable.PortableError, match="invalid agent id"):
        aa.export_agent(items, objects, "../main", tmp_path / "x.zip")


def test_agent_ids_and_existence() -> None:
    items, objects = _store()
    assert aa.agent_ids(items, objects) == ["helper", "helper2", "main"]
    assert aa.agent_exists(items, objects, "helper2")
    assert not aa.agent_exists(items, objects, "help")
    assert not aa.agent_exists(items, objects, "helper3")


# --- import -----------------------------------------------------------------------------------------------------------


def _snapshot(items: MemItems, objects: MemObjects) -> tuple[dict[Key, Any], dict[str, Any]]:
    return copy.deepcopy(items.items), copy.deepcopy(objects.objects)


def test_import_under_a_new_id_rewrites_the_id_everywhere(exported: Path) -> None:
    items, objects = _store()
    before_items, before_objects = _snapshot(items, objects)
    report = aa.import_agent(items, objects, exported, "twin")
    new_job = report.job_ids[JOB]
    assert new_job != JOB and report.sessions == 2 and report.cron_jobs == 1 and report.objects == 5
    key, cron_key = "agent:twin:main", f"agent:twin:cron:{new_job}:run-1"
    meta = json.loads(items.items[keys.session_meta(key)]["d"]["S"])
    assert meta == {"sessionId": SID, "sessionKey": key}
    text = json.loads(items.items[keys.message(key, SID, 0)]["d"]["S"])
    assert text["content"][0]["text"] == "hello agent:helper:main"  # prose stays as written
    body_ref = json.loads(items.items[keys.message(key, SID, 1)]["d"]["S"])
    assert body_ref["$body"] == keys.message_body(key, SID, 1)
    assert objects.objects[keys.message_body(key, SID, 1)][0] == b'{"role":"user","content":"big"}'
    assert json.loads(items.items[keys.heartbeat("twin")]["d"]["S"])["agentId"] == "twin"
    assert json.loads(items.items[keys.last_active("twin")]["d"]["S"])["agentId"] == "twin"
    job = items.items[keys.cron_job(new_job)]
    assert json.loads(job["d"]["S"]) == {"id": new_job, "agentId": "twin", "name": "daily", "spec": {"sessionKey": key}}
    assert job["GSI1SK"]["S"] == keys.cron_due(1_800_000_000_000, new_job)[1]
    run = items.items[keys.cron_run(new_job, 1_700_000_000_000, 7)]
    assert json.loads(run["d"]["S"]) == {"jobId": new_job, "sessionKey": cron_key, "status": "ok"}
    assert keys.session_meta(cron_key) in items.items and keys.session_registry(cron_key) in items.items
    assert items.items[keys.spend_counter("daily", "2026-11-28", "agent:twin")]["u"] == {"N": "1500"}
    assert keys.spend_counter("session", SID, f"session:{key}") in items.items
    assert keys.spend_counter("daily", "2026-11-28", f"cron:{new_job}") in items.items
    assert keys.spend_notice(key, "daily:2026-11-28") in items.items
    assert keys.workspace_seeded_flag("twin") in items.items
    assert objects.objects["agents/twin/MEMORY.md"][0] == b"# Memory\n- tea\n"
    assert objects.objects["agents/twin/IDENTITY.md"][2] == {"origin": "seed"}
    # nothing that was there changed, but the configuration, which lists twin (not as default, no bindings)
    config = json.loads(items.items[keys.CONFIG]["d"]["S"])
    assert config["agents"]["list"][-1] == {
        "id": "twin",
        "heartbeat": {"every": "30m"},
        "spend": {"limits": {"daily": 2}},
    }
    assert config["agents"]["bindings"] == CONFIG["agents"]["bindings"]
    assert config["apiKeys"] == {"anthropic": SECRET}
    assert items.items[keys.CONFIG]["v"] == {"N": "5"}
    for k, v in before_items.items():
        if k != keys.CONFIG:
            assert items.items[k] == v
    for name, body in before_objects.items():
        assert objects.objects[name] == body
    added = set(items.items) - set(before_items)
    assert len(added) == 17
    assert all(agent_share.belongs(pk, sk, "twin", {new_job}) for pk, sk in added)


def test_two_imports_under_two_ids_are_two_agents(exported: Path) -> None:
    items, objects = _store()
    one = aa.import_agent(items, objects, exported, "one")
    two = aa.import_agent(items, objects, exported, "two")
    assert one.job_ids[JOB] != two.job_ids[JOB]
    assert aa.agent_ids(items, objects) == ["helper", "helper2", "main", "one", "two"]
    jobs = [json.loads(i["d"]["S"]) for k, i in items.items.items() if k[0] == keys.CRON_PK]
    assert sorted(j["agentId"] for j in jobs) == ["helper", "main", "one", "two"]
    assert len({j["id"] for j in jobs}) == 4


def test_an_existing_id_is_refused_unless_replaced(exported: Path) -> None:
    items, objects = _store()
    before = _snapshot(items, objects)
    with pytest.raises(aa.AgentExistsError, match="'helper2' already exists"):
        aa.import_agent(items, objects, exported, "helper2")
    with pytest.raises(aa.AgentExistsError):
        aa.import_agent(items, objects, exported)  # under its own id: helper is there
    assert _snapshot(items, objects) == before

    report = aa.import_agent(items, objects, exported, "helper2", replace=True)
    assert (report.replaced_items, report.replaced_objects) == (2, 2)
    assert keys.session_meta("agent:helper2:main") in items.items  # the archive's session of the same key
    assert json.loads(items.items[keys.session_meta("agent:helper2:main")]["d"]["S"])["sessionId"] == SID
    assert "media/agent:helper2:main/x.png" not in objects.objects
    assert objects.objects["agents/helper2/MEMORY.md"][0] == b"# Memory\n- tea\n"
    # helper and main untouched
    for k, v in before[0].items():
        if k != keys.CONFIG and "helper2" not in k[0] + k[1]:
            assert items.items[k] == v
    assert objects.objects["agents/main/MEMORY.md"] == before[1]["agents/main/MEMORY.md"]
    assert objects.objects["agents/helper/MEMORY.md"] == before[1]["agents/helper/MEMORY.md"]


def test_replace_under_its_own_id_puts_the_archive_back(exported: Path) -> None:
    items, objects = _store()
    before = _snapshot(items, objects)
    objects.objects["agents/helper/MEMORY.md"] = (b"changed", {}, {})
    objects.objects["agents/helper/new.md"] = (b"added since", {}, {})
    items.items[keys.session_meta("agent:helper:later")] = _item(keys.session_meta("agent:helper:later"), {})
    report = aa.import_agent(items, objects, exported, replace=True)
    assert report.agent_id == "helper"
    assert objects.objects["agents/helper/MEMORY.md"] == before[1]["agents/helper/MEMORY.md"]
    assert "agents/helper/new.md" not in objects.objects
    assert keys.session_meta("agent:helper:later") not in items.items
    assert keys.session_meta("agent:main:main") in items.items


def test_copy_agent_does_the_same_without_a_file(tmp_path: Path) -> None:
    items, objects = _store()
    report = aa.copy_agent(items, objects, "helper", "twin")
    assert (report.sessions, report.cron_jobs, report.objects) == (2, 1, 5)
    assert objects.objects["agents/twin/MEMORY.md"][0] == b"# Memory\n- tea\n"
    with pytest.raises(aa.AgentExistsError):
        aa.copy_agent(items, objects, "helper", "twin")
    with pytest.raises(aa.AgentNotFoundError):
        aa.copy_agent(items, objects, "nobody", "twin2")
    with pytest.raises(portable.PortableError, match="onto itself"):
        aa.copy_agent(items, objects, "helper", "helper")
    with pytest.raises(portable.PortableError, match="invalid agent id"):
        aa.copy_agent(items, objects, "helper", "Bad/Id")
    # the same as an export and an import, but for the new job ids
    aa.export_agent(items, objects, "twin", tmp_path / "copied.zip")
    other_items, other_objects = _store()
    aa.import_agent(other_items, other_objects, tmp_path / "copied.zip", "twin")
    _, a, _ = _archive(tmp_path / "copied.zip")
    assert len(a) == 17


def test_the_configuration_can_be_left_to_the_caller(exported: Path) -> None:
    items, objects = _store()
    before = copy.deepcopy(items.items[keys.CONFIG])
    report = aa.import_agent(items, objects, exported, "twin", add_to_config=False)
    assert not report.config_added and items.items[keys.CONFIG] == before


def test_an_import_without_configuration_creates_it(exported: Path) -> None:
    items, objects = MemItems(), MemObjects()
    aa.import_agent(items, objects, exported, "twin")
    assert json.loads(items.items[keys.CONFIG]["d"]["S"]) == {
        "agents": {"list": [{"id": "twin", "heartbeat": {"every": "30m"}, "spend": {"limits": {"daily": 2}}}]}
    }
    assert items.items[keys.CONFIG]["v"] == {"N": "1"}


# --- hostile and damaged archives: refused before anything is written -------------------------------------------------


def _forge(
    path: Path,
    agent: str,
    items: list[dict[str, Any]],
    objects: dict[str, bytes],
    **manifest_changes: Any,
) -> Path:
    """An agent archive with correct checksums holding exactly `items` and `objects`."""
    lines = b"".join((json.dumps(portable.item_to_json(i), separators=(",", ":")) + "\n").encode() for i in items)
    entries = []
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("items.jsonl", lines)
        for n, (key, body) in enumerate(objects.items(), 1):
            name = f"objects/{n:08d}"
            zf.writestr(name, body)
            entries.append(
                {
                    "key": key,
                    "file": name,
                    "size": len(body),
                    "sha256": hashlib.sha256(body).hexdigest(),
                    "metadata": {},
                }
            )
        manifest = {
            "format": "orbital-agent",
            "version": 1,
            "agentId": agent,
            "createdAt": "2026-11-28T00:00:00Z",
            "items": {
                "file": "items.jsonl",
                "count": len(items),
                "size": len(lines),
                "sha256": hashlib.sha256(lines).hexdigest(),
            },
            "objects": entries,
            **manifest_changes,
        }
        zf.writestr("manifest.json", json.dumps(manifest))
    return path


GOOD = [_item(keys.session_meta("agent:evil:main"), {"sessionId": "e"})]
GOOD_OBJECTS = {"agents/evil/MEMORY.md": b"hi"}


@pytest.mark.parametrize(
    ("items", "objects", "message"),
    [
        ([_item(keys.session_meta("agent:main:main"), {"x": 1})], {}, "not agent 'evil'"),
        ([_item(keys.CONFIG, {"apiKeys": {"openai": "mine"}})], {}, "not agent 'evil'"),
        ([_item(keys.device("t"), {"hash": "x"})], {}, "not agent 'evil'"),
        ([_item(keys.heartbeat("main"), {})], {}, "not agent 'evil'"),
        ([_item(keys.cron_job(OTHER_JOB), {"id": OTHER_JOB, "agentId": "main"})], {}, "another agent"),
        ([_item(keys.cron_run(OTHER_JOB, 1, 1), {})], {}, "not agent 'evil'"),
        ([_item(keys.spend_counter("daily", "d", "global"), None)], {}, "not agent 'evil'"),
        ([_item(keys.connection("c1"), {})], {}, "not agent 'evil'"),
        ([_item(keys.client_alias("c", "agent:evil:main"), {})], {}, "not agent 'evil'"),
        (
            [_item(keys.session_meta("agent:evil:other"), {}, GSI1PK={"S": "CRONDUE"}, GSI1SK={"S": "0#x"})],
            {},
            "index key",
        ),
        ([], {"agents/main/MEMORY.md": b"overwritten"}, "not in the agent's workspace"),
        ([], {"agents/evil/../main/MEMORY.md": b"climb"}, "'..'"),
        ([], {"agents/evil//x": b"empty"}, "empty"),
        ([], {"skills/weather/SKILL.md": b"global"}, "not in the agent's workspace"),
        ([], {"media/agent:main:main/x": b"other media"}, "not in the agent's workspace"),
        ([], {"agents/evil/a\\..\\..\\main": b"x"}, "backslash"),
        ([], {"agents/evil/a\x00b": b"x"}, "control character"),
    ],
)
def test_a_hostile_archive_writes_nothing(
    tmp_path: Path, items: list[dict[str, Any]], objects: dict[str, bytes], message: str
) -> None:
    target_items, target_objects = _store()
    before = _snapshot(target_items, target_objects)
    archive = _forge(tmp_path / "evil.zip", "evil", [*GOOD, *items], {**GOOD_OBJECTS, **objects})
    for target_id in ("evil", "other"):
        with pytest.raises(aa.AgentArchiveError, match=message):
            aa.import_agent(target_items, target_objects, archive, target_id, replace=True)
    assert _snapshot(target_items, target_objects) == before
    assert target_items.writes == 0 and target_objects.writes == 0


def test_the_forged_archive_is_accepted_when_it_is_clean(tmp_path: Path) -> None:
    items, objects = MemItems(), MemObjects()
    report = aa.import_agent(items, objects, _forge(tmp_path / "ok.zip", "evil", GOOD, GOOD_OBJECTS), "fine")
    assert report.items == 1 and objects.objects["agents/fine/MEMORY.md"][0] == b"hi"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"agentId": "../main"}, "invalid agent id"),
        ({"agentId": "Main"}, "invalid agent id"),
        ({"format": "orbital-export"}, "whole gateway's export"),
        ({"format": "something"}, "not an Orbital agent archive"),
        ({"version": 2}, "newer Orbital"),
    ],
)
def test_a_foreign_manifest_is_refused(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    items, objects = MemItems(), MemObjects()
    archive = _forge(tmp_path / "x.zip", "evil", GOOD, GOOD_OBJECTS, **change)
    with pytest.raises(portable.ArchiveError, match=message):
        aa.import_agent(items, objects, archive, "fine")
    assert items.writes == 0 and objects.writes == 0


def test_damaged_members_are_refused(tmp_path: Path, exported: Path) -> None:
    items, objects = MemItems(), MemObjects()
    with zipfile.ZipFile(exported) as zin:
        members = {n: zin.read(n) for n in zin.namelist()}
    for name, damage in (("objects/00000001", b"other bytes"), ("items.jsonl", members["items.jsonl"] + b"\n{}")):
        bad = tmp_path / f"bad-{name.replace('/', '-')}.zip"
        with zipfile.ZipFile(bad, "w") as zout:
            for n, body in members.items():
                zout.writestr(n, damage if n == name else body)
        with pytest.raises(aa.AgentArchiveError, match="checksum"):
            aa.import_agent(items, objects, bad, "fine")
    assert items.writes == 0 and objects.writes == 0
    assert not aa.is_agent_archive(tmp_path / "missing.zip")
    assert aa.is_agent_archive(exported)


def test_an_invalid_target_id_is_refused(exported: Path) -> None:
    items, objects = MemItems(), MemObjects()
    for bad in ("", "Twin", "a/b", "-x", "x" * 65, "agent:main"):
        with pytest.raises(portable.PortableError, match="invalid agent id"):
            aa.import_agent(items, objects, exported, bad)
    assert items.writes == 0 and objects.writes == 0


# --- the rewrite ------------------------------------------------------------------------------------------------------


def test_the_rewrite_touches_ids_not_prose_nor_other_agents() -> None:
    rw = agent_share.Rewrite("main", "twin", {JOB: "new-job"})
    assert rw.text("agent:main:main") == "agent:twin:main"
    assert rw.text("SESSION#agent:main:telegram:dm:42") == "SESSION#agent:twin:telegram:dm:42"
    assert rw.text("agents/main/MEMORY.md") == "agents/twin/MEMORY.md"
    assert rw.text("media/agent:main:main/messages/s/1.json") == "media/agent:twin:main/messages/s/1.json"
    assert rw.text("session:agent:main:x") == "session:agent:twin:x"
    assert rw.text("agent:main") == "agent:twin"
    assert rw.text(f"agent:main:cron:{JOB}:r1") == "agent:twin:cron:new-job:r1"
    assert rw.text("agent:main2:main") == "agent:main2:main"
    assert rw.text("agents/mainly/x") == "agents/mainly/x"
    assert rw.text("myagent:main:x") == "myagent:main:x"
    assert rw.text("main") == "main"
    assert rw.text("see agent:main:main") == "see agent:main:main"
    assert rw.data({"agentId": "main", "name": "main", "list": ["agent:main:x"]}) == {
        "agentId": "twin",
        "name": "main",
        "list": ["agent:twin:x"],
    }
    assert rw.key(*keys.heartbeat("main")) == keys.heartbeat("twin")
    assert rw.key(*keys.workspace_seeded_flag("main")) == keys.workspace_seeded_flag("twin")
    same = agent_share.Rewrite("main", "main", {})
    item = _item(keys.session_meta("agent:main:main"), {"a": "agents/main/x"})
    assert same.item(item) == item
