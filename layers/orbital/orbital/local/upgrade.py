"""Reading a data directory written by earlier versions of the local gateway, once, into today's store.

Earlier versions kept the table and the bucket in memory and wrote every change to `{data_dir}/state/`:

- `checkpoint.json` names a checkpoint: `items-{gen}.jsonl` (one DynamoDB JSON item per line) and
  `objects-{gen}.json` (key → `{"h": blob sha-256, "m": metadata}`), covering every journal older than `gen`;
- `journal-{gen}.log`: records since, each a frame (big-endian payload length and CRC-32, then a JSON payload):
  `{"o":"put","i":item}`, `{"o":"del","k":key}`, `{"o":"obj","k":key,"h":sha,"m":metadata}`, `{"o":"rm","k":key}`;
  a crash can tear only the tail, which is left out;
- `blobs/ab/abcdef…`: object bytes by SHA-256.

Still earlier ones wrote a full snapshot: `state/dynamodb.jsonl` and `state/s3/manifest.json` + `state/s3/objects/`.

`read_earlier_state` gives what such a directory holds (items past their TTL left out); `upgrade` writes it into the
new store and moves the old files aside to `state.upgraded-{time}/` so the conversion runs once and can be undone
by hand. Nothing here depends on how the old state was served.
"""

from __future__ import annotations

import json
import logging
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("orbital.local")

STATE_DIR = "state"
_HEADER = struct.Struct(">II")
_MAX_RECORD = 1 << 30


@dataclass
class EarlierObject:
    key: str
    data: bytes
    content_type: str | None
    content_encoding: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    """The user metadata (`x-amz-meta-*`, without the prefix)."""


@dataclass
class EarlierState:
    items: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """DynamoDB JSON items by (PK, SK)."""
    objects: dict[str, EarlierObject] = field(default_factory=dict)
    torn_bytes: int = 0
    """Bytes of a torn journal tail that were left out (a write that was never acknowledged)."""
    missing_blobs: int = 0


def holds_earlier_state(data_dir: Path) -> bool:
    state = data_dir / STATE_DIR
    return any((state / name).exists() for name in ("checkpoint.json", "dynamodb.jsonl", "s3/manifest.json")) or any(
        state.glob("journal-*.log")
    )


def _records(data: bytes) -> tuple[list[dict[str, Any]], int]:
    """The intact records of one journal file and where they end."""
    records: list[dict[str, Any]] = []
    at = 0
    while at + _HEADER.size <= len(data):
        length, crc = _HEADER.unpack_from(data, at)
        start, end = at + _HEADER.size, at + _HEADER.size + length
        if length > _MAX_RECORD or end > len(data):
            break
        payload = data[start:end]
        if zlib.crc32(payload) != crc:
            break
        try:
            record = json.loads(payload)
        except ValueError:
            break
        if not isinstance(record, dict):
            break
        records.append(record)
        at = end
    return records, at


def _generations(state: Path) -> list[int]:
    found = []
    for path in state.glob("journal-*.log"):
        stem = path.stem.removeprefix("journal-")
        if stem.isdigit():
            found.append(int(stem))
    return sorted(found)


def _key_of(item: dict[str, Any]) -> tuple[str, str]:
    return str(item["PK"]["S"]), str(item["SK"]["S"])


def _expired(item: dict[str, Any], now: float) -> bool:
    ttl = item.get("ttl")
    if not isinstance(ttl, dict) or "N" not in ttl:
        return False
    try:
        return float(ttl["N"]) <= now
    except ValueError:
        return False


_META = "x-amz-meta-"


