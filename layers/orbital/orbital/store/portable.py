"""Moving a gateway's state to another deployment: one portable archive of its table and workspace bucket.

`export_state` writes what belongs to the agent into one file; `import_state` (`orbital.store.portable_import`)
writes such a file into another table and bucket. Both work through two ports of this module: `Items` (scan, read
many, write many, write a counter unless the stored one is larger) and `Objects` (list, read with headers and
metadata, describe, write). On AWS they are `orbital.store.portable_aws` (a DynamoDB table and an S3 bucket, by
name); locally `orbital.local.portable` (the table and workspace of a data directory). So the same code moves state
from a local data directory to AWS, back, or takes a backup of either (`orbital export` / `orbital import`,
cli/portable.py), and the archive is the same whichever side wrote it.

The archive is a zip file, created with mode 0600 (it holds API keys and bot tokens):

    items.jsonl        one table item per line in DynamoDB JSON, every attribute exactly as stored (`PK`, `SK`, `d`,
                       `ttl`, `GSI1PK`/`GSI1SK`, versions and other flat attributes; binary values in base64, as in
                       DynamoDB's own JSON)
    objects/00000001   the bytes of one workspace object each, numbered in manifest order
    manifest.json      written last, read first:

    {"format": "orbital-export", "version": 1, "createdAt": "2026-01-02T03:04:05Z", "orbitalVersion": "0.1.0",
     "source": {"table": "...", "bucket": "..."},
     "counts": {"items": {"config": 1, "message": 120, ...}, "objects": {"workspace": 9, ...}},
     "skipped": {"items": {"expired": 3, "connection": 2, ...}, "objects": {"run-data": 4}},
     "items": {"file": "items.jsonl", "count": 140, "size": 81234, "sha256": "..."},
     "objects": [{"key": "agents/main/MEMORY.md", "file": "objects/00000001", "size": 512, "sha256": "...",
                  "contentType": "text/markdown", "metadata": {}, "contentEncoding": "gzip"}, ...]}

An object entry carries `contentType`, `metadata` and, when set, `contentEncoding`, `contentDisposition`,
`contentLanguage` and `cacheControl`. Kinds are those of `keys.item_kind` and `keys.object_kind`. A reader refuses a
file that is not a zip, has no manifest, names another format or a version it does not know, or whose members do
not match their sizes and checksums (or hold malformed items), before it writes anything.

Left out, because they describe sockets and work in flight of the gateway that wrote them and mean nothing to
another one (`LIVE_ITEM_KINDS`, `LIVE_OBJECT_KINDS`):

- connections, the node and client registries (with the clients' key aliases) and channel sockets: whoever is
  connected reconnects to the new gateway and registers again;
- pending deferred calls and their wait groups, tool approvals, skill probes (with their owners), node exec sessions
  and their events, transfers: each waits on a socket, a node process or a Step Functions execution of the old
  gateway (who decided an approval stays in the session's history, which goes);
- objects under `runs/` (data of agent-turn executions), `calls/` (outcomes of deferred calls) and `transfers/`
  (staged file transfers);
- items whose `ttl` has passed (the gateway already treats them as absent), and objects deleted between the listing
  and their read (counted as `vanished`: an export through a running gateway sees its state change).

Everything else goes: configuration with its secrets, sessions with their messages (bodies too large for an item are
objects under `media/`), queued inputs, the session registry, pending pairings, channel registry, cron jobs with
their run history and the watch records of runs in progress (the new gateway records a run the move cut short, and
frees the job), heartbeat state, last-active contexts, inbound-message marks (a messenger's repeated delivery stays
a repeat), gateway flags (a workspace already seeded is not seeded again), counters, the workspace with its session
archives, skills and media, and any item or object of a kind this version does not know. An agent run under way
at the export does not go on at the new gateway (its execution is not there): the session is freed the next time it
is used, and the messages queued behind the run then run.

Import (`import_state`) is `orbital.store.portable_import`.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import tempfile
import time
import zipfile
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from orbital import __version__
from orbital.store import keys
from orbital.store.workspace import ByteStream

FORMAT = "orbital-export"
VERSION = 1
MANIFEST_FILE = "manifest.json"
ITEMS_FILE = "items.jsonl"
OBJECTS_DIR = "objects/"

LIVE_ITEM_KINDS = frozenset(
    {
        "connection",
        "node",
        "client",
        "client-alias",
        "run-subscription",
        "channel-socket",
        "device-socket",
        "device-pair",
        "pending-call",
        "call-due",
        "wait-group",
        "probe",
        "probe-owner",
        "exec-session",
        "exec-event",
        "transfer",
        "approval",
    }
)
"""Item kinds never exported: live sockets and work in flight of the gateway that holds them."""
LIVE_OBJECT_KINDS = frozenset({"run-data", "call-outcome", "transfer"})
"""Object kinds never exported: data of executions, calls and transfers in flight."""
MERGED_BY_MAX = frozenset({"counter"})
"""Item kinds whose numeric attribute `n` only grows: an import keeps the larger of the target's and the archive's."""

BATCH_WRITE = 25
"""Items an import reads back and writes at a time, unless the target says otherwise (`Items.batch`)."""
CHUNK = 1024 * 1024

HEADERS = {
    "contentType": "ContentType",
    "contentEncoding": "ContentEncoding",
    "contentDisposition": "ContentDisposition",
    "contentLanguage": "ContentLanguage",
    "cacheControl": "CacheControl",
}
"""Manifest field → S3 parameter, for the object headers an archive keeps (`StoredObject.headers` uses the latter)."""

_ATTR_TYPES = frozenset({"S", "N", "B", "SS", "NS", "BS", "M", "L", "NULL", "BOOL"})
_SHA256 = re.compile(r"^[0-9a-f]{64}$")

Progress = Callable[[str, int, int | None], None]
"""`progress(kind, done, total)`: kind is `items`, `objects` or `verify`; total is None while it is not known."""


class PortableError(Exception):
    """An export or import could not be completed."""


class ArchiveError(PortableError):
    """The file is not an Orbital export, is of a version this one cannot read, or is damaged."""


# --- the stores an archive is written from and into ------------------------------------------------------------------

Key = tuple[str, str]


@dataclass(frozen=True)
class StoredObject:
    """An object as a store describes it."""

    size: int
    headers: dict[str, str]
    """S3 parameter name (`ContentType`, `ContentEncoding`, … of `HEADERS`) → value, for those the object has."""
    metadata: dict[str, str]
    sha256: str | None = None
    """The SHA-256 of the bytes in hex, when the store keeps a checksum of the whole object."""
    etag: str | None = None
    """The ETag without quotes: the MD5 of the bytes for an object written in one request (on S3, not always)."""


class Items(ABC):
    """The table items an archive is written from, or into. Items are in boto3's form (`{"S": …}`, binary as bytes)."""

    name: str
    """The table's name, for the manifest's `source`."""
    batch: int = BATCH_WRITE
    """Items `get_many` and `put_many` are given at most."""

    @abstractmethod
    def scan(self) -> Iterator[dict[str, Any]]:
        """Every stored item, expired ones too, each once (in no particular order)."""

    @abstractmethod
    def get_many(self, wanted: list[Key]) -> dict[Key, dict[str, Any]]:
        """The stored items of `wanted` (expired ones too), by key; a key with no item is left out."""

    @abstractmethod
    def put_many(self, items: list[dict[str, Any]]) -> None:
        """Store whole items, replacing those with the same key."""

    @abstractmethod
    def put_counter(self, item: dict[str, Any]) -> bool:
        """Store `item` unless the stored one holds an `n` at least as large. True if it was written."""

    def refusal(self, item: Mapping[str, Any]) -> str | None:
        """Why this store cannot hold `item` as it is (None: it can). Asked of every item before an import writes."""
        return None

    def delete_many(self, keys: list[Key]) -> None:
        """Delete the items at `keys` (a key with no item is fine). Used by an agent's import with `replace`."""
        raise PortableError(f"{self.name} cannot delete items")


