"""Export and import end to end: a local data directory filled the way the gateway fills it, exported with
`orbital export`, imported with `orbital import` into a moto server (explicit table and bucket, and a CloudFormation
stack's outputs) and into an empty data directory; every item and object compared with the source. Plus the pure
logic over moto: attribute types, expiry, live state, counters, throttling, idempotence."""

from __future__ import annotations

import contextlib
import gzip
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
from orbital.store import keys, portable

from tests.conftest import BUCKET, NODE_RUNTIME, NODE_TOOLS, ROOT, TABLE, FakeSender, Rpc, reset_caches

FUTURE = int(time.time()) + 30 * 86400
PAST = int(time.time()) - 3600
SECRET = "sk-portable-secret-123"
BINARY = bytes(range(256)) * 40
LARGE_TEXT = "x" * (310 * 1024)  # above the inline message limit: its body is stored in S3


# --- helpers ------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _saved_environ() -> Iterator[None]:
    """local_state and an in-process gateway configure this process's environment: put it back afterwards."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        reset_caches()


def _dump(ddb: Any, s3: Any, table: str, bucket: str) -> tuple[dict[Any, Any], dict[str, Any]]:
    """Every item by key, every object by key as (bytes, content type, metadata, content encoding)."""
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
                got.get("ContentType"),
                got.get("Metadata") or {},
                got.get("ContentEncoding"),
            )
    return items, objects


def _portable_part(items: dict[Any, Any], objects: dict[str, Any]) -> tuple[dict[Any, Any], dict[str, Any]]:
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


class MotoServer:
    """A moto server on a free port; every in-process moto server shares one state, so it is reset when done."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"

    def client(self, service: str) -> Any:
        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def stop(self) -> None:
        import requests

        with contextlib.suppress(requests.RequestException):
            requests.post(f"{self.endpoint}/moto-api/reset", timeout=10)
        self.server.stop()


@pytest.fixture
def moto_server() -> Iterator[MotoServer]:
    server = MotoServer()
    try:
        yield server
    finally:
        server.stop()


def _table_kwargs() -> dict[str, Any]:
    from orbital.local.template import load_template, table_definition

    _, kwargs = table_definition(load_template(ROOT / "template.yaml"))
    return kwargs


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

    gateway = services.gateway
    gateway.put_pair({"channel": "telegram", "senderId": "4242", "requestedAt": 1, "firstMessage": "hi"})
    gateway.put_heartbeat_state("main", {"lastRunAt": 1_700_000_000_000}, create=True)
    gateway.put_last_active(
        "main", {"channel": "telegram", "accountId": "default", "peer": {"kind": "dm", "id": "4242"}}
    )
    gateway.append_cron_run({"jobId": job_id, "ts": 1_700_000_000_000, "status": "ok", "durationMs": 12})

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
    from orbital.local.server import local_state
    from orbital.runtime.services import build_services, use_services
    from orbital.settings import get_settings

    base = tmp_path_factory.mktemp("portable")
    data_dir = base / "source"
    with _saved_environ():
        with local_state(data_dir, project=ROOT):
            services = build_services(get_settings(), sender=FakeSender())
            use_services(services)
            try:
                _populate(services)
            finally:
                use_services(None)
        with local_state(data_dir, project=ROOT) as state:  # what the data directory holds once reopened
            items, objects = _dump(state.client("dynamodb"), state.client("s3"), state.table, state.bucket)
        archive = base / "export.zip"
        code = main(["export", "--data-dir", str(data_dir), "--out", str(archive), "--project", str(ROOT)])
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


def test_the_archive_is_private_and_complete(source: Source) -> None:
    assert (source.archive.stat().st_mode & 0o777) == 0o600
    manifest = portable.verify_archive(source.archive)
    assert manifest.items_count == len(source.expected_items)
    assert {o.key for o in manifest.objects} == set(source.expected_objects)
    for kind in portable.LIVE_ITEM_KINDS & {keys.item_kind(*k) for k in source.items}:
        assert manifest.skipped_items.get(kind), kind
    assert set(manifest.skipped_objects) == {"run-data", "call-outcome", "transfer"}
    with zipfile.ZipFile(source.archive) as zf:
        lines = [json.loads(line) for line in zf.read("items.jsonl").splitlines()]
    exported = {(i["PK"]["S"], i["SK"]["S"]) for i in lines}
    assert keys.inbound_seen("telegram", "default", "m-0") not in exported  # expired
    assert keys.connection("conn-admin") not in exported
    assert keys.node("laptop") not in exported
    assert keys.inbound_seen("telegram", "default", "m-1") in exported


