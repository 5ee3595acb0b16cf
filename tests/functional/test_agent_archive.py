"""One agent moved on its own, end to end through `orbital export --agent` and `orbital import --agent`: from a local
data directory filled the way the gateway fills it (two agents, the gateway's secrets), into the same directory under
a new id, into DynamoDB and S3 under moto, and back. The round trip is exact: export, import under a new id, export
again gives the same items and objects with only the ids rewritten, compared item by item and object by object (on
the local runtime, on moto, and across the two). Nothing of another agent is touched; an id that exists is refused
unless `--replace`; two imports are two agents; no secret is in an archive."""

from __future__ import annotations

import json
import shutil
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from orbital.cli.main import main
from orbital.local.portable import TableItems, WorkspaceObjects
from orbital.local.server import local_state
from orbital.runtime.services import use_services
from orbital.store import agent_archive, keys, portable
from orbital.store.portable_aws import DynamoItems, S3Objects

from tests.conftest import Rpc
from tests.functional.test_portable import SECRET, _dump_aws, _dump_local, _populate, _saved_environ, _services

BOT_TOKEN = "4242:telegram-bot-secret"


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _populate_other(services: Any) -> None:
    """A second agent, `other`, with a binding and the channel token it uses, beside `main`."""
    admin = Rpc(services, "conn-admin-2")
    admin.call("connect", {"minProtocol": 1, "client": {"mode": "client", "id": "admin2"}})
    admin.call("config.set", {"path": "channels.telegram.botToken", "value": BOT_TOKEN})
    admin.call("config.set", {"path": "agents.list", "value": [{"id": "other", "heartbeat": {"every": "2h"}}]})
    admin.call(
        "config.set",
        {"path": "agents.bindings", "value": [{"agentId": "other", "match": {"channel": "telegram"}}]},
    )
    admin.call(
        "cron.add",
        {
            "name": "other's job",
            "agentId": "other",
            "schedule": {"kind": "every", "everyMs": 3_600_000},
            "spec": {"mode": "task", "message": "Check the garden."},
        },
    )
    services.workspace.put("agents/other/MEMORY.md", b"# Other\n- likes coffee\n", content_type="text/markdown")
    services.sessions.get_or_create_meta("agent:other:main")
    services.sessions.append_messages(
        "agent:other:main", [{"role": "user", "content": [{"type": "text", "text": "coffee please"}]}]
    )
    services.sessions.touch_registry("agent:other:main")
    services.heartbeats.put("other", {"lastRunAt": 1}, create=True)


@dataclass
class Source:
    data_dir: Path
    archive: Path
    """`main` exported with `orbital export --agent main`."""


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Source]:
    base = tmp_path_factory.mktemp("agent-archive")
    data_dir = base / "source"
    with _saved_environ():
        with local_state(data_dir) as store:
            services = _services(store)
            use_services(services)
            try:
                _populate(services)
                _populate_other(services)
            finally:
                use_services(None)
        archive = base / "main.zip"
        code = main(["export", "--agent", "main", "--data-dir", str(data_dir), str(archive)])
    assert code == 0
    yield Source(data_dir, archive)


# --- comparing archives: every item and object, with the ids renamed by the test's own rule ---------------------------


Content = tuple[dict[tuple[str, str], Any], dict[str, Any]]


def _content(archive: Path) -> tuple[dict[str, Any], Content]:
    """The manifest, every item (its `d` parsed) by key and every object's (bytes, headers, metadata) by key."""
    with zipfile.ZipFile(archive) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        items: dict[tuple[str, str], Any] = {}
        for line in zf.read("items.jsonl").decode().splitlines():
            item = json.loads(line)
            if "d" in item:
                item["d"] = json.loads(item["d"]["S"])
            items[(item["PK"]["S"], item["SK"]["S"])] = item
        objects = {
            o["key"]: (zf.read(o["file"]), {k: v for k, v in o.items() if k not in ("key", "file")})
            for o in manifest["objects"]
        }
    return manifest, (items, objects)


def _renamed(content: Content, old: str, new: str, jobs: dict[str, str]) -> Content:
    """`content` as it is expected under agent `new` and the new job ids: plain text replacement of the key forms."""

    def text(value: str) -> str:
        for a, b in (
            (f"agent:{old}:", f"agent:{new}:"),
            (f"agents/{old}/", f"agents/{new}/"),
            (f'"agentId": "{old}"', f'"agentId": "{new}"'),
            (f"seeded:{old}", f"seeded:{new}"),
            (f'"agent:{old}"', f'"agent:{new}"'),
        ):
            value = value.replace(a, b)
        for a, b in jobs.items():
            value = value.replace(a, b)
        return value

    items, objects = content
    out_items: dict[tuple[str, str], Any] = {}
    for (pk, sk), item in items.items():
        key = (text(pk), new if pk in (keys.HEARTBEAT_PK, keys.LAST_ACTIVE_PK) and sk == old else text(sk))
        out_items[key] = json.loads(text(json.dumps(item)))
        out_items[key]["PK"]["S"], out_items[key]["SK"]["S"] = key
    out_objects = {text(k): v for k, v in objects.items()}
    return out_items, out_objects