class Objects(ABC):
    """The workspace objects an archive is written from, or into."""

    name: str
    """The bucket's name, for the manifest's `source`."""

    @abstractmethod
    def list_keys(self) -> Iterator[str]:
        """Every object's key."""

    @abstractmethod
    def read(self, key: str) -> tuple[ByteStream, StoredObject] | None:
        """The object's bytes to read in parts (the caller closes the stream) and its description; None if there is
        none (any more)."""

    @abstractmethod
    def head(self, key: str) -> StoredObject | None:
        """The object's description, None if there is none."""

    @abstractmethod
    def write(self, key: str, body: bytes, entry: ObjectEntry) -> None:
        """Store `body` at `key` with the headers and metadata of `entry` (its SHA-256 is that of `body`)."""

    def list_prefix(self, prefix: str) -> Iterator[str]:
        """The keys that start with `prefix` (stores that can list by prefix do it without listing everything)."""
        return (key for key in self.list_keys() if key.startswith(prefix))

    def delete(self, key: str) -> None:
        """Delete the object at `key` (none there is fine). Used by an agent's import with `replace`."""
        raise PortableError(f"{self.name} cannot delete objects")


# --- manifest -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ObjectEntry:
    """One workspace object of an archive: its key, member file, size, SHA-256, headers and metadata."""

    key: str
    file: str
    size: int
    sha256: str
    headers: dict[str, str] = field(default_factory=dict)
    """S3 parameter name (`ContentType`, `ContentEncoding`, …) → value, for those the object has."""
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def content_type(self) -> str | None:
        return self.headers.get("ContentType")

    @property
    def content_encoding(self) -> str | None:
        return self.headers.get("ContentEncoding")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "file": self.file, "size": self.size, "sha256": self.sha256}
        for name, param in HEADERS.items():
            if param in self.headers:
                out[name] = self.headers[param]
        out["metadata"] = dict(self.metadata)
        return out