def test_export_prints_no_secret(source: Source, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with _saved_environ():
        code, out, err = _cli(capsys, "export", "--data-dir", str(source.data_dir), "--out", str(tmp_path / "a.zip"))
    assert code == 0, err
    assert "Exported" in out and "left out" in out and "keep it private" in out
    assert SECRET not in out + err


# --- imported into a moto server: explicit table and bucket, then a stack's outputs -----------------------------------


def test_import_into_a_table_and_bucket(
    source: Source, moto_server: MotoServer, capsys: pytest.CaptureFixture[str]
) -> None:
    ddb, s3 = moto_server.client("dynamodb"), moto_server.client("s3")
    ddb.create_table(TableName="orbital-target", **_table_kwargs())
    s3.create_bucket(Bucket="orbital-target-workspace")
    argv = [
        "import",
        str(source.archive),
        "--table",
        "orbital-target",
        "--bucket",
        "orbital-target-workspace",
        "--endpoint-url",
        moto_server.endpoint,
    ]
    code, out, err = _cli(capsys, *argv, "--json")
    assert code == 0, err
    first = _report(out)
    assert first["items"]["written"] == len(source.expected_items)
    assert first["objects"]["written"] == len(source.expected_objects)

    items, objects = _dump(ddb, s3, "orbital-target", "orbital-target-workspace")
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


def test_import_and_export_by_stack_name(
    source: Source, moto_server: MotoServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
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
    cfn = moto_server.client("cloudformation")
    cfn.create_stack(StackName="orbital-prod", TemplateBody=json.dumps(template))
    outputs = {
        o["OutputKey"]: o["OutputValue"] for o in cfn.describe_stacks(StackName="orbital-prod")["Stacks"][0]["Outputs"]
    }
    table, bucket = outputs["StateTableName"], outputs["WorkspaceBucketName"]

    code, out, err = _cli(
        capsys, "import", str(source.archive), "--stack", "orbital-prod", "--endpoint-url", moto_server.endpoint
    )
    assert code == 0, err
    assert f"stack orbital-prod (table {table}, bucket {bucket})" in out
    items, objects = _dump(moto_server.client("dynamodb"), moto_server.client("s3"), table, bucket)
    assert items == source.expected_items
    assert objects == source.expected_objects

    # and back out of the stack: the same state again (moving back, or a backup of the deployment)
    back = tmp_path / "from-stack.zip"
    code, out, err = _cli(
        capsys, "export", "--stack", "orbital-prod", "--endpoint-url", moto_server.endpoint, "--out", str(back)
    )
    assert code == 0, err
    original, again = portable.verify_archive(source.archive), portable.verify_archive(back)
    assert again.items_count == original.items_count and again.item_counts == original.item_counts
    assert {(o.key, o.sha256, o.content_type) for o in again.objects} == {
        (o.key, o.sha256, o.content_type) for o in original.objects
    }

    code, _, err = _cli(capsys, "import", str(back), "--stack", "no-such-stack", "--endpoint-url", moto_server.endpoint)
    assert code == 1
    assert "no-such-stack" in err


# --- imported into an empty local data directory ----------------------------------------------------------------------


def test_import_into_an_empty_data_directory(
    source: Source, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from orbital.local.server import local_state

    target = tmp_path / "moved"
    argv = ["import", str(source.archive), "--data-dir", str(target), "--project", str(ROOT), "--json"]
    with _saved_environ():
        code, out, err = _cli(capsys, *argv)
        assert code == 0, err
        assert _report(out)["items"]["written"] == len(source.expected_items)
        with local_state(target, project=ROOT) as state:
            items, objects = _dump(state.client("dynamodb"), state.client("s3"), state.table, state.bucket)
        code, out, err = _cli(capsys, *argv)
    assert code == 0, err
    second = _report(out)
    assert second["items"]["written"] == 0 and second["objects"]["written"] == 0
    assert items == source.expected_items
    assert objects == source.expected_objects


# --- a gateway running on the data directory --------------------------------------------------------------------------


def test_a_running_gateway_is_exported_through_and_never_imported_into(
    source: Source, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from orbital.local.server import GatewayOptions, LocalGateway

    data_dir = tmp_path / "running"
    shutil.copytree(source.data_dir, data_dir)
    with _saved_environ():
        gateway = LocalGateway(
            GatewayOptions(port=0, data_dir=data_dir, project=ROOT, tick_interval=0, seed=False, quiet=True)
        )
        gateway.start()
        try:
            code, _, err = _cli(capsys, "import", str(source.archive), "--data-dir", str(data_dir))
            assert code == 1
            assert f"a gateway is running on {data_dir}" in err
            out_file = tmp_path / "live.zip"
            code, out, err = _cli(capsys, "export", "--data-dir", str(data_dir), "--out", str(out_file))
            assert code == 0, err
            assert "the gateway running on" in out
        finally:
            gateway.stop()
    manifest = portable.verify_archive(out_file)
    assert manifest.item_counts == portable.verify_archive(source.archive).item_counts
    assert {o.key for o in manifest.objects} == set(source.expected_objects)


def test_a_data_directory_that_cannot_be_opened_is_reported(
    source: Source, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from orbital.local import server

    def locked(data_dir: Path, **_: Any) -> Any:
        raise server.StartupError(f"{data_dir} is in use by another gateway")

    monkeypatch.setattr(server, "local_state", locked)
    data_dir = tmp_path / "held"
    data_dir.mkdir()
    code, _, err = _cli(capsys, "import", str(source.archive), "--data-dir", str(data_dir))
    assert code == 1 and "is in use by another gateway" in err
    code, _, err = _cli(capsys, "export", "--data-dir", str(data_dir), "--out", str(tmp_path / "x.zip"))
    assert code == 1 and "is in use by another gateway" in err
    assert not (tmp_path / "x.zip").exists()


# --- the logic over moto: attribute types, expiry, counters, throttling, damaged archives ----------------------------


@pytest.fixture
def two_stores(aws: None) -> tuple[Any, Any]:
    ddb = boto3.client("dynamodb", region_name="us-east-1")
    s3 = boto3.client("s3", region_name="us-east-1")
    ddb.create_table(TableName="orbital-copy", **_table_kwargs())
    s3.create_bucket(Bucket="orbital-copy-workspace")
    return ddb, s3


def _put(ddb: Any, pk: str, sk: str, **attrs: Any) -> dict[str, Any]:
    item = {"PK": {"S": pk}, "SK": {"S": sk}, **attrs}
    ddb.put_item(TableName=TABLE, Item=item)
    return item


def test_items_round_trip_exactly(two_stores: tuple[Any, Any], tmp_path: Path) -> None:
    ddb, s3 = two_stores
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
    manifest = portable.export_state(ddb, s3, TABLE, BUCKET, out)
    assert manifest.skipped_items == {"connection": 1, "expired": 1}
    assert manifest.skipped_objects == {"call-outcome": 1}
    report = portable.import_state(ddb, s3, "orbital-copy", "orbital-copy-workspace", out)
    assert (report.items_written, report.objects_written) == (1, 1)
    got = ddb.get_item(TableName="orbital-copy", Key={"PK": odd["PK"], "SK": odd["SK"]}, ConsistentRead=True)["Item"]
    assert portable.same_item(got, odd)
    obj = s3.get_object(Bucket="orbital-copy-workspace", Key="agents/main/a.bin")
    assert obj["Body"].read() == BINARY and obj["ContentType"] == "image/png" and obj["Metadata"] == {"k": "v"}

    again = portable.import_state(ddb, s3, "orbital-copy", "orbital-copy-workspace", out)
    assert (again.items_written, again.items_unchanged, again.objects_written, again.objects_unchanged) == (0, 1, 0, 1)

    # a target that drifted is put back, and only where it drifted
    s3.put_object(Bucket="orbital-copy-workspace", Key="agents/main/a.bin", Body=BINARY, ContentType="text/plain")
    ddb.update_item(
        TableName="orbital-copy",
        Key={"PK": odd["PK"], "SK": odd["SK"]},
        UpdateExpression="SET v = :v",
        ExpressionAttributeValues={":v": {"N": "8"}},
    )
    third = portable.import_state(ddb, s3, "orbital-copy", "orbital-copy-workspace", out)
    assert (third.items_written, third.objects_written) == (1, 1)
    assert s3.head_object(Bucket="orbital-copy-workspace", Key="agents/main/a.bin")["ContentType"] == "image/png"


def test_items_that_expired_since_the_export_are_not_written(two_stores: tuple[Any, Any], tmp_path: Path) -> None:
    ddb, s3 = two_stores
    soon = int(time.time()) + 60
    _put(ddb, "INBOUND#telegram:default", "m1", d={"S": "{}"}, ttl={"N": str(soon)})
    out = tmp_path / "x.zip"
    portable.export_state(ddb, s3, TABLE, BUCKET, out)
    report = portable.import_state(ddb, s3, "orbital-copy", "orbital-copy-workspace", out, now=soon + 1)
    assert (report.items_written, report.items_expired) == (0, 1)
    assert ddb.scan(TableName="orbital-copy")["Count"] == 0


def test_counters_never_go_back(two_stores: tuple[Any, Any], tmp_path: Path) -> None:
    ddb, s3 = two_stores
    seq_pk, seq_sk = keys.gateway_flag(keys.CRON_RUN_SEQ_FLAG)
    _put(ddb, seq_pk, seq_sk, d={"S": '{"n":10}'}, n={"N": "10"})
    _put(ddb, *keys.counter("transfer"), n={"N": "3"})
    out = tmp_path / "x.zip"
    portable.export_state(ddb, s3, TABLE, BUCKET, out)
    # the target ran further on one counter, and is behind on the other
    ddb.put_item(TableName="orbital-copy", Item={"PK": {"S": seq_pk}, "SK": {"S": seq_sk}, "n": {"N": "50"}})
    ddb.put_item(TableName="orbital-copy", Item={"PK": {"S": "COUNTER"}, "SK": {"S": "transfer"}, "n": {"N": "1"}})
    report = portable.import_state(ddb, s3, "orbital-copy", "orbital-copy-workspace", out)
    assert (report.items_written, report.items_kept) == (1, 1)

    def n(pk: str, sk: str) -> str:
        key = {"PK": {"S": pk}, "SK": {"S": sk}}
        return str(ddb.get_item(TableName="orbital-copy", Key=key)["Item"]["n"]["N"])

    assert n(seq_pk, seq_sk) == "50"
    assert n(*keys.counter("transfer")) == "3"


def test_unprocessed_items_are_retried(
    two_stores: tuple[Any, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ddb, s3 = two_stores
    for i in range(60):
        _put(ddb, "SESSION#agent:main:main", f"MSG#s1#{i:012d}", d={"S": json.dumps({"i": i})})
    out = tmp_path / "x.zip"
    portable.export_state(ddb, s3, TABLE, BUCKET, out)

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

    monkeypatch.setattr(portable, "BACKOFF_BASE_SECONDS", 0.0)
    throttled = Throttled(ddb)
    report = portable.import_state(throttled, s3, "orbital-copy", "orbital-copy-workspace", out)
    assert report.items_written == 60
    assert throttled.calls == [25, 1, 25, 1, 10, 1]
    assert ddb.scan(TableName="orbital-copy", Select="COUNT")["Count"] == 60


def test_a_damaged_archive_writes_nothing(two_stores: tuple[Any, Any], tmp_path: Path) -> None:
    ddb, s3 = two_stores
    _put(ddb, *keys.CONFIG, d={"S": "{}"})
    s3.put_object(Bucket=BUCKET, Key="agents/main/MEMORY.md", Body=b"# memory")
    out = tmp_path / "x.zip"
    portable.export_state(ddb, s3, TABLE, BUCKET, out)
    damaged = tmp_path / "damaged.zip"
    with zipfile.ZipFile(out) as zin, zipfile.ZipFile(damaged, "w") as zout:
        for info in zin.infolist():
            body = zin.read(info.filename)
            zout.writestr(info.filename, b"# tampered" if info.filename.startswith("objects/") else body)
    with pytest.raises(portable.ArchiveError, match=r"MEMORY\.md"):
        portable.import_state(ddb, s3, "orbital-copy", "orbital-copy-workspace", damaged)
    assert ddb.scan(TableName="orbital-copy")["Count"] == 0
    assert "Contents" not in s3.list_objects_v2(Bucket="orbital-copy-workspace")


def test_summary_sizes_read_well() -> None:
    from orbital.cli.portable import _bytes

    assert [_bytes(n) for n in (0, 900, 2048, 5 * 1024 * 1024)] == ["0 bytes", "900 bytes", "2.0 KB", "5.0 MB"]
