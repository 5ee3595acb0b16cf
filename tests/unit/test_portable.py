"""The export archive without AWS: item encoding, key kinds, manifest and checksum validation (exported from stand-ins
of the DynamoDB and S3 clients through the AWS stores), stack outputs, the explicit client factory and the CLI's
argument and gateway checks."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from orbital.cli.main import main
from orbital.cli.portable import running_gateway
from orbital.store import keys, portable, portable_aws
from orbital.store.portable import ArchiveError, Manifest, PortableError
from orbital.store.portable_aws import DynamoItems, S3Objects

# --- fakes: just enough of a DynamoDB and an S3 client to export from -------------------------------------------------


class FakeDdb:
    def __init__(self, items: list[dict[str, Any]], page: int = 2) -> None:
        self.items = items
        self.page = page

    def scan(self, **kwargs: Any) -> dict[str, Any]:
        start = int(kwargs.get("ExclusiveStartKey", {}).get("i", 0))
        chunk = self.items[start : start + self.page]
        resp: dict[str, Any] = {"Items": chunk}
        if start + self.page < len(self.items):
            resp["LastEvaluatedKey"] = {"i": start + self.page}
        return resp


class FakeS3:
    def __init__(self, objects: dict[str, dict[str, Any]]) -> None:
        self.objects = objects

    def list_objects_v2(self, **kwargs: Any) -> dict[str, Any]:
        return {"Contents": [{"Key": k, "Size": len(o["Body"])} for k, o in sorted(self.objects.items())]}

    def get_object(self, **kwargs: Any) -> dict[str, Any]:
        obj = self.objects[kwargs["Key"]]
        return {
            "Body": io.BytesIO(obj["Body"]),
            "ContentLength": len(obj["Body"]),
            "ContentType": obj.get("ContentType", "binary/octet-stream"),
            "ContentEncoding": obj.get("ContentEncoding"),
            "Metadata": obj.get("Metadata", {}),
        }


def _export(ddb: FakeDdb, s3: FakeS3, out: Path, *args: Any, **kwargs: Any) -> portable.Manifest:
    return portable.export_state(DynamoItems(ddb, "t"), S3Objects(s3, "b"), out, *args, **kwargs)


def _item(pk: str, sk: str, **attrs: Any) -> dict[str, Any]:
    return {"PK": {"S": pk}, "SK": {"S": sk}, "d": {"S": "{}"}, **attrs}


ITEMS = [
    _item("CONFIG", "OVERRIDES", v={"N": "3"}, d={"S": '{"apiKeys":{"openai":"sk-secret"}}'}),
    _item("SESSION#agent:main:main", "META"),
    _item("SESSION#agent:main:main", "MSG#s1#000000000000"),
    _item("CRON", "JOB#j1", GSI1PK={"S": "CRONDUE"}, GSI1SK={"S": "000001700000000#j1"}),
    _item("INBOUND#telegram:default", "m1", ttl={"N": "4000000000"}),
    _item("INBOUND#telegram:default", "m0", ttl={"N": "1000"}),  # expired
    _item("CONN#abc", "META", ttl={"N": "4000000000"}),  # live
    _item("CLIENTS", "cli", ttl={"N": "4000000000"}),  # live
]
OBJECTS = {
    "agents/main/MEMORY.md": {"Body": b"# memory\n", "ContentType": "text/markdown", "Metadata": {"a": "1"}},
    "agents/main/logo.png": {"Body": bytes(range(256)) * 3, "ContentType": "image/png"},
    "agents/main/sessions/s0.jsonl.gz": {"Body": b"\x1f\x8b...", "ContentType": "application/x-ndjson"},
    "runs/exec-1/plan-1.json": {"Body": b"{}"},  # live
}


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    out = tmp_path / "export.zip"
    _export(FakeDdb(list(ITEMS)), FakeS3(dict(OBJECTS)), out, now=2000.0)
    return out


def _rewrite(src: Path, dst: Path, change: dict[str, bytes | None]) -> Path:
    """A copy of a zip archive with some members replaced (bytes) or dropped (None)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            if info.filename in change:
                if change[info.filename] is not None:
                    zout.writestr(info.filename, change[info.filename])
            else:
                zout.writestr(info.filename, zin.read(info.filename))
    return dst