@dataclass(frozen=True)
class Manifest:
    """What an archive holds, and how to check it."""

    created_at: str
    orbital_version: str | None
    source: dict[str, str]
    item_counts: dict[str, int]
    object_counts: dict[str, int]
    skipped_items: dict[str, int]
    skipped_objects: dict[str, int]
    items_count: int
    items_size: int
    items_sha256: str
    objects: list[ObjectEntry]

    @property
    def object_bytes(self) -> int:
        return sum(o.size for o in self.objects)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "createdAt": self.created_at,
            "orbitalVersion": self.orbital_version,
            "source": dict(self.source),
            "counts": {
                "items": dict(sorted(self.item_counts.items())),
                "objects": dict(sorted(self.object_counts.items())),
            },
            "skipped": {
                "items": dict(sorted(self.skipped_items.items())),
                "objects": dict(sorted(self.skipped_objects.items())),
            },
            "items": {
                "file": ITEMS_FILE,
                "count": self.items_count,
                "size": self.items_size,
                "sha256": self.items_sha256,
            },
            "objects": [o.to_json() for o in self.objects],
        }

    @classmethod
    def from_json(cls, data: Any) -> Manifest:
        """Validate a parsed manifest.json; ArchiveError says what is wrong."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ArchiveError("not an Orbital export (its manifest names another format)")
        version = data.get("version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise ArchiveError("damaged Orbital export: the manifest has no format version")
        if version != VERSION:
            newer = " (written by a newer Orbital: upgrade this one)" if version > VERSION else ""
            raise ArchiveError(f"Orbital export format version {version} is not supported; this reads {VERSION}{newer}")
        try:
            items = data["items"]
            counts = data.get("counts") or {}
            skipped = data.get("skipped") or {}
            if items.get("file") != ITEMS_FILE:
                raise ValueError("items file")
            objects = [object_entry_from_json(o) for o in data["objects"]]
            manifest = cls(
                created_at=_text(data.get("createdAt")),
                orbital_version=data.get("orbitalVersion") if isinstance(data.get("orbitalVersion"), str) else None,
                source={str(k): str(v) for k, v in (data.get("source") or {}).items()},
                item_counts=counts_of(counts.get("items")),
                object_counts=counts_of(counts.get("objects")),
                skipped_items=counts_of(skipped.get("items")),
                skipped_objects=counts_of(skipped.get("objects")),
                items_count=count_of(items.get("count")),
                items_size=count_of(items.get("size")),
                items_sha256=digest_of(items.get("sha256")),
                objects=objects,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ArchiveError(f"damaged Orbital export: malformed manifest ({exc})") from None
        seen: set[str] = set()
        for entry in objects:
            if entry.key in seen:
                raise ArchiveError(f"damaged Orbital export: object {entry.key!r} appears twice")
            seen.add(entry.key)
        return manifest


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("expected a string")
    return value


def count_of(value: Any) -> int:
    """A manifest's count or size: a whole number, not negative (ValueError otherwise)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError("expected a count")
    return value


