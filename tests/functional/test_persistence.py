"""Local persistence over moto: every kind of write is in the journal before it is answered; a crash (nothing
stopped, moto's memory gone) loses nothing acknowledged; a torn journal tail is cut off and reported; checkpoints
drop what they cover, expired items and unused blobs; one process per data directory; old data directories
convert."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from orbital.local import journal as jr
from orbital.local.persistence import DataDirLocked, Persistence
from orbital.local.template import load_template, table_definition

from tests.conftest import BUCKET, ROOT, TABLE


def ddb() -> Any:
    return boto3.client("dynamodb", region_name="us-east-1")


def s3() -> Any:
    return boto3.client("s3", region_name="us-east-1")


def item(pk: str, sk: str, **attrs: Any) -> dict[str, Any]:
    out = {"PK": {"S": pk}, "SK": {"S": sk}, "d": {"S": json.dumps(attrs)}}
    return out


def table_state() -> dict[tuple[str, str], dict[str, Any]]:
    items = ddb().scan(TableName=TABLE)["Items"]
    return {(i["PK"]["S"], i["SK"]["S"]): i for i in items}


def bucket_state() -> dict[str, tuple[bytes, str, dict[str, str], str | None]]:
    out = {}
    for obj in s3().list_objects_v2(Bucket=BUCKET).get("Contents", []):
        got = s3().get_object(Bucket=BUCKET, Key=obj["Key"])
        out[obj["Key"]] = (got["Body"].read(), got["ContentType"], got["Metadata"], got.get("ContentEncoding"))
    return out


def forget_everything() -> None:
    """What a crash does to moto: the table and the bucket are empty again (recreated as a new process would)."""
    ddb().delete_table(TableName=TABLE)
    _, kwargs = table_definition(load_template(ROOT / "template.yaml"))
    ddb().create_table(TableName=TABLE, **kwargs)
    for obj in s3().list_objects_v2(Bucket=BUCKET).get("Contents", []):
        s3().delete_object(Bucket=BUCKET, Key=obj["Key"])


@pytest.fixture
def store(aws: None, tmp_path: Path) -> Iterator[Persistence]:
    persistence = Persistence(tmp_path, TABLE, BUCKET)
    persistence.lock()
    persistence.recover()
    persistence.start(background=False)
    yield persistence
    if persistence.journal is not None:
        persistence.stop()
    persistence.unlock()


def crash_and_recover(store: Persistence, tmp_path: Path, **kwargs: Any) -> tuple[Persistence, Any]:
    """Drop the store without stopping it (no checkpoint, no close), empty moto, recover from the directory."""
    from orbital.local import persistence as module

    module.uninstall(store)
    store.recording = False
    store.journal = None  # its file stays as the crash left it (every acknowledged record was fsynced)
    store.unlock()
    forget_everything()
    again = Persistence(tmp_path, TABLE, BUCKET, **kwargs)
    again.lock()
    recovered = again.recover()
    again.start(background=False)
    return again, recovered


def write_everything() -> None:
    client, bucket = ddb(), s3()
    client.put_item(TableName=TABLE, Item=item("A", "1", v=1))
    client.put_item(TableName=TABLE, Item=item("A", "2", v=2))
    client.update_item(
        TableName=TABLE,
        Key={"PK": {"S": "A"}, "SK": {"S": "1"}},
        UpdateExpression="SET n = if_not_exists(n, :z) + :one",
        ExpressionAttributeValues={":z": {"N": "0"}, ":one": {"N": "1"}},
    )
    client.delete_item(TableName=TABLE, Key={"PK": {"S": "A"}, "SK": {"S": "2"}})
    client.batch_write_item(
        RequestItems={TABLE: [{"PutRequest": {"Item": item("B", str(i), v=i)}} for i in range(30)][:25]}
    )
    client.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": TABLE, "Item": item("T", "1", v="t")}},
            {"Delete": {"TableName": TABLE, "Key": {"PK": {"S": "B"}, "SK": {"S": "0"}}}},
            {
                "Update": {
                    "TableName": TABLE,
                    "Key": {"PK": {"S": "B"}, "SK": {"S": "1"}},
                    "UpdateExpression": "SET marked = :yes",
                    "ExpressionAttributeValues": {":yes": {"BOOL": True}},
                }
            },
        ]
    )
    with pytest.raises(client.exceptions.ConditionalCheckFailedException):  # a refused write changes nothing
        client.put_item(TableName=TABLE, Item=item("A", "1", v="no"), ConditionExpression="attribute_not_exists(PK)")
    bucket.put_object(
        Bucket=BUCKET, Key="agents/main/a.md", Body=b"# A\n", ContentType="text/markdown", Metadata={"who": "me"}
    )
    bucket.put_object(Bucket=BUCKET, Key="agents/main/b.bin", Body=bytes(range(256)) * 40)
    bucket.put_object(Bucket=BUCKET, Key="agents/main/gone.md", Body=b"bye")
    bucket.copy_object(
        Bucket=BUCKET, Key="agents/main/copy.md", CopySource={"Bucket": BUCKET, "Key": "agents/main/a.md"}
    )
    bucket.delete_object(Bucket=BUCKET, Key="agents/main/gone.md")
    bucket.put_object(Bucket=BUCKET, Key="x/1", Body=b"1")
    bucket.put_object(Bucket=BUCKET, Key="x/2", Body=b"2")
    bucket.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": "x/1"}, {"Key": "x/2"}]})
    upload = bucket.create_multipart_upload(Bucket=BUCKET, Key="big/file.bin", ContentType="application/zip")
    part = b"p" * (5 * 1024 * 1024)
    etags = [
        bucket.upload_part(Bucket=BUCKET, Key="big/file.bin", UploadId=upload["UploadId"], PartNumber=n, Body=part)[
            "ETag"
        ]
        for n in (1, 2)
    ]
    bucket.complete_multipart_upload(
        Bucket=BUCKET,
        Key="big/file.bin",
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"ETag": e, "PartNumber": n} for n, e in zip((1, 2), etags, strict=True)]},
    )


def test_every_kind_of_write_survives_a_crash(store: Persistence, tmp_path: Path) -> None:
    write_everything()
    items, objects = table_state(), bucket_state()
    assert ("A", "2") not in items and ("B", "0") not in items and items[("B", "1")]["marked"] == {"BOOL": True}
    assert set(objects) == {"agents/main/a.md", "agents/main/b.bin", "agents/main/copy.md", "big/file.bin"}
    again, recovered = crash_and_recover(store, tmp_path)
    try:
        assert table_state() == items
        assert bucket_state() == objects
        assert recovered.records > 0 and recovered.torn_bytes == 0
    finally:
        again.stop()


def test_a_torn_journal_tail_is_cut_off_and_reported(store: Persistence, tmp_path: Path) -> None:
    ddb().put_item(TableName=TABLE, Item=item("A", "1", v=1))
    ddb().put_item(TableName=TABLE, Item=item("A", "2", v=2))
    items = table_state()
    path = jr.journal_path(store.dir, store.journal.generation if store.journal else 0)
    with path.open("ab") as fh:  # a record whose write the crash interrupted
        fh.write(jr.encode({"o": "put", "t": TABLE, "i": item("A", "3", v=3)})[:-5])
    size = path.stat().st_size
    again, recovered = crash_and_recover(store, tmp_path)
    try:
        assert table_state() == items
        assert recovered.torn_bytes > 0 and "torn journal tail" in recovered.describe()
        assert path.stat().st_size < size  # cut off, so later records follow intact ones
        ddb().put_item(TableName=TABLE, Item=item("A", "4", v=4))
    finally:
        again.stop()
    forget_everything()
    third = Persistence(tmp_path, TABLE, BUCKET)
    third.lock()
    try:
        assert third.recover().torn_bytes == 0
        assert set(table_state()) == {("A", "1"), ("A", "2"), ("A", "4")}
    finally:
        third.unlock()


def test_a_checkpoint_drops_what_it_covers(store: Persistence, tmp_path: Path) -> None:
    s3().put_object(Bucket=BUCKET, Key="f.md", Body=b"old content")
    old_blob = hashlib.sha256(b"old content").hexdigest()
    s3().put_object(Bucket=BUCKET, Key="f.md", Body=b"new content")
    past = str(int(time.time()) - 10)
    ddb().put_item(TableName=TABLE, Item={**item("E", "1"), "ttl": {"N": past}})
    ddb().put_item(TableName=TABLE, Item=item("K", "1", v=1))
    first = store.journal.generation if store.journal else 0
    generation = store.checkpoint()
    assert generation == first + 1
    assert jr.generations(store.dir) == [generation]  # the covered journal is gone
    assert not (store.blobs_dir / old_blob[:2] / old_blob).exists()  # nothing refers to the old content
    lines = (store.dir / f"items-{generation:08d}.jsonl").read_text().splitlines()
    assert [json.loads(line)["PK"]["S"] for line in lines] == ["K"]  # expired items are not carried over
    ddb().put_item(TableName=TABLE, Item=item("K", "2", v=2))  # after the checkpoint: in the new journal
    expected_objects = bucket_state()
    again, recovered = crash_and_recover(store, tmp_path)
    try:
        assert set(table_state()) == {("K", "1"), ("K", "2")}
        assert bucket_state() == expected_objects == {"f.md": (b"new content", "binary/octet-stream", {}, None)}
        assert recovered.items == 1 and recovered.objects == 1 and recovered.records == 1
    finally:
        again.stop()


def test_a_clean_stop_leaves_nothing_to_replay(store: Persistence, tmp_path: Path) -> None:
    write_everything()
    items, objects = table_state(), bucket_state()
    store.stop()
    forget_everything()
    again = Persistence(tmp_path, TABLE, BUCKET)
    again.lock()
    try:
        recovered = again.recover()
        assert recovered.records == 0
        assert table_state() == items and bucket_state() == objects
    finally:
        again.unlock()


def test_one_process_per_data_directory(store: Persistence, tmp_path: Path) -> None:
    other = Persistence(tmp_path, TABLE, BUCKET)
    with pytest.raises(DataDirLocked) as refused:
        other.lock()
    assert str(tmp_path) in str(refused.value) and "in use by another Orbital gateway" in str(refused.value)


def test_a_data_directory_of_an_earlier_version_is_converted(aws: None, tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "s3" / "objects").mkdir(parents=True)
    (state / "dynamodb.jsonl").write_text(json.dumps(item("OLD", "1", v=1)) + "\n")
    (state / "s3" / "objects" / "f1").write_bytes(b"hello")
    manifest = {"agents/main/MEMORY.md": {"file": "f1", "etag": "x", "contentType": "text/markdown", "metadata": {}}}
    (state / "s3" / "manifest.json").write_text(json.dumps(manifest))
    store = Persistence(tmp_path, TABLE, BUCKET)
    store.lock()
    recovered = store.recover()
    store.start(background=False)
    try:
        assert recovered.legacy and recovered.items == 1 and recovered.objects == 1
        assert ("OLD", "1") in table_state()
        assert bucket_state()["agents/main/MEMORY.md"][:2] == (b"hello", "text/markdown")
        assert not (state / "dynamodb.jsonl").exists() and (state / "checkpoint.json").exists()
    finally:
        store.stop()


def test_process_bound_items_are_journaled_without_waiting_for_the_disk(store: Persistence, tmp_path: Path) -> None:
    """A connection record, a registry entry of connected sockets or a pending call is appended in order but not
    flushed on its own; the next durable write flushes it with itself."""
    assert store.journal is not None
    writes: list[int] = []
    real = store.journal._write

    def counted(frames: list[bytes]) -> None:
        writes.append(len(frames))
        real(frames)

    store.journal._write = counted  # type: ignore[method-assign]
    ddb().put_item(TableName=TABLE, Item=item("CONN#abc", "META", mode="client"))
    ddb().put_item(TableName=TABLE, Item=item("CLIENTS", "c1", connectionId="abc"))
    ddb().put_item(TableName=TABLE, Item=item("CALL#k1", "META", st="pending"))
    assert writes == []
    ddb().put_item(TableName=TABLE, Item=item("CONFIG", "MAIN", model="x"))
    assert writes == [4]  # the three process-bound records went to disk with the durable one, before it
    ddb().put_item(TableName=TABLE, Item=item("CLIENTS", "~alias~c1~agent:main:main", key="main"))
    assert writes == [4, 1]  # the key a client used outlives its socket: waited for
    before = table_state()
    again, _ = crash_and_recover(store, tmp_path)
    assert table_state() == before
    again.stop()