def _manifest(path: Path) -> dict[str, Any]:
    with zipfile.ZipFile(path) as zf:
        data: dict[str, Any] = json.loads(zf.read("manifest.json"))
        return data


# --- the archive ------------------------------------------------------------------------------------------------------


def test_export_writes_a_private_archive_with_a_complete_manifest(archive: Path) -> None:
    assert (archive.stat().st_mode & 0o777) == 0o600
    assert not [p for p in archive.parent.iterdir() if p.name.endswith(".partial")]
    data = _manifest(archive)
    assert data["format"] == "orbital-export" and data["version"] == 1
    assert data["orbitalVersion"] and data["createdAt"].endswith("Z")
    assert data["source"] == {"table": "t", "bucket": "b"}
    assert data["counts"]["items"] == {"config": 1, "session": 1, "message": 1, "cron-job": 1, "inbound-seen": 1}
    assert data["skipped"]["items"] == {"expired": 1, "connection": 1, "client": 1}
    assert data["counts"]["objects"] == {"workspace": 2, "session-archive": 1}
    assert data["skipped"]["objects"] == {"run-data": 1}
    by_key = {o["key"]: o for o in data["objects"]}
    assert by_key["agents/main/MEMORY.md"]["contentType"] == "text/markdown"
    assert by_key["agents/main/MEMORY.md"]["metadata"] == {"a": "1"}
    assert len(by_key["agents/main/logo.png"]["sha256"]) == 64
    manifest = portable.verify_archive(archive)
    assert manifest.items_count == 5 and len(manifest.objects) == 3
    assert Manifest.from_json(manifest.to_json()) == manifest


def test_items_keep_every_attribute_type() -> None:
    item = {
        "PK": {"S": "X"},
        "SK": {"S": "Y"},
        "n": {"N": "12.50"},
        "b": {"B": b"\x00\xffbinary"},
        "ss": {"SS": ["a", "b"]},
        "ns": {"NS": ["1", "2.5"]},
        "bs": {"BS": [b"\x01", b"\x02"]},
        "m": {"M": {"inner": {"L": [{"S": "x"}, {"NULL": True}, {"BOOL": False}, {"B": b"\x03"}]}}},
        "ttl": {"N": "4000000000"},
        "GSI1PK": {"S": "G"},
    }
    text = json.dumps(portable.item_to_json(item))
    back = portable.item_from_json(json.loads(text))
    assert back == item
    assert portable.same_item(back, item)
    # numbers by value, sets without order
    assert portable.same_item({**item, "n": {"N": "12.5"}, "ns": {"NS": ["2.5", "1.0"]}}, item)
    assert not portable.same_item({**item, "n": {"N": "12.51"}}, item)
    assert not portable.same_item({k: v for k, v in item.items() if k != "ttl"}, item)


@pytest.mark.parametrize(
    "data",
    [
        [],
        {"PK": {"S": "X"}},
        {"PK": {"N": "1"}, "SK": {"S": "Y"}},
        {"PK": {"S": "X"}, "SK": {"S": "Y"}, "a": {"Q": "?"}},
        {"PK": {"S": "X"}, "SK": {"S": "Y"}, "a": {"S": "x", "N": "1"}},
        {"PK": {"S": "X"}, "SK": {"S": "Y"}, "a": {"B": "not base64!"}},
        {"PK": {"S": "X"}, "SK": {"S": "Y"}, "a": {"N": "twelve"}},
        {"PK": {"S": "X"}, "SK": {"S": "Y"}, "a": {"S": 12}},
        {"PK": {"S": "X"}, "SK": {"S": "Y"}, "a": {"BOOL": "yes"}},
        {"PK": {"S": "X"}, "SK": {"S": "Y"}, "a": {"SS": "a"}},
    ],
)
def test_malformed_items_are_refused(data: Any) -> None:
    with pytest.raises(ValueError):
        portable.item_from_json(data)


def test_expiry_follows_the_ttl_attribute() -> None:
    assert portable.expired({"ttl": {"N": "99"}}, 100.0)
    assert not portable.expired({"ttl": {"N": "100"}}, 100.0)
    assert not portable.expired({}, 100.0)
    assert not portable.expired({"ttl": {"S": "soon"}}, 100.0)