def digest_of(value: Any) -> str:
    """A manifest's SHA-256: 64 lowercase hex digits (ValueError otherwise)."""
    if not isinstance(value, str) or not _SHA256.match(value):
        raise ValueError("expected a sha256")
    return value


def counts_of(value: Any) -> dict[str, int]:
    """A manifest's counts by kind (ValueError for anything else)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("expected counts")
    return {str(k): count_of(v) for k, v in value.items()}


def object_entry_from_json(data: Any) -> ObjectEntry:
    if not isinstance(data, dict):
        raise ValueError("expected an object entry")
    key, file = _text(data.get("key")), _text(data.get("file"))
    if not key or not file.startswith(OBJECTS_DIR):
        raise ValueError(f"object entry {key!r}")
    headers = {param: _text(data[name]) for name, param in HEADERS.items() if data.get(name) is not None}
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ValueError(f"metadata of {key!r}")
    return ObjectEntry(
        key=key,
        file=file,
        size=count_of(data.get("size")),
        sha256=digest_of(data.get("sha256")),
        headers=headers,
        metadata={str(k): _text(v) for k, v in metadata.items()},
    )


# --- items: DynamoDB JSON in the archive, boto3's form in memory ------------------------------------------------------


def item_to_json(item: Mapping[str, Any]) -> dict[str, Any]:
    """An item as boto3 returns it → DynamoDB JSON (binary values base64)."""
    return {name: _value_to_json(value) for name, value in item.items()}


def item_from_json(data: Any) -> dict[str, Any]:
    """A line of items.jsonl → an item as boto3 takes it. ValueError if it is not a well-formed item."""
    if not isinstance(data, dict):
        raise ValueError("an item must be an object")
    for key in ("PK", "SK"):
        attr = data.get(key)
        if not isinstance(attr, dict) or not isinstance(attr.get("S"), str):
            raise ValueError(f"an item needs a string {key}")
    return {str(name): _value_from_json(value) for name, value in data.items()}


def _value_to_json(value: Mapping[str, Any]) -> dict[str, Any]:
    ((tag, inner),) = value.items()
    if tag == "B":
        return {"B": base64.b64encode(bytes(inner)).decode("ascii")}
    if tag == "BS":
        return {"BS": [base64.b64encode(bytes(b)).decode("ascii") for b in inner]}
    if tag == "M":
        return {"M": {k: _value_to_json(v) for k, v in inner.items()}}
    if tag == "L":
        return {"L": [_value_to_json(v) for v in inner]}
    return {tag: inner}


def _value_from_json(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or len(value) != 1:
        raise ValueError("an attribute value must have exactly one type")
    ((tag, inner),) = value.items()
    if tag not in _ATTR_TYPES:
        raise ValueError(f"unknown attribute type {tag!r}")
    try:
        if tag == "B":
            return {"B": base64.b64decode(inner, validate=True)}
        if tag == "BS":
            return {"BS": [base64.b64decode(b, validate=True) for b in inner]}
    except (binascii.Error, TypeError) as exc:
        raise ValueError(f"bad binary value: {exc}") from None
    if tag == "M":
        if not isinstance(inner, dict):
            raise ValueError("a map must be an object")
        return {"M": {str(k): _value_from_json(v) for k, v in inner.items()}}
    if tag == "L":
        if not isinstance(inner, list):
            raise ValueError("a list must be an array")
        return {"L": [_value_from_json(v) for v in inner]}
    well_formed = {
        "S": isinstance(inner, str),
        "N": isinstance(inner, str) and isinstance(_number(inner), Decimal),
        "BOOL": isinstance(inner, bool),
        "NULL": inner is True,
        "SS": isinstance(inner, list) and all(isinstance(v, str) for v in inner),
        "NS": isinstance(inner, list) and all(isinstance(v, str) and isinstance(_number(v), Decimal) for v in inner),
    }
    if not well_formed[tag]:
        raise ValueError(f"malformed {tag} value")
    return {tag: inner}


def _canonical(value: Mapping[str, Any]) -> Any:
    """A value comparable with ==: numbers by value, sets without order."""
    ((tag, inner),) = value.items()
    if tag == "N":
        return ("N", _number(inner))
    if tag == "NS":
        return ("NS", frozenset(_number(n) for n in inner))
    if tag in ("SS", "BS"):
        return (tag, frozenset(bytes(v) if tag == "BS" else v for v in inner))
    if tag == "B":
        return ("B", bytes(inner))
    if tag == "M":
        return ("M", {k: _canonical(v) for k, v in inner.items()})
    if tag == "L":
        return ("L", [_canonical(v) for v in inner])
    return (tag, inner)


def _number(text: Any) -> Decimal | str:
    try:
        return Decimal(str(text))
    except InvalidOperation:
        return str(text)


def same_item(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two items (boto3's form) hold the same attributes and values."""
    return a.keys() == b.keys() and all(_canonical(a[k]) == _canonical(b[k]) for k in a)


