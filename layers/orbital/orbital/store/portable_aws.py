"""The portable archive's stores on AWS: a DynamoDB table and an S3 bucket, by name, through boto3 clients
(`orbital.store.portable` has the archive and what goes in it; `orbital export` / `orbital import` make the clients).

DynamoDB: a consistent scan, page by page; reads and writes by batches (`batch_get_item`, `batch_write_item`, 25
items a request) whose unprocessed part is retried with backoff and jitter; counters written with a condition that
keeps a larger one. S3: the listing page by page; an object read with its headers and metadata; described with its
SHA-256 checksum when S3 keeps one; written with that checksum, so S3 refuses bytes that do not match it.
"""

from __future__ import annotations

import base64
import binascii
import random
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from orbital.store.portable import HEADERS, Items, Key, ObjectEntry, Objects, PortableError, StoredObject, item_key
from orbital.store.workspace import ByteStream

if TYPE_CHECKING:
    from botocore.client import BaseClient

BATCH_ATTEMPTS = 12
BACKOFF_BASE_SECONDS = 0.05
BACKOFF_MAX_SECONDS = 5.0

TABLE_OUTPUT = "StateTableName"
BUCKET_OUTPUT = "WorkspaceBucketName"


class DynamoItems(Items):
    """The items of the DynamoDB table `table`."""

    def __init__(self, ddb: BaseClient, table: str) -> None:
        self.ddb = ddb
        self.name = table

    def scan(self) -> Iterator[dict[str, Any]]:
        kwargs: dict[str, Any] = {"TableName": self.name, "ConsistentRead": True}
        while True:
            resp = self.ddb.scan(**kwargs)
            yield from resp.get("Items", [])
            last = resp.get("LastEvaluatedKey")
            if not last:
                return
            kwargs["ExclusiveStartKey"] = last

    def get_many(self, wanted: list[Key]) -> dict[Key, dict[str, Any]]:
        found: dict[Key, dict[str, Any]] = {}
        if not wanted:
            return found
        table = self.name
        request: dict[str, Any] = {
            table: {"Keys": [{"PK": {"S": pk}, "SK": {"S": sk}} for pk, sk in wanted], "ConsistentRead": True}
        }
        for attempt in range(BATCH_ATTEMPTS):
            resp = self.ddb.batch_get_item(RequestItems=request)
            for item in resp.get("Responses", {}).get(table, []):
                found[item_key(item)] = item
            request = resp.get("UnprocessedKeys") or {}
            if not request:
                return found
            _backoff(attempt)
        raise PortableError("DynamoDB kept refusing reads (throttled): nothing is lost, run the import again")

    def put_many(self, items: list[dict[str, Any]]) -> None:
        if not items:
            return
        pending: dict[str, Any] = {self.name: [{"PutRequest": {"Item": item}} for item in items]}
        for attempt in range(BATCH_ATTEMPTS):
            resp = self.ddb.batch_write_item(RequestItems=pending)
            pending = resp.get("UnprocessedItems") or {}
            if not pending:
                return
            _backoff(attempt)
        raise PortableError("DynamoDB kept refusing writes (throttled): nothing is lost, run the import again")

    def delete_many(self, keys: list[Key]) -> None:
        for start in range(0, len(keys), 25):
            chunk = list(dict.fromkeys(keys[start : start + 25]))
            pending: dict[str, Any] = {
                self.name: [{"DeleteRequest": {"Key": {"PK": {"S": pk}, "SK": {"S": sk}}}} for pk, sk in chunk]
            }
            for attempt in range(BATCH_ATTEMPTS):
                resp = self.ddb.batch_write_item(RequestItems=pending)
                pending = resp.get("UnprocessedItems") or {}
                if not pending:
                    break
                _backoff(attempt)
            else:
                raise PortableError("DynamoDB kept refusing deletes (throttled): run the import again")

    def put_counter(self, item: dict[str, Any]) -> bool:
        try:
            self.ddb.put_item(
                TableName=self.name,
                Item=item,
                ConditionExpression="attribute_not_exists(PK) OR #n < :n",
                ExpressionAttributeNames={"#n": "n"},
                ExpressionAttributeValues={":n": item["n"]},
            )
        except self.ddb.exceptions.ConditionalCheckFailedException:
            return False
        return True