def _job_ids(content: Content) -> list[str]:
    return sorted(sk.removeprefix(keys.CRON_JOB_PREFIX) for pk, sk in content[0] if pk == keys.CRON_PK)


def _assert_same(got: Content, expected: Content) -> None:
    assert sorted(got[0]) == sorted(expected[0])
    for key, item in expected[0].items():
        assert got[0][key] == item, key
    assert sorted(got[1]) == sorted(expected[1])
    for name, obj in expected[1].items():
        assert got[1][name] == obj, name


# --- the archive ------------------------------------------------------------------------------------------------------


def test_the_archive_holds_main_alone_and_no_secret(source: Source) -> None:
    manifest, (items, objects) = _content(source.archive)
    assert manifest["agentId"] == "main" and manifest["format"] == "orbital-agent"
    assert source.archive.stat().st_mode & 0o777 == 0o600
    assert {pk for pk, _ in items} >= {"SESSION#agent:main:main", "SESSION#agent:main:work", "HEARTBEAT", "CRON"}
    assert not any("other" in pk or "other" in sk for pk, sk in items)
    assert keys.CONFIG not in items
    assert all(k.startswith(("agents/main/", "media/agent:main:")) for k in objects)
    assert "agents/main/MEMORY.md" in objects
    assert len(_job_ids((items, objects))) == 1
    raw = source.archive.read_bytes()
    with zipfile.ZipFile(source.archive) as zf:
        unpacked = b"".join(zf.read(n) for n in zf.namelist())
    for secret in (SECRET, BOT_TOKEN):
        assert secret.encode() not in raw and secret.encode() not in unpacked
    # main is the default agent: it expects the API key and the channel token where it goes
    assert manifest["expects"]["secrets"] == ["apiKeys.openai", "channels.telegram.botToken"]


def test_the_other_agent_names_its_binding_and_its_token(source: Source, tmp_path: Path) -> None:
    with local_state(source.data_dir, exclusive=False) as store:
        manifest = agent_archive.export_agent(
            TableItems(store.table), WorkspaceObjects(store.workspace), "other", tmp_path / "other.zip"
        )
    assert manifest.expects == {
        "secrets": ["apiKeys.openai", "channels.telegram.botToken"],
        "bindings": [{"agentId": "other", "match": {"channel": "telegram"}}],
    }
    assert manifest.agent_config == {"heartbeat": {"every": "2h"}}
    assert BOT_TOKEN.encode() not in (tmp_path / "other.zip").read_bytes()


# --- the local runtime ------------------------------------------------------------------------------------------------