def test_every_key_has_its_kind() -> None:
    cases = {
        keys.connection("c1"): "connection",
        keys.node("laptop"): "node",
        keys.client("cli"): "client",
        keys.client_alias("cli", "agent:main:main"): "client-alias",
        keys.channel_socket("telegram", "default"): "channel-socket",
        keys.channel_entry("telegram", "default"): "channel",
        keys.CONFIG: "config",
        keys.session_meta("agent:main:main"): "session",
        keys.message("agent:main:main", "s1", 3): "message",
        keys.session_input("agent:main:main", "i1"): "session-input",
        keys.session_registry("agent:main:main"): "session-registry",
        keys.pair("telegram", "42"): "pair",
        keys.heartbeat("main"): "heartbeat",
        keys.last_active("main"): "last-active",
        keys.cron_job("j1"): "cron-job",
        keys.cron_run("j1", 1, 2): "cron-run",
        keys.cron_active("j1", "r1"): "cron-active",
        keys.gateway_flag(keys.CRON_RUN_SEQ_FLAG): "counter",
        keys.workspace_seeded_flag("main"): "gateway-flag",
        keys.pending_call("c1"): "pending-call",
        keys.probe("laptop", "p1"): "probe",
        keys.probe_owner("p1"): "probe-owner",
        keys.exec_session("laptop", "s1"): "exec-session",
        keys.exec_event("laptop", "s1", "e1"): "exec-event",
        keys.transfer(7): "transfer",
        keys.counter("transfer"): "counter",
        keys.wait_group("g1"): "wait-group",
        keys.inbound_seen("telegram", "default", "m1"): "inbound-seen",
        ("SOMETHING-NEW", "x"): "other",
    }
    assert {key: keys.item_kind(*key) for key in cases} == cases
    objects = {
        keys.workspace_object("main", "MEMORY.md"): "workspace",
        keys.workspace_object("main", "notes/sessions/x.md"): "workspace",
        keys.session_archive("main", "s1"): "session-archive",
        keys.session_archive_part("main", "s1", 5): "session-archive",
        keys.global_skill_object("weather/SKILL.md"): "skill",
        keys.session_media("agent:main:main", "photo.jpg"): "media",
        keys.message_body("agent:main:main", "s1", 4): "media",
        keys.run_blob("exec", "plan-1.json"): "run-data",
        keys.call_outcome_blob("c1"): "call-outcome",
        keys.transfer_staging(3): "transfer",
        keys.transfer_part(3, 0): "transfer",
        "elsewhere/file": "other",
    }
    assert {key: keys.object_kind(key) for key in objects} == objects


def test_live_kinds_are_exactly_the_per_gateway_ones() -> None:
    kept = {"config", "session", "message", "session-input", "cron-job", "cron-run", "cron-active", "pair", "other"}
    assert not kept & portable.LIVE_ITEM_KINDS
    assert {"connection", "node", "client", "channel-socket", "pending-call", "transfer"} <= portable.LIVE_ITEM_KINDS


# --- refusing foreign and damaged files -------------------------------------------------------------------------------


