"""Export and import end to end, both ways. A local data directory filled the way the gateway fills it is exported
with `orbital export`, imported with `orbital import` into moto (explicit table and bucket, and a CloudFormation
stack's outputs) and into an empty data directory; what a stack holds is exported and imported into a data
directory; a running gateway's directory is exported beside it and never imported into. Every item and object
(with its headers and metadata) is compared with the source. Plus the logic on both kinds of target: attribute
types, expiry, live state, counters, throttling, idempotence, damaged archives, items a local table cannot keep."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import shutil
import time
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
from orbital.local.store import LocalStore
from orbital.store import keys, portable, portable_aws, portable_import
from orbital.store.portable_aws import DynamoItems, S3Objects

from tests.conftest import BUCKET, NODE_RUNTIME, NODE_TOOLS, ROOT, TABLE, FakeSender, Rpc, reset_caches

FUTURE = int(time.time()) + 30 * 86400
PAST = int(time.time()) - 3600
SECRET = "sk-portable-secret-123"
BINARY = bytes(range(256)) * 40
LARGE_TEXT = "x" * (310 * 1024)  # above the inline message limit: its body is stored in the workspace
S3_HEADERS = ("ContentType", "ContentEncoding", "ContentDisposition", "ContentLanguage", "CacheControl")


# --- helpers ------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _saved_environ() -> Iterator[None]:
    """An in-process gateway configures this process's environment: put it back afterwards."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        reset_caches()


Dump = tuple[dict[Any, Any], dict[str, Any]]
"""Every item by key; every object by key as (bytes, metadata, content type, encoding, disposition, language,
cache control)."""


def _dump_aws(ddb: Any, s3: Any, table: str, bucket: str) -> Dump:
    items: dict[Any, Any] = {}
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        resp = ddb.scan(**kwargs)
        for item in resp["Items"]:
            items[portable.item_key(item)] = item
        if not resp.get("LastEvaluatedKey"):
            break
        kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
    objects: dict[str, Any] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for entry in page.get("Contents", []):
            got = s3.get_object(Bucket=bucket, Key=entry["Key"])
            objects[entry["Key"]] = (
                got["Body"].read(),
                got.get("Metadata") or {},
                *(got.get(header) for header in S3_HEADERS),
            )
    return items, objects


def _dump_local(data_dir: Path) -> Dump:
    """What a data directory holds, read as the gateway reads it (opened anew)."""
    with local_state(data_dir) as store:
        items = {portable.item_key(item): item for item in store.table.scan_items()}
        objects: dict[str, Any] = {}
        for listed in store.workspace.list_all(""):
            got = store.workspace.get(listed.key)
            assert got is not None
            body, info = got
            objects[listed.key] = (
                body,
                info.metadata or {},
                info.content_type,
                info.content_encoding,
                info.content_disposition,
                info.content_language,
                info.cache_control,
            )
    return items, objects


