"""The portable archive's stores on a local data directory: its SQLite table and its workspace
(`orbital.store.portable` has the archive and what goes in it; `orbital export` / `orbital import` open the store).

`TableItems` moves whole items in and out of `SqliteTable` as DynamoDB JSON (`scan_items`, `get_items`, `put_items`:
a batch is one transaction). That table keeps the key, `d`, `ttl`, the index keys and flat attributes that are
strings, numbers, booleans or nulls, which is everything the gateway writes; an item of an archive holding anything
else (a binary, a set, a map or a list, a number a float would round, a `ttl` with a fraction, half of the index
keys) would not come back as it went in, so `refusal` names it and the import writes nothing.

`WorkspaceObjects` works on the `Workspace` port (headers, metadata, a streaming read), so on either workspace.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from orbital.store.backends.sqlite import SqliteTable
from orbital.store.portable import HEADERS, Items, Key, ObjectEntry, Objects, StoredObject
from orbital.store.workspace import ByteStream, ObjectInfo, Workspace

TABLE_NAME = "orbital-local"
BUCKET_NAME = "orbital-local-workspace"
"""What a local export names as its source (the names the local gateway gives its table and bucket)."""
BATCH = 500
"""Items read back and written in one transaction."""

_KEY_ATTRS = ("PK", "SK")
_INDEX_ATTRS = ("GSI1PK", "GSI1SK")
_FLAT_TYPES = frozenset({"S", "N", "BOOL", "NULL"})
_INFO_FIELDS = {
    "ContentEncoding": "content_encoding",
    "ContentDisposition": "content_disposition",
    "ContentLanguage": "content_language",
    "CacheControl": "cache_control",
}
"""S3 parameter → `ObjectInfo` field, for the headers besides the content type."""


class TableItems(Items):
    """The items of a local data directory's table."""

    batch = BATCH

    def __init__(self, table: SqliteTable, name: str = TABLE_NAME) -> None:
        self.table = table
        self.name = name

    def scan(self) -> Iterator[dict[str, Any]]:
        return self.table.scan_items()

    def get_many(self, wanted: list[Key]) -> dict[Key, dict[str, Any]]:
        return self.table.get_items(wanted)

    def put_many(self, items: list[dict[str, Any]]) -> None:
        self.table.put_items(items)

    def put_counter(self, item: dict[str, Any]) -> bool:
        return self.table.put_items([item], unless_smaller="n") == 1

    def delete_many(self, keys: list[Key]) -> None:
        self.table.write_batch(deletes=list(dict.fromkeys(keys)))

    def refusal(self, item: Mapping[str, Any]) -> str | None:
        for name, value in item.items():
            if not isinstance(value, Mapping) or len(value) != 1:
                return f"{name} is not one typed value"
            ((kind, inner),) = value.items()
            if name in _KEY_ATTRS or name in _INDEX_ATTRS or name == "d":
                if kind != "S":
                    return f"{name} is of type {kind}, where this table keeps a string"
            elif name == "ttl":
                if kind != "N" or not _integral(inner):
                    return "its ttl is not a whole number of seconds"
            elif kind not in _FLAT_TYPES:
                return f"its attribute {name} is of type {kind}: this table keeps strings, numbers, booleans and nulls"
            elif kind == "N" and not _exact_number(inner):
                return f"its attribute {name} ({inner}) would not be kept exactly"
        if ("GSI1PK" in item) != ("GSI1SK" in item):
            return "it has only one of GSI1PK and GSI1SK"
        return None


def _decimal(text: Any) -> Decimal | None:
    try:
        number = Decimal(str(text))
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def _integral(text: Any) -> bool:
    number = _decimal(text)
    return number is not None and number == number.to_integral_value()


def _exact_number(text: Any) -> bool:
    """Whether the table keeps the number `text` by value: as an int, or as a float that is the same number."""
    number = _decimal(text)
    if number is None:
        return False
    if number == number.to_integral_value() and "." not in str(text) and "e" not in str(text).lower():
        return True  # an int, of any size
    try:
        return Decimal(repr(float(str(text)))) == number
    except (ValueError, OverflowError):
        return False


class WorkspaceObjects(Objects):
    """The objects of a workspace (`Workspace` port)."""

    def __init__(self, workspace: Workspace, name: str = BUCKET_NAME) -> None:
        self.workspace = workspace
        self.name = name

    def list_keys(self) -> Iterator[str]:
        return self.list_prefix("")

    def list_prefix(self, prefix: str) -> Iterator[str]:
        for info in self.workspace.list_all(prefix):
            yield info.key

    def delete(self, key: str) -> None:
        self.workspace.delete(key)

    def read(self, key: str) -> tuple[ByteStream, StoredObject] | None:
        opened = self.workspace.stream(key)
        if opened is None:
            return None
        stream, info = opened
        return stream, _described(info)

    def head(self, key: str) -> StoredObject | None:
        info = self.workspace.head(key)
        return None if info is None else _described(info)

    def write(self, key: str, body: bytes, entry: ObjectEntry) -> None:
        self.workspace.put(
            key,
            body,
            content_type=entry.content_type or "application/octet-stream",
            metadata=dict(entry.metadata),
            content_encoding=entry.headers.get("ContentEncoding"),
            content_disposition=entry.headers.get("ContentDisposition"),
            content_language=entry.headers.get("ContentLanguage"),
            cache_control=entry.headers.get("CacheControl"),
        )


def _described(info: ObjectInfo) -> StoredObject:
    headers = {"ContentType": info.content_type}
    headers.update({param: getattr(info, field) for param, field in _INFO_FIELDS.items()})
    return StoredObject(
        size=info.size,
        headers={param: str(value) for param, value in headers.items() if value and param in HEADERS.values()},
        metadata=dict(info.metadata or {}),
        etag=(info.etag or "").strip('"') or None,
    )