def _backoff(attempt: int) -> None:
    delay = min(BACKOFF_MAX_SECONDS, BACKOFF_BASE_SECONDS * 2**attempt)
    time.sleep(delay * (0.5 + random.random() / 2))  # jitter: concurrent importers do not retry in step


class S3Objects(Objects):
    """The objects of the S3 bucket `bucket`."""

    def __init__(self, s3: BaseClient, bucket: str) -> None:
        self.s3 = s3
        self.name = bucket

    def list_keys(self) -> Iterator[str]:
        return self.list_prefix("")

    def list_prefix(self, prefix: str) -> Iterator[str]:
        kwargs: dict[str, Any] = {"Bucket": self.name, "Prefix": prefix}
        while True:
            resp = self.s3.list_objects_v2(**kwargs)
            for obj in resp.get("Contents", []):
                yield str(obj["Key"])
            if not resp.get("IsTruncated"):
                return
            kwargs["ContinuationToken"] = resp["NextContinuationToken"]

    def read(self, key: str) -> tuple[ByteStream, StoredObject] | None:
        try:
            got = self.s3.get_object(Bucket=self.name, Key=key)
        except Exception as exc:
            if _missing(exc):
                return None
            raise
        body: ByteStream = got["Body"]
        return body, _described(got)

    def head(self, key: str) -> StoredObject | None:
        try:
            head = self.s3.head_object(Bucket=self.name, Key=key, ChecksumMode="ENABLED")
        except Exception as exc:
            if _missing(exc):
                return None
            raise
        return _described(head)

    def delete(self, key: str) -> None:
        self.s3.delete_object(Bucket=self.name, Key=key)

    def write(self, key: str, body: bytes, entry: ObjectEntry) -> None:
        self.s3.put_object(
            Bucket=self.name,
            Key=key,
            Body=body,
            ChecksumSHA256=base64.b64encode(bytes.fromhex(entry.sha256)).decode("ascii"),
            Metadata=dict(entry.metadata),
            **entry.headers,
        )


def _missing(exc: Exception) -> bool:
    code = getattr(exc, "response", {}).get("Error", {}).get("Code")
    return code in {"404", "NoSuchKey", "NotFound"}


def _described(resp: Mapping[str, Any]) -> StoredObject:
    """A get_object or head_object answer as a `StoredObject`."""
    return StoredObject(
        size=int(resp.get("ContentLength", -1)),
        headers={param: str(resp[param]) for param in HEADERS.values() if resp.get(param)},
        metadata={str(k): str(v) for k, v in (resp.get("Metadata") or {}).items()},
        sha256=_checksum_hex(resp.get("ChecksumSHA256")),
        etag=str(resp.get("ETag") or "").strip('"') or None,
    )


def _checksum_hex(checksum: Any) -> str | None:
    """S3's SHA-256 checksum of the whole object in hex; None for none, or for the checksum of a multipart upload's
    parts (`…-N`)."""
    if not isinstance(checksum, str) or "-" in checksum:
        return None
    try:
        return base64.b64decode(checksum, validate=True).hex()
    except (binascii.Error, ValueError):
        return None


# --- deployed stacks -----------------------------------------------------------------------------------------------


def stack_resources(cloudformation: BaseClient, stack: str) -> tuple[str, str]:
    """The table and bucket of a deployed Orbital stack, from its outputs `StateTableName` / `WorkspaceBucketName`."""
    stacks = cloudformation.describe_stacks(StackName=stack).get("Stacks") or []
    if not stacks:
        raise PortableError(f"stack {stack} not found")
    outputs = {o.get("OutputKey"): o.get("OutputValue") for o in stacks[0].get("Outputs") or []}
    missing = [name for name in (TABLE_OUTPUT, BUCKET_OUTPUT) if not outputs.get(name)]
    if missing:
        raise PortableError(f"stack {stack} has no {' or '.join(missing)} output: is it an Orbital stack?")
    return str(outputs[TABLE_OUTPUT]), str(outputs[BUCKET_OUTPUT])