def _portable_part(items: dict[Any, Any], objects: dict[str, Any]) -> Dump:
    """What an export is expected to carry: no live state, nothing expired."""
    now = time.time()
    kept_items = {
        k: v
        for k, v in items.items()
        if keys.item_kind(*k) not in portable.LIVE_ITEM_KINDS and not portable.expired(v, now)
    }
    kept_objects = {k: v for k, v in objects.items() if keys.object_kind(k) not in portable.LIVE_OBJECT_KINDS}
    return kept_items, kept_objects


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _report(out: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(out)
    return data


def _table_kwargs() -> dict[str, Any]:
    from orbital.local.template import load_template, table_definition

    _, kwargs = table_definition(load_template(ROOT / "template.yaml"))
    return kwargs


def _services(store: LocalStore) -> Any:
    from orbital.runtime.services import build_services
    from orbital.settings import get_settings

    return build_services(get_settings(), sender=FakeSender(), table=store.table, workspace=store.workspace)


# --- a realistic local data directory -----------------------------------------------------------------------------


@dataclass
class Source:
    data_dir: Path
    archive: Path
    items: dict[Any, Any]
    """Every item in the source, live state and all."""
    objects: dict[str, Any]
    expected_items: dict[Any, Any]
    expected_objects: dict[str, Any]


def _populate(services: Any) -> None:
    """State written the way the gateway writes it: RPCs where there is one, the repositories otherwise."""
    admin = Rpc(services, "conn-admin")
    admin.call("connect", {"minProtocol": 1, "client": {"mode": "client", "id": "admin"}})  # connection + client
    admin.call("config.set", {"path": "model", "value": {"provider": "openai", "id": "gpt-4.1"}})
    admin.call("config.set", {"path": "apiKeys.openai", "value": SECRET})
    admin.call("config.set", {"path": "agents.defaultHeartbeat.every", "value": "45m"})
    job = admin.call(
        "cron.add",
        {
            "name": "new year",
            "schedule": {"kind": "cron", "expr": "0 8 1 1 *", "tz": "Europe/Amsterdam"},
            "spec": {"mode": "task", "message": "Plan the year."},
        },
    )
    job_id = job["job"]["id"]
    admin.call("workspace.write", {"path": "MEMORY.md", "content": "# Memory\n\n- likes tea\n"})
    admin.call("workspace.write", {"path": "notes/trip.md", "content": "Lisbon in May\n"})

    ws = services.workspace
    ws.put("agents/main/images/logo.png", BINARY, content_type="image/png", metadata={"origin": "upload"})
    ws.put(
        "agents/main/notes/log.txt.gz",
        gzip.compress(b"zipped notes\n" * 50),
        content_type="text/plain",
        content_encoding="gzip",
    )
    ws.put("skills/weather/SKILL.md", b"---\nname: weather\n---\nAsk the sky.\n", content_type="text/markdown")
    ws.put(
        "agents/main/exports/report.csv",
        b"a,b\n1,2\n",
        content_type="text/csv",
        metadata={"owner": "u-1"},
        content_disposition='attachment; filename="report.csv"',
        content_language="nl",
        cache_control="max-age=60",
    )
    # work in flight: never exported
    ws.put(keys.run_blob("exec-1", "plan-1.json"), b"{}", content_type="application/json")
    ws.put(keys.call_outcome_blob("call-1"), b'{"ok":true}', content_type="application/json")
    ws.put(keys.transfer_staging(7), b"partial upload")

    sessions = services.sessions
    main_key, work_key = "agent:main:main", "agent:main:work"
    sessions.get_or_create_meta(main_key)
    sessions.append_messages(
        main_key,
        [
            {"role": "user", "content": [{"type": "text", "text": "Remember that I like tea."}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Noted."}]},
        ],
    )
    sessions.touch_registry(main_key)
    sessions.get_or_create_meta(work_key)
    sessions.append_messages(work_key, [{"role": "user", "content": [{"type": "text", "text": "old"}]}])
    sessions.reset(work_key)  # archives the old messages to the workspace
    sessions.append_messages(work_key, [{"role": "user", "content": [{"type": "text", "text": LARGE_TEXT}]}])
    sessions.touch_registry(work_key, default_label="Work")

    services.pairs.put({"channel": "telegram", "senderId": "4242", "requestedAt": 1, "firstMessage": "hi"})
    services.heartbeats.put("main", {"lastRunAt": 1_700_000_000_000}, create=True)
    services.last_active.put(
        "main", {"channel": "telegram", "accountId": "default", "peer": {"kind": "dm", "id": "4242"}}
    )
    services.cron.append_run({"jobId": job_id, "ts": 1_700_000_000_000, "status": "ok", "durationMs": 12})

    table = services.table
    table.put(keys.inbound_seen("telegram", "default", "m-1"), {"at": 1}, ttl=FUTURE, attrs={"st": "done"})
    table.put(keys.inbound_seen("telegram", "default", "m-0"), {"at": 0}, ttl=PAST)  # expired
    table.put(keys.session_input(main_key, "input-1"), {"text": "queued"}, ttl=FUTURE)
    table.put(keys.channel_entry("telegram", "default"), {"channel": "telegram", "accountId": "default"})
    table.put(keys.counter("transfer"), {}, attrs={"n": 7})
    # live state: never exported
    table.put(keys.node("laptop"), {"tools": NODE_TOOLS, "runtime": NODE_RUNTIME}, ttl=FUTURE)
    table.put(keys.channel_socket("telegram", "default"), {"connectionId": "conn-x"}, ttl=FUTURE)
    table.put(keys.pending_call("call-1"), {"st": "pending"}, gsi=keys.node_calls_index("laptop", "call-1"))
    table.put(keys.probe("laptop", "probe-1"), {"state": "sent"})
    table.put(keys.probe_owner("probe-1"), {"nodeId": "laptop"}, ttl=FUTURE)
    table.put(keys.exec_session("laptop", "s1"), {"callId": "call-1"}, ttl=FUTURE)
    table.put(keys.transfer(7), {"state": "sending"})
    table.put(keys.wait_group("g1"), {}, attrs={"n": 1})


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Source]:
    from orbital.runtime.services import use_services

    base = tmp_path_factory.mktemp("portable")
    data_dir = base / "source"
    with _saved_environ():
        with local_state(data_dir) as store:
            services = _services(store)
            use_services(services)
            try:
                _populate(services)
            finally:
                use_services(None)
        items, objects = _dump_local(data_dir)
        archive = base / "export.zip"
        code = main(["export", "--data-dir", str(data_dir), "--out", str(archive)])
    assert code == 0
    expected_items, expected_objects = _portable_part(items, objects)
    yield Source(data_dir, archive, items, objects, expected_items, expected_objects)


# --- the local data directory, exported -------------------------------------------------------------------------------


def test_the_source_is_realistic(source: Source) -> None:
    kinds = {keys.item_kind(*k) for k in source.items}
    for kind in ("config", "session", "message", "session-registry", "pair", "cron-job", "cron-run", "heartbeat"):
        assert kind in kinds, kind
    for kind in ("connection", "client", "node", "pending-call", "transfer", "wait-group"):
        assert kind in kinds, kind
    object_kinds = {keys.object_kind(k) for k in source.objects}
    assert {"workspace", "session-archive", "skill", "media", "run-data", "call-outcome", "transfer"} <= object_kinds
    config = source.items[keys.CONFIG]
    assert SECRET in config["d"]["S"]  # stored as is; the export must carry it
    assert any(obj[3] == "gzip" for obj in source.objects.values())
    assert source.objects["agents/main/exports/report.csv"][4:] == (
        'attachment; filename="report.csv"',
        "nl",
        "max-age=60",
    )


def test_the_archive_is_private_and_complete(source: Source) -> None:
    assert (source.archive.stat().st_mode & 0o777) == 0o600
    manifest = portable.verify_archive(source.archive)
    assert manifest.source == {"table": "orbital-local", "bucket": "orbital-local-workspace"}
    assert manifest.items_count == len(source.expected_items)
    assert {o.key for o in manifest.objects} == set(source.expected_objects)
    for kind in portable.LIVE_ITEM_KINDS & {keys.item_kind(*k) for k in source.items}:
        assert manifest.skipped_items.get(kind), kind
    assert set(manifest.skipped_objects) == {"run-data", "call-outcome", "transfer"}
    with zipfile.ZipFile(source.archive) as zf:
        lines = [json.loads(line) for line in zf.read("items.jsonl").splitlines()]
        data = json.loads(zf.read("manifest.json"))
    exported = {(i["PK"]["S"], i["SK"]["S"]) for i in lines}
    assert keys.inbound_seen("telegram", "default", "m-0") not in exported  # expired
    assert keys.connection("conn-admin") not in exported
    assert keys.node("laptop") not in exported
    assert keys.inbound_seen("telegram", "default", "m-1") in exported
    # the headers are in the manifest, as an export from S3 writes them
    by_key = {o["key"]: o for o in data["objects"]}
    assert by_key["agents/main/exports/report.csv"] == {
        **{k: by_key["agents/main/exports/report.csv"][k] for k in ("key", "file", "size", "sha256")},
        "contentType": "text/csv",
        "contentDisposition": 'attachment; filename="report.csv"',
        "contentLanguage": "nl",
        "cacheControl": "max-age=60",
        "metadata": {"owner": "u-1"},
    }
    assert by_key["agents/main/notes/log.txt.gz"]["contentEncoding"] == "gzip"


def test_export_prints_no_secret(source: Source, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, "export", "--data-dir", str(source.data_dir), "--out", str(tmp_path / "a.zip"))
    assert code == 0, err
    assert "Exported" in out and "left out" in out and "keep it private" in out
    assert f"from the data directory {source.data_dir} to" in out
    assert SECRET not in out + err


# --- local → AWS (moto): explicit table and bucket, then a stack's outputs, and back ----------------------------------


def test_import_into_a_table_and_bucket(source: Source, aws: None, capsys: pytest.CaptureFixture[str]) -> None:
    ddb, s3 = boto3.client("dynamodb"), boto3.client("s3")
    ddb.create_table(TableName="orbital-target", **_table_kwargs())
    s3.create_bucket(Bucket="orbital-target-workspace")
    argv = ["import", str(source.archive), "--table", "orbital-target", "--bucket", "orbital-target-workspace"]
    code, out, err = _cli(capsys, *argv, "--json")
    assert code == 0, err
    first = _report(out)
    assert first["items"]["written"] == len(source.expected_items)
    assert first["objects"]["written"] == len(source.expected_objects)

    items, objects = _dump_aws(ddb, s3, "orbital-target", "orbital-target-workspace")
    assert items == source.expected_items
    assert objects == source.expected_objects
    # the index came along: the cron job is found by its due time, as the scheduler looks for it
    due = ddb.query(
        TableName="orbital-target",
        IndexName="GSI1",
        KeyConditionExpression="GSI1PK = :pk",
        ExpressionAttributeValues={":pk": {"S": keys.CRON_DUE_GSI_PK}},
    )["Items"]
    assert [keys.item_kind(*portable.item_key(i)) for i in due] == ["cron-job"]

    code, out, err = _cli(capsys, *argv, "--json")  # again: nothing to write
    assert code == 0, err
    second = _report(out)
    assert second["items"] == {"written": 0, "unchanged": len(source.expected_items), "kept": 0, "expired": 0}
    assert second["objects"] == {"written": 0, "unchanged": len(source.expected_objects)}
    code, out, err = _cli(capsys, *argv)  # the human summary says the same
    assert code == 0, err
    assert f"items  0 written, {len(source.expected_items)} unchanged" in out
    assert f"files  0 written, {len(source.expected_objects)} unchanged" in out


def test_import_and_export_by_stack_name_and_back_to_a_data_directory(
    source: Source, aws: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kwargs = _table_kwargs()
    template = {
        "Resources": {
            "StateTable": {
                "Type": "AWS::DynamoDB::Table",
                "Properties": {**kwargs, "TimeToLiveSpecification": {"AttributeName": "ttl", "Enabled": True}},
            },
            "WorkspaceBucket": {"Type": "AWS::S3::Bucket"},
        },
        "Outputs": {
            "StateTableName": {"Value": {"Ref": "StateTable"}},
            "WorkspaceBucketName": {"Value": {"Ref": "WorkspaceBucket"}},
        },
    }
    cfn = boto3.client("cloudformation")
    cfn.create_stack(StackName="orbital-prod", TemplateBody=json.dumps(template))
    outputs = {
        o["OutputKey"]: o["OutputValue"] for o in cfn.describe_stacks(StackName="orbital-prod")["Stacks"][0]["Outputs"]
    }
    table, bucket = outputs["StateTableName"], outputs["WorkspaceBucketName"]

    code, out, err = _cli(capsys, "import", str(source.archive), "--stack", "orbital-prod")
    assert code == 0, err
    assert f"stack orbital-prod (table {table}, bucket {bucket})" in out
    items, objects = _dump_aws(boto3.client("dynamodb"), boto3.client("s3"), table, bucket)
    assert items == source.expected_items
    assert objects == source.expected_objects

    # and back out of the stack: the same state again (moving back, or a backup of the deployment)
    back = tmp_path / "from-stack.zip"
    code, out, err = _cli(capsys, "export", "--stack", "orbital-prod", "--out", str(back))
    assert code == 0, err
    original, again = portable.verify_archive(source.archive), portable.verify_archive(back)
    assert again.source == {"table": table, "bucket": bucket}
    assert again.items_count == original.items_count and again.item_counts == original.item_counts
    assert {o.to_json()["sha256"]: {**o.to_json(), "file": ""} for o in again.objects} == {
        o.to_json()["sha256"]: {**o.to_json(), "file": ""} for o in original.objects
    }

    # into a new data directory: exactly what the source held
    moved = tmp_path / "moved-back"
    code, out, err = _cli(capsys, "import", str(back), "--data-dir", str(moved), "--json")
    assert code == 0, err
    assert _report(out)["items"]["written"] == len(source.expected_items)
    assert _dump_local(moved) == (source.expected_items, source.expected_objects)

    code, _, err = _cli(capsys, "import", str(back), "--stack", "no-such-stack")
    assert code == 1
    assert "no-such-stack" in err


# --- AWS → local: what a deployment holds, into a data directory -----------------------------------------------------


def test_a_table_and_bucket_move_into_a_data_directory(
    aws: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ddb, s3 = boto3.client("dynamodb"), boto3.client("s3")
    _put(ddb, *keys.CONFIG, d={"S": json.dumps({"apiKeys": {"openai": SECRET}})}, v={"N": "4"})
    _put(ddb, *keys.session_meta("agent:main:main"), d={"S": '{"sessionId":"s1"}'}, v={"N": "2"})
    _put(ddb, *keys.message("agent:main:main", "s1", 1), d={"S": '{"role":"user"}'}, ttl={"N": str(FUTURE)})
    _put(
        ddb,
        *keys.cron_job("j1"),
        d={"S": "{}"},
        GSI1PK={"S": keys.CRON_DUE_GSI_PK},
        GSI1SK={"S": "000001700000000#j1"},
        on={"BOOL": True},
        gone={"NULL": True},
        ratio={"N": "0.25"},
        big={"N": "123456789012345678901234567890"},
    )
    _put(ddb, *keys.counter("transfer"), n={"N": "41"})
    _put(ddb, *keys.connection("c1"), d={"S": "{}"})  # live: stays behind
    s3.put_object(
        Bucket=BUCKET,
        Key="agents/main/MEMORY.md",
        Body=b"# memory\n",
        ContentType="text/markdown",
        Metadata={"Origin": "upload"},
    )
    s3.put_object(
        Bucket=BUCKET,
        Key="agents/main/report.pdf.gz",
        Body=gzip.compress(b"%PDF"),
        ContentType="application/pdf",
        ContentEncoding="gzip",
        ContentDisposition='attachment; filename="report.pdf"',
        ContentLanguage="en",
        CacheControl="no-cache",
    )
    s3.put_object(Bucket=BUCKET, Key="runs/exec-1/plan.json", Body=b"{}")  # in flight: stays behind
    aws_items, aws_objects = _portable_part(*_dump_aws(ddb, s3, TABLE, BUCKET))

    archive = tmp_path / "aws.zip"
    code, _, err = _cli(capsys, "export", "--table", TABLE, "--bucket", BUCKET, "--out", str(archive))
    assert code == 0, err
    data_dir = tmp_path / "local"
    argv = ["import", str(archive), "--data-dir", str(data_dir), "--json"]
    code, out, err = _cli(capsys, *argv)
    assert code == 0, err
    assert _report(out)["items"]["written"] == len(aws_items) == 5
    assert (data_dir.stat().st_mode & 0o777) == 0o700
    assert (data_dir / "orbital.sqlite3").stat().st_mode & 0o077 == 0

    items, objects = _dump_local(data_dir)
    assert objects == aws_objects
    assert items.keys() == aws_items.keys()
    for key, item in items.items():  # numbers by value ("0.25", the 30 digits), every attribute there
        assert portable.same_item(item, aws_items[key]), key
    with local_state(data_dir) as store:  # the gateway finds the cron job by its due time, as on AWS
        due = store.table.query_index(keys.CRON_DUE_GSI_PK)
        assert [(r.pk, r.sk) for r in due] == [keys.cron_job("j1")]

    code, out, err = _cli(capsys, *argv)  # again: nothing to write
    assert code == 0, err
    assert _report(out)["items"]["written"] == 0 and _report(out)["objects"]["written"] == 0

    # a local export of it is the same archive, and goes back to AWS as it came
    again = tmp_path / "again.zip"
    code, _, err = _cli(capsys, "export", "--data-dir", str(data_dir), "--out", str(again))
    assert code == 0, err
    first, second = portable.verify_archive(archive), portable.verify_archive(again)
    assert (second.items_count, second.item_counts) == (first.items_count, first.item_counts)
    assert [o.to_json() for o in second.objects] == [o.to_json() for o in first.objects]
    ddb.create_table(TableName="orbital-back", **_table_kwargs())
    s3.create_bucket(Bucket="orbital-back-workspace")
    code, _, err = _cli(capsys, "import", str(again), "--table", "orbital-back", "--bucket", "orbital-back-workspace")
    assert code == 0, err
    back_items, back_objects = _dump_aws(ddb, s3, "orbital-back", "orbital-back-workspace")
    assert back_objects == aws_objects
    assert back_items.keys() == aws_items.keys()
    assert all(portable.same_item(back_items[k], aws_items[k]) for k in aws_items)


def test_an_item_a_local_table_cannot_keep_is_refused_before_anything_is_written(
    aws: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ddb, s3 = boto3.client("dynamodb"), boto3.client("s3")
    _put(ddb, *keys.CONFIG, d={"S": "{}"})
    _put(ddb, "ZZZ#custom", "x", tags={"SS": ["a", "b"]})
    s3.put_object(Bucket=BUCKET, Key="agents/main/MEMORY.md", Body=b"# memory")
    archive = tmp_path / "aws.zip"
    portable.export_state(DynamoItems(ddb, TABLE), S3Objects(s3, BUCKET), archive)
    data_dir = tmp_path / "local"
    code, _, err = _cli(capsys, "import", str(archive), "--data-dir", str(data_dir))
    assert code == 1
    assert "item ZZZ#custom / x cannot be imported into orbital-local" in err and "of type SS" in err
    assert _dump_local(data_dir) == ({}, {})


def test_what_a_local_table_keeps(tmp_path: Path) -> None:
    fine = {
        "PK": {"S": "P"},
        "SK": {"S": "S"},
        "d": {"S": "{}"},
        "ttl": {"N": "1700000000"},
        "GSI1PK": {"S": "G"},
        "GSI1SK": {"S": "g"},
        "n": {"N": "123456789012345678901234567890"},
        "r": {"N": "-0.125"},
        "b": {"BOOL": False},
        "z": {"NULL": True},
        "s": {"S": "text"},
    }
    refused = {
        "d": {"M": {}},
        "ttl": {"N": "1700000000.5"},
        "GSI1PK": {"N": "1"},
        "blob": {"B": b"x"},
        "list": {"L": []},
        "nums": {"NS": ["1"]},
        "pi": {"N": "3.14159265358979323846264338327950288"},
    }
    half_indexed = {k: v for k, v in fine.items() if k != "GSI1SK"}
    with local_state(tmp_path / "data") as store:
        items = TableItems(store.table)
        assert items.refusal(fine) is None
        for name, value in refused.items():
            assert items.refusal({**fine, name: value}), name
        assert "only one of GSI1PK and GSI1SK" in str(items.refusal(half_indexed))
        items.put_many([fine])  # what it keeps comes back as it went in
        assert items.get_many([("P", "S")]) == {("P", "S"): fine}


# --- local → local --------------------------------------------------------------------------------------------------


def test_import_into_an_empty_data_directory(
    source: Source, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "moved"
    argv = ["import", str(source.archive), "--data-dir", str(target), "--json"]
    code, out, err = _cli(capsys, *argv)
    assert code == 0, err
    assert _report(out)["items"]["written"] == len(source.expected_items)
    items, objects = _dump_local(target)
    code, out, err = _cli(capsys, *argv)
    assert code == 0, err
    second = _report(out)
    assert second["items"]["written"] == 0 and second["objects"]["written"] == 0
    assert second["items"]["unchanged"] == len(source.expected_items)
    assert second["objects"]["unchanged"] == len(source.expected_objects)
    assert items == source.expected_items
    assert objects == source.expected_objects


# --- a gateway running on the data directory --------------------------------------------------------------------------


def test_a_running_gateway_is_exported_beside_it_and_never_imported_into(
    source: Source, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from orbital.local.server import GatewayOptions, LocalGateway

    data_dir = tmp_path / "running"
    shutil.copytree(source.data_dir, data_dir)
    out_file = tmp_path / "live.zip"
    with _saved_environ():
        gateway = LocalGateway(
            GatewayOptions(port=0, data_dir=data_dir, project=ROOT, tick_interval=0, seed=False, quiet=True)
        )
        gateway.start()
        try:
            code, _, err = _cli(capsys, "import", str(source.archive), "--data-dir", str(data_dir))
            assert code == 1
            assert f"a gateway is running on {data_dir} (pid {os.getpid()})" in err
            code, out, err = _cli(capsys, "export", "--data-dir", str(data_dir), "--out", str(out_file))
            assert code == 0, err
            assert f"beside the gateway running on it (pid {os.getpid()})" in out
            # the gateway goes on serving what it holds, and writing
            gateway.store.workspace.put("agents/main/after.md", b"written after the export")
            assert gateway.store.workspace.get("agents/main/MEMORY.md") is not None
        finally:
            gateway.stop()
    manifest = portable.verify_archive(out_file)
    assert manifest.item_counts == portable.verify_archive(source.archive).item_counts
    assert {o.key for o in manifest.objects} == set(source.expected_objects)
    moved = tmp_path / "moved"
    code, _, err = _cli(capsys, "import", str(out_file), "--data-dir", str(moved))
    assert code == 0, err
    assert _dump_local(moved) == (source.expected_items, source.expected_objects)


def test_a_data_directory_held_by_another_process_is_reported(
    source: Source, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "held"
    held = LocalStore.open(data_dir)  # a tool has it, and no runtime.json says a gateway serves it
    try:
        code, _, err = _cli(capsys, "import", str(source.archive), "--data-dir", str(data_dir))
        assert code == 1 and f"cannot open {data_dir}" in err and "is in use by another Orbital gateway" in err
        code, _, err = _cli(capsys, "export", "--data-dir", str(data_dir), "--out", str(tmp_path / "x.zip"))
        assert code == 1 and "is in use by another Orbital gateway" in err
        assert not (tmp_path / "x.zip").exists()
        assert list(held.table.scan_items()) == []  # nothing was written into it
    finally:
        held.close()


# --- the logic on both kinds of store: attribute types, expiry, counters, throttling, damaged archives ----------------


def _put(ddb: Any, pk: str, sk: str, **attrs: Any) -> dict[str, Any]:
    item = {"PK": {"S": pk}, "SK": {"S": sk}, **attrs}
    ddb.put_item(TableName=TABLE, Item=item)
    return item


@dataclass
class Target:
    """Where the logic tests import into: a second table and bucket on moto, or a data directory."""

    items: portable.Items
    objects: portable.Objects

    def item(self, key: tuple[str, str]) -> dict[str, Any] | None:
        return self.items.get_many([key]).get(key)

    def count(self) -> int:
        return sum(1 for _ in self.items.scan())

    def object(self, key: str) -> portable.StoredObject | None:
        return self.objects.head(key)


@pytest.fixture(params=["aws", "local"])
def target(request: pytest.FixtureRequest, aws: None, tmp_path: Path) -> Iterator[Target]:
    if request.param == "aws":
        ddb, s3 = boto3.client("dynamodb"), boto3.client("s3")
        ddb.create_table(TableName="orbital-copy", **_table_kwargs())
        s3.create_bucket(Bucket="orbital-copy-workspace")
        yield Target(DynamoItems(ddb, "orbital-copy"), S3Objects(s3, "orbital-copy-workspace"))
        return
    with local_state(tmp_path / "copy") as store:
        yield Target(TableItems(store.table), WorkspaceObjects(store.workspace))


def _export(out: Path) -> portable.Manifest:
    return portable.export_state(
        DynamoItems(boto3.client("dynamodb"), TABLE), S3Objects(boto3.client("s3"), BUCKET), out
    )


def test_items_round_trip_exactly(aws: None, tmp_path: Path) -> None:
    ddb, s3 = boto3.client("dynamodb"), boto3.client("s3")
    ddb.create_table(TableName="orbital-copy", **_table_kwargs())
    s3.create_bucket(Bucket="orbital-copy-workspace")
    copy = DynamoItems(ddb, "orbital-copy"), S3Objects(s3, "orbital-copy-workspace")
    odd = _put(
        ddb,
        "SESSION#agent:main:main",
        "META",
        d={"S": '{"sessionId":"s1"}'},
        v={"N": "7"},
        ttl={"N": str(FUTURE)},
        GSI1PK={"S": "SOMEINDEX"},
        GSI1SK={"S": "0001"},
        blob={"B": b"\x00\x01\xff"},
        tags={"SS": ["a", "b"]},
        nums={"NS": ["1", "2.5"]},
        bins={"BS": [b"\x01", b"\x02"]},
        nested={"M": {"l": {"L": [{"S": "x"}, {"NULL": True}, {"BOOL": True}, {"N": "-3.25"}]}}},
    )
    _put(ddb, "CONN#c1", "META", d={"S": "{}"})
    _put(ddb, "INBOUND#telegram:default", "old", d={"S": "{}"}, ttl={"N": str(PAST)})
    s3.put_object(Bucket=BUCKET, Key="agents/main/a.bin", Body=BINARY, ContentType="image/png", Metadata={"k": "v"})
    s3.put_object(Bucket=BUCKET, Key="calls/c1/outcome.json", Body=b"{}")

    out = tmp_path / "x.zip"
    manifest = _export(out)
    assert manifest.skipped_items == {"connection": 1, "expired": 1}
    assert manifest.skipped_objects == {"call-outcome": 1}
    report = portable_import.import_state(*copy, out)
    assert (report.items_written, report.objects_written) == (1, 1)
    got = ddb.get_item(TableName="orbital-copy", Key={"PK": odd["PK"], "SK": odd["SK"]}, ConsistentRead=True)["Item"]
    assert portable.same_item(got, odd)
    obj = s3.get_object(Bucket="orbital-copy-workspace", Key="agents/main/a.bin")
    assert obj["Body"].read() == BINARY and obj["ContentType"] == "image/png" and obj["Metadata"] == {"k": "v"}

    again = portable_import.import_state(*copy, out)
    assert (again.items_written, again.items_unchanged, again.objects_written, again.objects_unchanged) == (0, 1, 0, 1)


def test_a_target_that_drifted_is_put_back_only_where_it_drifted(target: Target, aws: None, tmp_path: Path) -> None:
    ddb, s3 = boto3.client("dynamodb"), boto3.client("s3")
    item = _put(ddb, *keys.session_meta("agent:main:main"), d={"S": "{}"}, v={"N": "7"}, ttl={"N": str(FUTURE)})
    _put(ddb, *keys.CONFIG, d={"S": "{}"})
    s3.put_object(Bucket=BUCKET, Key="agents/main/a.bin", Body=BINARY, ContentType="image/png", Metadata={"k": "v"})
    s3.put_object(Bucket=BUCKET, Key="agents/main/b.txt", Body=b"b", ContentType="text/plain", CacheControl="no-cache")
    out = tmp_path / "x.zip"
    _export(out)
    first = portable_import.import_state(target.items, target.objects, out)
    assert (first.items_written, first.objects_written) == (2, 2)
    stored = target.object("agents/main/b.txt")
    assert stored is not None and stored.headers == {"ContentType": "text/plain", "CacheControl": "no-cache"}

    target.items.put_many([{**item, "v": {"N": "8"}}])
    drifted = portable.ObjectEntry(
        "agents/main/a.bin", "", len(BINARY), hashlib.sha256(BINARY).hexdigest(), {"ContentType": "text/plain"}
    )
    target.objects.write("agents/main/a.bin", BINARY, drifted)
    third = portable_import.import_state(target.items, target.objects, out)
    assert (third.items_written, third.items_unchanged, third.objects_written, third.objects_unchanged) == (1, 1, 1, 1)
    stored = target.object("agents/main/a.bin")
    assert stored is not None and stored.headers == {"ContentType": "image/png"} and stored.metadata == {"k": "v"}
    assert portable.same_item(target.item(portable.item_key(item)) or {}, item)


def test_items_that_expired_since_the_export_are_not_written(target: Target, aws: None, tmp_path: Path) -> None:
    soon = int(time.time()) + 60
    _put(boto3.client("dynamodb"), "INBOUND#telegram:default", "m1", d={"S": "{}"}, ttl={"N": str(soon)})
    out = tmp_path / "x.zip"
    _export(out)
    report = portable_import.import_state(target.items, target.objects, out, now=soon + 1)
    assert (report.items_written, report.items_expired) == (0, 1)
    assert target.count() == 0


def test_counters_never_go_back(target: Target, aws: None, tmp_path: Path) -> None:
    ddb = boto3.client("dynamodb")
    seq_pk, seq_sk = keys.gateway_flag(keys.CRON_RUN_SEQ_FLAG)
    _put(ddb, seq_pk, seq_sk, d={"S": '{"n":10}'}, n={"N": "10"})
    _put(ddb, *keys.counter("transfer"), n={"N": "3"})
    out = tmp_path / "x.zip"
    _export(out)
    # the target ran further on one counter, and is behind on the other
    target.items.put_many(
        [
            {"PK": {"S": seq_pk}, "SK": {"S": seq_sk}, "n": {"N": "50"}},
            {"PK": {"S": "COUNTER"}, "SK": {"S": "transfer"}, "n": {"N": "1"}},
        ]
    )
    report = portable_import.import_state(target.items, target.objects, out)
    assert (report.items_written, report.items_kept) == (1, 1)

    def n(key: tuple[str, str]) -> str:
        item = target.item(key)
        assert item is not None
        return str(item["n"]["N"])

    assert n((seq_pk, seq_sk)) == "50"
    assert n(keys.counter("transfer")) == "3"


def test_unprocessed_items_are_retried(aws: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ddb, s3 = boto3.client("dynamodb"), boto3.client("s3")
    ddb.create_table(TableName="orbital-copy", **_table_kwargs())
    s3.create_bucket(Bucket="orbital-copy-workspace")
    for i in range(60):
        _put(ddb, "SESSION#agent:main:main", f"MSG#s1#{i:012d}", d={"S": json.dumps({"i": i})})
    out = tmp_path / "x.zip"
    _export(out)

    class Throttled:
        """Leaves the last item of every first attempt unprocessed, as DynamoDB does under load."""

        def __init__(self, real: Any) -> None:
            self.real = real
            self.calls: list[int] = []
            self.exceptions = real.exceptions

        def batch_write_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
            ((table, requests),) = RequestItems.items()
            self.calls.append(len(requests))
            if len(requests) > 1:
                self.real.batch_write_item(RequestItems={table: requests[:-1]})
                return {"UnprocessedItems": {table: requests[-1:]}}
            return dict(self.real.batch_write_item(RequestItems=RequestItems))

        def __getattr__(self, name: str) -> Any:
            return getattr(self.real, name)

    monkeypatch.setattr(portable_aws, "BACKOFF_BASE_SECONDS", 0.0)
    throttled = Throttled(ddb)
    report = portable_import.import_state(
        DynamoItems(throttled, "orbital-copy"), S3Objects(s3, "orbital-copy-workspace"), out
    )
    assert report.items_written == 60
    assert throttled.calls == [25, 1, 25, 1, 10, 1]
    assert ddb.scan(TableName="orbital-copy", Select="COUNT")["Count"] == 60


def test_a_damaged_archive_writes_nothing(target: Target, aws: None, tmp_path: Path) -> None:
    _put(boto3.client("dynamodb"), *keys.CONFIG, d={"S": "{}"})
    boto3.client("s3").put_object(Bucket=BUCKET, Key="agents/main/MEMORY.md", Body=b"# memory")
    out = tmp_path / "x.zip"
    _export(out)
    damaged = tmp_path / "damaged.zip"
    with zipfile.ZipFile(out) as zin, zipfile.ZipFile(damaged, "w") as zout:
        for info in zin.infolist():
            body = zin.read(info.filename)
            zout.writestr(info.filename, b"# tampered" if info.filename.startswith("objects/") else body)
    with pytest.raises(portable.ArchiveError, match=r"MEMORY\.md"):
        portable_import.import_state(target.items, target.objects, damaged)
    assert target.count() == 0
    assert list(target.objects.list_keys()) == []


EARLIER = Path(__file__).parents[1] / "data" / "export-v1-aws.zip"
"""Written from moto by the export as it was before its stores were ports: five items (config, session, message, a
cron job in the due index with a boolean and a null, a counter) and two objects (one with metadata, one with every
header an archive keeps); a connection and a run's data left out."""
EARLIER_OBJECTS = {
    "agents/main/MEMORY.md": (
        b"# Memory\n\n- likes tea\n",
        {"origin": "upload"},
        "text/markdown",
        None,
        None,
        None,
        None,
    ),
    "agents/main/report.txt.gz": (
        gzip.compress(b"report\n", mtime=0),
        {},
        "text/plain",
        "gzip",
        'attachment; filename="report.txt"',
        "en",
        "no-cache",
    ),
}


def _archived(archive: Path) -> tuple[dict[Any, Any], dict[str, Any]]:
    """The items (by key) and the manifest of an archive."""
    with zipfile.ZipFile(archive) as zf:
        lines = [json.loads(line) for line in zf.read("items.jsonl").splitlines()]
        manifest: dict[str, Any] = json.loads(zf.read("manifest.json"))
    return {(i["PK"]["S"], i["SK"]["S"]): i for i in lines}, manifest


def test_an_archive_written_before_imports_into_either_store(target: Target, aws: None) -> None:
    report = portable_import.import_state(target.items, target.objects, EARLIER)
    assert (report.items_written, report.objects_written) == (5, 2)
    archived, _ = _archived(EARLIER)
    for key, data in archived.items():
        assert portable.same_item(target.item(key) or {}, portable.item_from_json(data)), key
    for key, (_, metadata, *headers) in EARLIER_OBJECTS.items():
        stored = target.object(key)
        assert stored is not None
        assert stored.metadata == metadata
        assert stored.headers == {param: v for param, v in zip(S3_HEADERS, headers, strict=True) if v is not None}
    again = portable_import.import_state(target.items, target.objects, EARLIER)
    assert (again.items_unchanged, again.objects_unchanged, again.written) == (5, 2, 0)


def test_an_archive_written_now_is_written_as_before(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = tmp_path / "local"
    code, _, err = _cli(capsys, "import", str(EARLIER), "--data-dir", str(data_dir))
    assert code == 0, err
    assert _dump_local(data_dir)[1] == EARLIER_OBJECTS
    again = tmp_path / "again.zip"
    code, _, err = _cli(capsys, "export", "--data-dir", str(data_dir), "--out", str(again))
    assert code == 0, err
    earlier_items, earlier = _archived(EARLIER)
    items, manifest = _archived(again)
    assert items == earlier_items  # every item, attribute for attribute, in the same DynamoDB JSON
    assert manifest["objects"] == earlier["objects"]  # the same entries: member files, sizes, checksums, headers
    assert manifest.keys() == earlier.keys()
    for name in ("format", "version", "counts"):
        assert manifest[name] == earlier[name], name
    assert {k: v for k, v in manifest["items"].items() if k != "sha256" and k != "size"} == {
        k: v for k, v in earlier["items"].items() if k != "sha256" and k != "size"
    }


def test_summary_sizes_read_well() -> None:
    from orbital.cli.portable import _bytes

    assert [_bytes(n) for n in (0, 900, 2048, 5 * 1024 * 1024)] == ["0 bytes", "900 bytes", "2.0 KB", "5.0 MB"]