def item_key(item: Mapping[str, Any]) -> tuple[str, str]:
    return str(item["PK"]["S"]), str(item["SK"]["S"])


def expired(item: Mapping[str, Any], now: float) -> bool:
    """The item's `ttl` (epoch seconds) has passed, so the gateway treats it as absent."""
    attr = item.get("ttl")
    if not isinstance(attr, Mapping) or "N" not in attr:
        return False
    number = _number(attr["N"])
    return isinstance(number, Decimal) and number < Decimal(str(now))


def counter_value(item: Mapping[str, Any] | None) -> Decimal | None:
    attr = (item or {}).get("n")
    number = _number(attr["N"]) if isinstance(attr, Mapping) and "N" in attr else None
    return number if isinstance(number, Decimal) else None


# --- export -------------------------------------------------------------------------------------------------------


def export_state(
    items: Items,
    objects: Objects,
    out: Path,
    progress: Progress | None = None,
    *,
    now: float | None = None,
) -> Manifest:
    """Write every item of `items` and object of `objects` that belongs to the agent into the archive `out` (mode
    0600, replaced atomically: a failed export leaves no partial file). Returns its manifest."""
    report = progress or no_progress
    cutoff = time.time() if now is None else now
    out = Path(out)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent)
    tmp = Path(tmp_name)
    try:
        tmp.chmod(0o600)
        with os.fdopen(fd, "wb") as fh:
            with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
                manifest = _write_archive(zf, items, objects, cutoff, report)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return manifest