def test_local_round_trip_under_a_new_id_is_exact_and_touches_no_other_agent(
    source: Source, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(source.data_dir, data_dir)
    before_items, before_objects = _dump_local(data_dir)

    code, out, err = _cli(capsys, "import", str(source.archive), "--agent", "twin", "--data-dir", str(data_dir))
    assert code == 0, err
    assert "Imported agent main as twin" in out and "2 sessions, 1 cron jobs" in out
    assert "apiKeys.openai" in out and SECRET not in out

    after_items, after_objects = _dump_local(data_dir)
    changed = {k for k in before_items if after_items.get(k) != before_items[k]}
    assert changed == {keys.CONFIG}  # twin joined agents.list; nothing else that was there changed
    config = json.loads(after_items[keys.CONFIG]["d"]["S"])
    assert [e["id"] for e in config["agents"]["list"]] == ["other", "twin"]
    assert config["agents"]["bindings"] == [{"agentId": "other", "match": {"channel": "telegram"}}]
    assert all(after_objects[k] == v for k, v in before_objects.items())

    second = tmp_path / "twin.zip"
    code, out, err = _cli(capsys, "export", "--agent", "twin", "--data-dir", str(data_dir), "--out", str(second))
    assert code == 0, err
    _, first_content = _content(source.archive)
    _, second_content = _content(second)
    (old_job,), (new_job,) = _job_ids(first_content), _job_ids(second_content)
    assert old_job != new_job
    _assert_same(second_content, _renamed(first_content, "main", "twin", {old_job: new_job}))


def test_an_existing_id_is_refused_unless_replaced(
    source: Source, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(source.data_dir, data_dir)
    before = _dump_local(data_dir)
    for target in ([], ["--agent", "other"]):  # main is there, and so is other
        code, out, err = _cli(capsys, "import", str(source.archive), *target, "--data-dir", str(data_dir))
        assert code == 1 and "already exists here (replace it with --replace)" in err
    assert _dump_local(data_dir) == before

    code, out, err = _cli(
        capsys, "import", str(source.archive), "--agent", "other", "--replace", "--data-dir", str(data_dir)
    )
    assert code == 0, err
    assert "replaced" in out
    items, objects = _dump_local(data_dir)
    assert objects["agents/other/MEMORY.md"][0] == before[1]["agents/main/MEMORY.md"][0]
    assert keys.session_meta("agent:other:work") in items  # main's sessions, now other's
    # other's own job is gone with it, main untouched
    jobs = [json.loads(i["d"]["S"]) for (pk, _), i in items.items() if pk == keys.CRON_PK]
    assert sorted(j["agentId"] for j in jobs) == ["main", "other"]
    assert not any(j["name"] == "other's job" for j in jobs)
    for key, item in before[0].items():
        if (
            key != keys.CONFIG
            and "other" not in key[0] + key[1]
            and keys.item_kind(*key) not in ("cron-job", "cron-run")
        ):
            assert items[key] == item, key
    for key, obj in before[1].items():
        if not key.startswith(("agents/other/", "media/agent:other:")):
            assert objects[key] == obj


def test_a_whole_export_is_not_an_agent_archive(
    source: Source, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = tmp_path / "whole.zip"
    assert main(["export", "--data-dir", str(source.data_dir), "--out", str(whole)]) == 0
    capsys.readouterr()
    code, _, err = _cli(capsys, "import", str(whole), "--agent", "twin", "--data-dir", str(tmp_path / "d"))
    assert code == 1 and "is not one agent's archive" in err
    assert not (tmp_path / "d").exists()
    code, _, err = _cli(
        capsys, "export", "--agent", "nobody", "--data-dir", str(source.data_dir), str(tmp_path / "n.zip")
    )
    assert code == 1 and "no agent 'nobody' here" in err
    code, _, err = _cli(
        capsys, "export", "--agent", "Bad/Id", "--data-dir", str(source.data_dir), str(tmp_path / "n.zip")
    )
    assert code == 1 and "invalid agent id" in err
    assert not (tmp_path / "n.zip").exists()


# --- AWS (moto) and across --------------------------------------------------------------------------------------------


def _bucket(name: str) -> tuple[Any, Any]:
    from tests.functional.test_portable import _table_kwargs

    ddb, s3 = boto3.client("dynamodb"), boto3.client("s3")
    ddb.create_table(TableName=name, **_table_kwargs())
    s3.create_bucket(Bucket=f"{name}-workspace")
    return ddb, s3


def test_round_trip_on_aws_and_across_the_two(
    source: Source, aws: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ddb, s3 = _bucket("orbital-agents")
    target = ["--table", "orbital-agents", "--bucket", "orbital-agents-workspace"]
    code, out, err = _cli(capsys, "import", str(source.archive), "--agent", "twin", *target, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["agentId"] == "twin" and report["sessions"] == 2 and report["cronJobs"] == 1

    on_aws = tmp_path / "twin-aws.zip"
    code, _, err = _cli(capsys, "export", "--agent", "twin", *target, str(on_aws))
    assert code == 0, err
    _, first = _content(source.archive)
    _, second = _content(on_aws)
    (old_job,), (new_job,) = _job_ids(first), _job_ids(second)
    _assert_same(second, _renamed(first, "main", "twin", {old_job: new_job}))
    # the cron job is found by its due time on the index, as the scheduler looks for it
    due = ddb.query(
        TableName="orbital-agents",
        IndexName="GSI1",
        KeyConditionExpression="GSI1PK = :pk",
        ExpressionAttributeValues={":pk": {"S": keys.CRON_DUE_GSI_PK}},
    )["Items"]
    assert [portable.item_key(i) for i in due] == [keys.cron_job(new_job)]

    # across: what AWS exported comes back into a local data directory under its first name
    data_dir = tmp_path / "back"
    code, _, err = _cli(capsys, "import", str(on_aws), "--agent", "main", "--data-dir", str(data_dir))
    assert code == 0, err
    back = tmp_path / "back.zip"
    code, _, err = _cli(capsys, "export", "--agent", "main", "--data-dir", str(data_dir), str(back))
    assert code == 0, err
    _, third = _content(back)
    (back_job,) = _job_ids(third)
    _assert_same(third, _renamed(first, "main", "main", {old_job: back_job}))
    items, _ = _dump_aws(ddb, s3, "orbital-agents", "orbital-agents-workspace")
    assert SECRET not in json.dumps([portable.item_to_json(i) for i in items.values()])


def test_two_imports_under_two_ids_are_two_independent_agents(source: Source, aws: None) -> None:
    ddb, s3 = _bucket("orbital-two")
    items, objects = DynamoItems(ddb, "orbital-two"), S3Objects(s3, "orbital-two-workspace")
    one = agent_archive.import_agent(items, objects, source.archive, "one")
    two = agent_archive.import_agent(items, objects, source.archive, "two")
    assert agent_archive.agent_ids(items, objects) == ["one", "two"]
    old_job = next(iter(one.job_ids))
    assert one.job_ids[old_job] != two.job_ids[old_job]
    # a change to one is not seen by the other
    s3.put_object(Bucket="orbital-two-workspace", Key="agents/one/MEMORY.md", Body=b"# changed\n")
    ddb.delete_item(TableName="orbital-two", Key={"PK": {"S": "CRON"}, "SK": {"S": f"JOB#{one.job_ids[old_job]}"}})
    got = s3.get_object(Bucket="orbital-two-workspace", Key="agents/two/MEMORY.md")["Body"].read()
    assert got == b"# Memory\n\n- likes tea\n"
    job = ddb.get_item(TableName="orbital-two", Key={"PK": {"S": "CRON"}, "SK": {"S": f"JOB#{two.job_ids[old_job]}"}})
    assert json.loads(job["Item"]["d"]["S"])["agentId"] == "two"
    config = ddb.get_item(TableName="orbital-two", Key={"PK": {"S": "CONFIG"}, "SK": {"S": "OVERRIDES"}})["Item"]
    assert [e["id"] for e in json.loads(config["d"]["S"])["agents"]["list"]] == ["one", "two"]


def test_copy_inside_a_stack(source: Source, aws: None) -> None:
    ddb, s3 = _bucket("orbital-copy")
    items, objects = DynamoItems(ddb, "orbital-copy"), S3Objects(s3, "orbital-copy-workspace")
    agent_archive.import_agent(items, objects, source.archive)
    report = agent_archive.copy_agent(items, objects, "main", "twin")
    assert (report.sessions, report.cron_jobs) == (2, 1)
    with pytest.raises(agent_archive.AgentExistsError):
        agent_archive.copy_agent(items, objects, "main", "twin")
    again = agent_archive.copy_agent(items, objects, "main", "twin", replace=True)
    assert again.replaced_items == report.items and again.replaced_objects == report.objects
    assert agent_archive.agent_ids(items, objects) == ["main", "twin"]


def test_an_agent_archive_imports_under_its_own_id_without_agent(
    source: Source, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "fresh"
    code, out, err = _cli(capsys, "import", str(source.archive), "--data-dir", str(data_dir), "--json")
    assert code == 0, err
    assert json.loads(out)["agentId"] == "main"
    items, objects = _dump_local(data_dir)
    assert keys.session_meta("agent:main:main") in items and "agents/main/MEMORY.md" in objects
    assert keys.CONFIG not in items  # main, the default agent, needs no entry of its own
    code, _, err = _cli(capsys, "export", "--agent", "main", "--data-dir", str(data_dir), "--out", "a.zip", "b.zip")
    assert code == 1 and "not both" in err


def test_a_hostile_archive_is_refused_before_any_write(
    source: Source, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.unit.test_agent_archive import GOOD, GOOD_OBJECTS, _forge, _item

    data_dir = tmp_path / "data"
    shutil.copytree(source.data_dir, data_dir)
    before = _dump_local(data_dir)
    cases = {
        "config.zip": ([*GOOD, _item(keys.CONFIG, {"apiKeys": {"openai": "attacker"}})], GOOD_OBJECTS),
        "other.zip": ([*GOOD, _item(keys.session_meta("agent:main:main"), {"x": 1})], GOOD_OBJECTS),
        "climb.zip": (GOOD, {**GOOD_OBJECTS, "agents/evil/../main/MEMORY.md": b"overwritten"}),
    }
    for name, (items, objects) in cases.items():
        archive = _forge(tmp_path / name, "evil", items, objects)
        for agent in ([], ["--agent", "main", "--replace"]):
            code, _, err = _cli(capsys, "import", str(archive), *agent, "--data-dir", str(data_dir))
            assert code == 1 and ("is refused" in err or "not agent 'evil'" in err), err
    assert _dump_local(data_dir) == before