def _headers(metadata: dict[str, Any]) -> tuple[str | None, str | None, dict[str, str]]:
    """(content type, content encoding, user metadata) of an object's stored metadata."""
    content_type = encoding = None
    user: dict[str, str] = {}
    for name, value in metadata.items():
        lowered = str(name).lower()
        if lowered == "content-type":
            content_type = str(value)
        elif lowered == "content-encoding":
            encoding = str(value)
        elif lowered.startswith(_META):
            user[lowered.removeprefix(_META)] = str(value)
    return content_type, encoding, user


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    with path.open("rb") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def read_earlier_state(data_dir: Path, *, now: float | None = None) -> EarlierState:
    state = data_dir / STATE_DIR
    out = EarlierState()
    objects: dict[str, tuple[str | None, dict[str, Any], bytes | None]] = {}  # key -> (blob, metadata, bytes)

    def blob(digest: str) -> bytes | None:
        path = state / "blobs" / digest[:2] / digest
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None

    start_generation = 0
    checkpoint = state / "checkpoint.json"
    if checkpoint.exists():
        info = json.loads(checkpoint.read_text(encoding="utf-8"))
        start_generation = int(info["generation"])
        items_file = state / str(info["items"])
        if items_file.exists():
            for item in _lines(items_file):
                out.items[_key_of(item)] = item
        objects_file = state / str(info["objects"])
        if objects_file.exists():
            for key, entry in json.loads(objects_file.read_bytes()).items():
                objects[str(key)] = (str(entry["h"]), entry.get("m") or {}, None)
    else:
        snapshot = state / "dynamodb.jsonl"
        if snapshot.exists():
            for item in _lines(snapshot):
                out.items[_key_of(item)] = item
        manifest = state / "s3" / "manifest.json"
        if manifest.exists():
            for key, entry in json.loads(manifest.read_text(encoding="utf-8")).items():
                path = state / "s3" / "objects" / str(entry["file"])
                if path.exists():
                    metadata = {f"{_META}{k}": v for k, v in (entry.get("metadata") or {}).items()}
                    if entry.get("contentType"):
                        metadata["content-type"] = entry["contentType"]
                    if entry.get("contentEncoding"):
                        metadata["content-encoding"] = entry["contentEncoding"]
                    objects[str(key)] = (None, metadata, path.read_bytes())
    for generation in _generations(state):
        if generation < start_generation:
            continue
        journal = (state / f"journal-{generation:08d}.log").read_bytes()
        records, good = _records(journal)
        out.torn_bytes += len(journal) - good
        for record in records:
            op = record.get("o")
            if op == "put":
                out.items[_key_of(record["i"])] = record["i"]
            elif op == "del":
                out.items.pop(_key_of(record["k"]), None)
            elif op == "obj":
                objects[str(record["k"])] = (str(record["h"]), record.get("m") or {}, None)
            elif op == "rm":
                objects.pop(str(record["k"]), None)
            else:
                log.warning("unknown journal record %r skipped", op)
    moment = time.time() if now is None else now
    out.items = {key: item for key, item in out.items.items() if not _expired(item, moment)}
    for key, (digest, metadata, kept) in objects.items():
        body = kept if kept is not None else blob(digest) if digest else None
        if body is None:
            out.missing_blobs += 1
            log.error("object %s: its content is missing from the data directory; not carried over", key)
            continue
        content_type, encoding, user = _headers(metadata)
        out.objects[key] = EarlierObject(key, body, content_type, encoding, user)
    return out


def upgrade(
    data_dir: Path,
    put_items: Callable[[list[dict[str, Any]]], object],
    put_object: Callable[[EarlierObject], None],
) -> EarlierState | None:
    """Carry an earlier data directory's state into the new store (through `put_items`, DynamoDB JSON items in
    batches, and `put_object`), then move the old files aside. None when there is nothing to convert."""
    if not holds_earlier_state(data_dir):
        return None
    found = read_earlier_state(data_dir)
    batch: list[dict[str, Any]] = []
    for item in found.items.values():
        batch.append(item)
        if len(batch) >= 500:
            put_items(batch)
            batch = []
    if batch:
        put_items(batch)
    for obj in found.objects.values():
        put_object(obj)
    aside = data_dir / f"{STATE_DIR}.upgraded-{time.strftime('%Y%m%d-%H%M%S')}"
    (data_dir / STATE_DIR).rename(aside)
    log.warning(
        "converted the data directory to the new format: %d items, %d files (the old files are in %s; remove them "
        "once you are happy)",
        len(found.items),
        len(found.objects),
        aside.name,
    )
    return found