def _write_archive(zf: zipfile.ZipFile, items: Items, objects: Objects, now: float, progress: Progress) -> Manifest:
    item_counts: Counter[str] = Counter()
    skipped_items: Counter[str] = Counter()
    digest = hashlib.sha256()
    size = 0
    with zf.open(zip_member(ITEMS_FILE), "w", force_zip64=True) as member:
        for done, item in enumerate(items.scan(), 1):
            kind = keys.item_kind(*item_key(item))
            if kind in LIVE_ITEM_KINDS:
                skipped_items[kind] += 1
            elif expired(item, now):
                skipped_items["expired"] += 1
            else:
                line = (json.dumps(item_to_json(item), ensure_ascii=False, separators=(",", ":")) + "\n").encode()
                member.write(line)
                digest.update(line)
                size += len(line)
                item_counts[kind] += 1
            if done % 100 == 0:
                progress("items", done, None)
    total_items = sum(item_counts.values())
    progress("items", total_items + sum(skipped_items.values()), total_items + sum(skipped_items.values()))

    listed: list[str] = []
    skipped_objects: Counter[str] = Counter()
    for key in objects.list_keys():
        kind = keys.object_kind(key)
        if kind in LIVE_OBJECT_KINDS:
            skipped_objects[kind] += 1
        else:
            listed.append(key)
    entries: list[ObjectEntry] = []
    object_counts: Counter[str] = Counter()
    progress("objects", 0, len(listed))
    for done, key in enumerate(listed, 1):
        entry = write_object(zf, objects, key, f"{OBJECTS_DIR}{len(entries) + 1:08d}")
        if entry is None:
            skipped_objects["vanished"] += 1  # deleted between the listing and the read
        else:
            entries.append(entry)
            object_counts[keys.object_kind(key)] += 1
        progress("objects", done, len(listed))

    manifest = Manifest(
        created_at=dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        orbital_version=__version__,
        source={"table": items.name, "bucket": objects.name},
        item_counts=dict(item_counts),
        object_counts=dict(object_counts),
        skipped_items=dict(skipped_items),
        skipped_objects=dict(skipped_objects),
        items_count=total_items,
        items_size=size,
        items_sha256=digest.hexdigest(),
        objects=entries,
    )
    zf.writestr(zip_member(MANIFEST_FILE), json.dumps(manifest.to_json(), indent=1, ensure_ascii=False))
    return manifest


def zip_member(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=time.localtime()[:6])
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o600 << 16  # unpacked by hand, its files stay private too
    return info


def write_object(zf: zipfile.ZipFile, objects: Objects, key: str, name: str) -> ObjectEntry | None:
    opened = objects.read(key)
    if opened is None:
        return None
    body, stored = opened
    digest = hashlib.sha256()
    size = 0
    try:
        with zf.open(zip_member(name), "w", force_zip64=stored.size >= zipfile.ZIP64_LIMIT) as member:
            for chunk in iter(lambda: body.read(CHUNK), b""):
                member.write(chunk)
                digest.update(chunk)
                size += len(chunk)
    finally:
        body.close()
    return ObjectEntry(
        key=key,
        file=name,
        size=size,
        sha256=digest.hexdigest(),
        headers={param: stored.headers[param] for param in HEADERS.values() if stored.headers.get(param)},
        metadata=dict(stored.metadata),
    )


# --- reading an archive ------------------------------------------------------------------------------------------


def read_manifest(archive: Path) -> Manifest:
    """The manifest of `archive`, validated (format, version, fields) without reading the rest."""
    with open_archive(archive) as zf:
        return manifest_of(zf)


def verify_archive(archive: Path, progress: Progress | None = None) -> Manifest:
    """Check every member of `archive` against its manifest (sizes, SHA-256, well-formed items without a key twice);
    ArchiveError says what is wrong. Returns the manifest."""
    with open_archive(archive) as zf:
        manifest = manifest_of(zf)
        verify(zf, manifest, progress or no_progress)
        return manifest


@contextlib.contextmanager
def open_archive(archive: Path) -> Iterator[zipfile.ZipFile]:
    try:
        zf = zipfile.ZipFile(archive)
    except FileNotFoundError:
        raise ArchiveError(f"{archive}: no such file") from None
    except IsADirectoryError:
        raise ArchiveError(f"{archive} is a directory, not an Orbital export") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError):
        raise ArchiveError(f"{archive} is not an Orbital export (not a zip archive, or cut short)") from None
    with zf:
        yield zf


