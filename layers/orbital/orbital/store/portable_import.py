"""Importing a portable archive (`orbital.store.portable`) into a table and bucket: `import_state`.

Import: items go in by batches (on DynamoDB `batch_write_item`, 25 a request, unprocessed ones retried with
backoff; locally one transaction a batch); each batch is first read back so an item the target already holds as it
is is not written again. Counters (the `n` of `COUNTER` items and of the cron run sequence) are merged by keeping
the larger, so ids never go back. Objects are written (to S3 with their SHA-256 checksum) unless the target already
holds the same bytes (its SHA-256 checksum, or the MD5 ETag of a single-part upload, else its bytes compared) with
the same headers and metadata. Items and objects with the same key are replaced; nothing else in the target is
touched. A second import of the same file therefore writes nothing. Items whose `ttl` passed since the export are
not written. An item the target cannot hold as it is (the local table keeps flat attributes of strings, numbers,
booleans and nulls only) is found while the archive is checked, and refused before anything is written.
"""

from __future__ import annotations

import hashlib
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orbital.store import keys
from orbital.store.portable import (
    CHUNK,
    HEADERS,
    MERGED_BY_MAX,
    Items,
    Manifest,
    ObjectEntry,
    Objects,
    Progress,
    archive_items,
    counter_value,
    expired,
    item_key,
    manifest_of,
    no_progress,
    open_archive,
    read_member,
    same_item,
    verify,
)


@dataclass
class ImportReport:
    """What an import did. `unchanged`: the target already held it as it is; `kept`: a counter the target had
    already gone past; `expired`: items whose ttl passed since the export."""

    manifest: Manifest
    items_written: int = 0
    items_unchanged: int = 0
    items_kept: int = 0
    items_expired: int = 0
    objects_written: int = 0
    objects_unchanged: int = 0

    @property
    def written(self) -> int:
        return self.items_written + self.objects_written

    def to_json(self) -> dict[str, Any]:
        return {
            "items": {
                "written": self.items_written,
                "unchanged": self.items_unchanged,
                "kept": self.items_kept,
                "expired": self.items_expired,
            },
            "objects": {"written": self.objects_written, "unchanged": self.objects_unchanged},
        }


def import_state(
    items: Items,
    objects: Objects,
    archive: Path,
    progress: Progress | None = None,
    *,
    now: float | None = None,
) -> ImportReport:
    """Write the items and objects of `archive` into `items` and `objects`. The whole archive is checked first;
    nothing is written if it is foreign or damaged, or holds an item the target cannot keep. Idempotent (see the
    module docstring)."""
    report_progress = progress or no_progress
    cutoff = time.time() if now is None else now
    with open_archive(archive) as zf:
        manifest = manifest_of(zf)
        verify(zf, manifest, report_progress, items)
        report = ImportReport(manifest)
        _import_items(zf, items, manifest, report, cutoff, report_progress)
        _import_objects(zf, objects, manifest, report, report_progress)
    return report


def _import_items(
    zf: zipfile.ZipFile, target: Items, manifest: Manifest, report: ImportReport, now: float, progress: Progress
) -> None:
    total = manifest.items_count
    progress("items", 0, total)
    done = 0
    batch: list[dict[str, Any]] = []
    size = max(1, target.batch)
    for item in archive_items(zf):
        batch.append(item)
        if len(batch) == size:
            _import_batch(target, batch, report, now)
            done += len(batch)
            batch = []
            progress("items", done, total)
    if batch:
        _import_batch(target, batch, report, now)
        done += len(batch)
    progress("items", done, total)


def _import_batch(target: Items, batch: list[dict[str, Any]], report: ImportReport, now: float) -> None:
    live = []
    for item in batch:
        if expired(item, now):
            report.items_expired += 1
        else:
            live.append(item)
    current = target.get_many([item_key(i) for i in live]) if live else {}
    puts: list[dict[str, Any]] = []
    for item in live:
        key = item_key(item)
        existing = current.get(key)
        if existing is not None and same_item(existing, item):
            report.items_unchanged += 1
        elif keys.item_kind(*key) in MERGED_BY_MAX and counter_value(item) is not None:
            if target.put_counter(item):
                report.items_written += 1
            else:
                report.items_kept += 1
        else:
            puts.append(item)
    if puts:
        target.put_many(puts)
    report.items_written += len(puts)


def _import_objects(
    zf: zipfile.ZipFile, target: Objects, manifest: Manifest, report: ImportReport, progress: Progress
) -> None:
    total = len(manifest.objects)
    progress("objects", 0, total)
    for done, entry in enumerate(manifest.objects, 1):
        body = b"".join(read_member(zf, entry.file))
        if holds(target, entry, body):
            report.objects_unchanged += 1
        else:
            target.write(entry.key, body, entry)
            report.objects_written += 1
        progress("objects", done, total)


def holds(target: Objects, entry: ObjectEntry, body: bytes) -> bool:
    """Whether the target already holds `entry`: same headers, metadata and bytes."""
    stored = target.head(entry.key)
    if stored is None or stored.size != entry.size:
        return False
    if any((stored.headers.get(param) or None) != entry.headers.get(param) for param in HEADERS.values()):
        return False
    if {k.lower(): v for k, v in stored.metadata.items()} != {k.lower(): v for k, v in entry.metadata.items()}:
        return False
    if stored.sha256 is not None:
        return stored.sha256 == entry.sha256
    if stored.etag and stored.etag == hashlib.md5(body, usedforsecurity=False).hexdigest():
        return True
    # an ETag that is no MD5 (multipart upload, KMS encryption): compare the bytes themselves
    opened = target.read(entry.key)
    if opened is None:
        return False
    stream, _ = opened
    digest = hashlib.sha256()
    try:
        for chunk in iter(lambda: stream.read(CHUNK), b""):
            digest.update(chunk)
    finally:
        stream.close()
    return digest.hexdigest() == entry.sha256