def test_a_file_that_is_not_a_zip_is_refused(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.zip"
    bogus.write_text("hello")
    with pytest.raises(ArchiveError, match="not an Orbital export"):
        portable.read_manifest(bogus)
    with pytest.raises(ArchiveError, match="no such file"):
        portable.read_manifest(tmp_path / "missing.zip")


def test_a_truncated_archive_is_refused(archive: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.zip"
    cut.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    with pytest.raises(ArchiveError):
        portable.verify_archive(cut)


def test_a_zip_without_manifest_is_refused(archive: Path, tmp_path: Path) -> None:
    other = _rewrite(archive, tmp_path / "other.zip", {"manifest.json": None})
    with pytest.raises(ArchiveError, match=r"no manifest\.json"):
        portable.verify_archive(other)


def test_another_format_is_refused(archive: Path, tmp_path: Path) -> None:
    data = {**_manifest(archive), "format": "something-else"}
    other = _rewrite(archive, tmp_path / "other.zip", {"manifest.json": json.dumps(data).encode()})
    with pytest.raises(ArchiveError, match="not an Orbital export"):
        portable.read_manifest(other)


@pytest.mark.parametrize(("version", "message"), [(2, "version 2 is not supported.*newer"), (0, "version 0")])
def test_an_unknown_version_is_refused(archive: Path, tmp_path: Path, version: int, message: str) -> None:
    data = {**_manifest(archive), "version": version}
    other = _rewrite(archive, tmp_path / "v.zip", {"manifest.json": json.dumps(data).encode()})
    with pytest.raises(ArchiveError, match=message):
        portable.read_manifest(other)


def test_a_malformed_manifest_is_refused(archive: Path, tmp_path: Path) -> None:
    for n, change in enumerate([b"{not json", json.dumps({**_manifest(archive), "objects": [{"key": "x"}]}).encode()]):
        other = _rewrite(archive, tmp_path / f"m{n}.zip", {"manifest.json": change})
        with pytest.raises(ArchiveError, match="damaged"):
            portable.read_manifest(other)


def test_an_object_that_does_not_match_its_checksum_is_refused(archive: Path, tmp_path: Path) -> None:
    entry = next(o for o in _manifest(archive)["objects"] if o["key"] == "agents/main/MEMORY.md")
    other = _rewrite(archive, tmp_path / "o.zip", {entry["file"]: b"# memory, edited\n"})
    portable.read_manifest(other)  # the manifest itself is fine
    with pytest.raises(ArchiveError, match=r"MEMORY\.md.*checksum"):
        portable.verify_archive(other)


def test_a_missing_object_is_refused(archive: Path, tmp_path: Path) -> None:
    entry = _manifest(archive)["objects"][0]
    other = _rewrite(archive, tmp_path / "o.zip", {entry["file"]: None})
    with pytest.raises(ArchiveError, match="missing"):
        portable.verify_archive(other)


def test_items_that_do_not_match_their_checksum_or_count_are_refused(archive: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        lines = zf.read("items.jsonl").splitlines(keepends=True)
    edited = _rewrite(archive, tmp_path / "a.zip", {"items.jsonl": b"".join(lines[:-1])})
    with pytest.raises(ArchiveError, match=r"items\.jsonl does not match"):
        portable.verify_archive(edited)
    # consistent checksums, but an item twice: refused too
    doubled = b"".join([*lines, lines[0]])
    data = _manifest(archive)
    data["items"].update(size=len(doubled), sha256=hashlib.sha256(doubled).hexdigest(), count=len(lines) + 1)
    twice = _rewrite(archive, tmp_path / "b.zip", {"items.jsonl": doubled, "manifest.json": json.dumps(data).encode()})
    with pytest.raises(ArchiveError, match="appears twice"):
        portable.verify_archive(twice)


def test_a_corrupted_byte_is_caught_by_the_zip_crc(tmp_path: Path) -> None:
    out = tmp_path / "stored.zip"
    marker = b"UNIQUE-MARKER-" * 20
    _export(FakeDdb([]), FakeS3({"agents/main/a.txt": {"Body": marker}}), out)
    # store it uncompressed so the object's bytes can be found and flipped in place
    stored = tmp_path / "plain.zip"
    with zipfile.ZipFile(out) as zin, zipfile.ZipFile(stored, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info.filename))
    raw = bytearray(stored.read_bytes())
    at = raw.index(marker)
    raw[at] ^= 0xFF
    stored.write_bytes(bytes(raw))
    with pytest.raises(ArchiveError, match="damaged"):
        portable.verify_archive(stored)


def test_a_failed_export_leaves_no_file(tmp_path: Path) -> None:
    class Broken(FakeS3):
        def get_object(self, **kwargs: Any) -> dict[str, Any]:
            raise RuntimeError("connection reset")

    out = tmp_path / "x.zip"
    with pytest.raises(RuntimeError):
        _export(FakeDdb(list(ITEMS)), Broken(dict(OBJECTS)), out)
    assert list(tmp_path.iterdir()) == []


def test_progress_is_reported_per_phase(tmp_path: Path) -> None:
    seen: list[tuple[str, int, int | None]] = []
    _export(FakeDdb(list(ITEMS)), FakeS3(dict(OBJECTS)), tmp_path / "p.zip", lambda *a: seen.append(a))
    assert ("items", len(ITEMS), len(ITEMS)) in seen
    assert seen[-1] == ("objects", 3, 3)


# --- stacks, clients, the command line -------------------------------------------------------------------------------


class FakeCloudFormation:
    def __init__(self, outputs: list[dict[str, str]]) -> None:
        self.outputs = outputs

    def describe_stacks(self, StackName: str) -> dict[str, Any]:
        return {"Stacks": [{"StackName": StackName, "Outputs": self.outputs}]}


def test_a_stack_names_its_table_and_bucket() -> None:
    cfn = FakeCloudFormation(
        [
            {"OutputKey": "WebSocketUrl", "OutputValue": "wss://x"},
            {"OutputKey": "StateTableName", "OutputValue": "prod-StateTable-1"},
            {"OutputKey": "WorkspaceBucketName", "OutputValue": "prod-workspace-1"},
        ]
    )
    assert portable_aws.stack_resources(cfn, "prod") == ("prod-StateTable-1", "prod-workspace-1")
    with pytest.raises(PortableError, match="no WorkspaceBucketName output"):
        portable_aws.stack_resources(FakeCloudFormation([{"OutputKey": "StateTableName", "OutputValue": "t"}]), "x")


def test_explicit_clients_take_region_profile_and_endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orbital.aws.clients import explicit_client

    config = tmp_path / "config"
    config.write_text("[profile portable-test]\nregion = eu-west-3\n")
    credentials = tmp_path / "credentials"
    credentials.write_text("[portable-test]\naws_access_key_id = AKIDPROFILE\naws_secret_access_key = secret\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.delenv("AWS_REGION")  # the environment's region wins over the profile's, as everywhere in boto3
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    made = explicit_client("dynamodb", profile="portable-test")
    assert made.meta.region_name == "eu-west-3"
    assert made._request_signer._credentials.access_key == "AKIDPROFILE"
    assert explicit_client("s3", profile="portable-test", region="ap-south-1").meta.region_name == "ap-south-1"
    local = explicit_client("dynamodb", endpoint_url="http://127.0.0.1:9")
    assert local.meta.endpoint_url == "http://127.0.0.1:9"
    config.write_text("[profile portable-test]\n")
    with pytest.raises(ValueError, match="no AWS region"):
        explicit_client("dynamodb")


def test_table_and_bucket_go_together(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", "x.zip", "--table", "t"]) == 1
    assert "--table and --bucket go together" in capsys.readouterr().err
    assert main(["export", "--data-dir", "/nonexistent", "--region", "eu-west-1"]) == 1
    assert "apply to --stack or --table" in capsys.readouterr().err


def test_a_foreign_file_is_refused_before_any_target_is_touched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bogus = tmp_path / "photo.zip"
    with zipfile.ZipFile(bogus, "w") as zf:
        zf.writestr("photo.jpg", b"\xff\xd8")
    code = main(["import", str(bogus), "--table", "t", "--bucket", "b", "--endpoint-url", "http://127.0.0.1:9"])
    assert code == 1
    assert "not an Orbital export (it has no manifest.json)" in capsys.readouterr().err


def test_export_refuses_a_missing_data_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "--data-dir", str(tmp_path / "nope"), "--out", str(tmp_path / "x.zip")]) == 1
    assert "no such data directory" in capsys.readouterr().err


def test_a_gateway_runs_while_its_process_lives(tmp_path: Path) -> None:
    runtime = tmp_path / "runtime.json"
    assert running_gateway(tmp_path) is None
    info = {"pid": os.getpid(), "wsUrl": "ws://127.0.0.1:1/ws", "httpUrl": "http://127.0.0.1:1"}
    runtime.write_text(json.dumps(info))
    assert running_gateway(tmp_path) == info
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    runtime.write_text(json.dumps({"pid": gone.pid}))
    assert running_gateway(tmp_path) is None
    runtime.write_text("{half a fi")
    assert running_gateway(tmp_path) is None


def test_import_refuses_a_data_directory_with_a_live_gateway(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x.zip"
    _export(FakeDdb([]), FakeS3({}), out)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "runtime.json").write_text(json.dumps({"pid": os.getpid()}))
    assert main(["import", str(out), "--data-dir", str(data_dir)]) == 1
    assert f"a gateway is running on {data_dir} (pid {os.getpid()})" in capsys.readouterr().err