def manifest_of(zf: zipfile.ZipFile) -> Manifest:
    return Manifest.from_json(manifest_json(zf, "an Orbital export", "damaged Orbital export"))


def manifest_json(zf: zipfile.ZipFile, what: str, damaged: str, error: type[ArchiveError] = ArchiveError) -> Any:
    """The parsed `manifest.json` of an archive; `error` naming `what` it should be, or saying it is `damaged`."""
    try:
        raw = zf.read(MANIFEST_FILE)
    except KeyError:
        raise error(f"not {what} (it has no manifest.json)") from None
    except (zipfile.BadZipFile, EOFError, OSError) as exc:
        raise error(f"{damaged}: manifest.json cannot be read ({exc})") from None
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise error(f"{damaged}: manifest.json is not JSON") from None


def member_matches(zf: zipfile.ZipFile, name: str, size: int, sha256: str) -> bool:
    """Whether the member `name` has `size` bytes with this SHA-256 (read in chunks, no further than one past
    `size`)."""
    digest = hashlib.sha256()
    read = 0
    for chunk in read_member(zf, name):
        digest.update(chunk)
        read += len(chunk)
        if read > size:
            return False
    return read == size and digest.hexdigest() == sha256


def read_member(zf: zipfile.ZipFile, name: str) -> Iterator[bytes]:
    """A member's bytes in chunks; ArchiveError if it is missing or fails its CRC."""
    try:
        with zf.open(name) as fh:
            yield from iter(lambda: fh.read(CHUNK), b"")
    except KeyError:
        raise ArchiveError(f"damaged Orbital export: {name} is missing") from None
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, RuntimeError) as exc:
        raise ArchiveError(f"damaged Orbital export: {name} cannot be read ({exc})") from None


def verify(zf: zipfile.ZipFile, manifest: Manifest, progress: Progress, target: Items | None = None) -> None:
    """Check the archive against its manifest and, with a `target`, that it can hold every item."""
    total = 1 + len(manifest.objects)
    progress("verify", 0, total)
    if not member_matches(zf, ITEMS_FILE, manifest.items_size, manifest.items_sha256):
        raise ArchiveError(f"damaged Orbital export: {ITEMS_FILE} does not match its checksum")
    seen: set[tuple[str, str]] = set()
    count = 0
    for item in archive_items(zf):
        key = item_key(item)
        if key in seen:
            raise ArchiveError(f"damaged Orbital export: item {key[0]} / {key[1]} appears twice")
        seen.add(key)
        count += 1
        if target is not None and (why := target.refusal(item)):
            raise PortableError(f"item {key[0]} / {key[1]} cannot be imported into {target.name}: {why}")
    if count != manifest.items_count:
        raise ArchiveError(f"damaged Orbital export: {count} items where the manifest lists {manifest.items_count}")
    progress("verify", 1, total)
    for done, entry in enumerate(manifest.objects, 2):
        if not member_matches(zf, entry.file, entry.size, entry.sha256):
            raise ArchiveError(f"damaged Orbital export: the bytes of {entry.key!r} do not match their checksum")
        progress("verify", done, total)


def archive_items(zf: zipfile.ZipFile, name: str = ITEMS_FILE) -> Iterator[dict[str, Any]]:
    """The items of the archive's member `name` (JSON lines), in boto3's form; ArchiveError on a malformed line."""
    pending = b""
    number = 0
    for chunk in read_member(zf, name):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            number += 1
            yield _parse_item(line, number)
    if pending.strip():
        yield _parse_item(pending, number + 1)


def _parse_item(line: bytes, number: int) -> dict[str, Any]:
    try:
        return item_from_json(json.loads(line.decode("utf-8")))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ArchiveError(f"damaged Orbital export: item {number} of {ITEMS_FILE} is malformed ({exc})") from None


def no_progress(kind: str, done: int, total: int | None) -> None:
    """A `Progress` that reports nothing."""
    return None
