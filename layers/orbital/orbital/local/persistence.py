"""Keeping the local gateway's state in a data directory.

moto holds everything in memory; this module mirrors it to disk and back:
- `dynamodb.jsonl`: every table item in DynamoDB JSON, rewritten atomically (temp file + rename);
- `s3/manifest.json` + `s3/objects/<sha256 of key>`: objects, written only when their ETag changed.
A background thread snapshots every second when anything ran since the last snapshot; a clean stop snapshots once
more. A crash therefore loses at most about a second of writes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("orbital.local")


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


class Snapshotter:
    def __init__(
        self,
        data_dir: Path,
        client: Callable[[str], Any],
        table: str,
        bucket: str,
        activity: Callable[[], int],
        *,
        interval: float = 1.0,
    ) -> None:
        self.dir = data_dir / "state"
        self.client = client
        self.table = table
        self.bucket = bucket
        self.activity = activity
        self.interval = interval
        self._seen = -1
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._manifest: dict[str, dict[str, Any]] = {}

    @property
    def objects_dir(self) -> Path:
        return self.dir / "s3" / "objects"

    # --- restore ----------------------------------------------------------------------------------------------

    def restore(self) -> tuple[int, int]:
        """Load items and objects saved by an earlier run. Returns (items, objects)."""
        items = 0
        objects = 0
        ddb_file = self.dir / "dynamodb.jsonl"
        if ddb_file.exists():
            ddb = self.client("dynamodb")
            batch: list[dict[str, Any]] = []
            with ddb_file.open(encoding="utf-8") as fh:
                for line in fh:
                    if line.strip():
                        batch.append({"PutRequest": {"Item": json.loads(line)}})
                        items += 1
                    if len(batch) == 25:
                        self._write(ddb, batch)
                        batch = []
            if batch:
                self._write(ddb, batch)
        manifest_file = self.dir / "s3" / "manifest.json"
        if manifest_file.exists():
            s3 = self.client("s3")
            self._manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
            for key, entry in list(self._manifest.items()):
                path = self.objects_dir / entry["file"]
                if not path.exists():
                    self._manifest.pop(key)
                    continue
                kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": key, "Body": path.read_bytes()}
                if entry.get("contentType"):
                    kwargs["ContentType"] = entry["contentType"]
                if entry.get("metadata"):
                    kwargs["Metadata"] = entry["metadata"]
                if entry.get("contentEncoding"):
                    kwargs["ContentEncoding"] = entry["contentEncoding"]
                s3.put_object(**kwargs)
                entry["etag"] = s3.head_object(Bucket=self.bucket, Key=key)["ETag"]
                objects += 1
        return items, objects

    def _write(self, ddb: Any, batch: list[dict[str, Any]]) -> None:
        pending: dict[str, Any] = {self.table: batch}
        while pending:
            pending = ddb.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}

    # --- snapshot ---------------------------------------------------------------------------------------------

    def snapshot(self, *, force: bool = False) -> bool:
        with self._lock:
            mark = self.activity()
            if mark == self._seen and not force:
                return False
            self.dir.mkdir(parents=True, exist_ok=True)
            self._snapshot_table()
            self._snapshot_bucket()
            self._seen = mark
            return True

    def _snapshot_table(self) -> None:
        ddb = self.client("dynamodb")
        lines: list[str] = []
        kwargs: dict[str, Any] = {"TableName": self.table}
        while True:
            resp = ddb.scan(**kwargs)
            lines.extend(json.dumps(item, separators=(",", ":"), sort_keys=True) for item in resp.get("Items", []))
            if not resp.get("LastEvaluatedKey"):
                break
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
        _atomic_write(self.dir / "dynamodb.jsonl", ("\n".join(lines) + ("\n" if lines else "")).encode())

    def _snapshot_bucket(self) -> None:
        s3 = self.client("s3")
        self.objects_dir.mkdir(parents=True, exist_ok=True)
        present: dict[str, str] = {}
        kwargs: dict[str, Any] = {"Bucket": self.bucket}
        while True:
            resp = s3.list_objects_v2(**kwargs)
            for obj in resp.get("Contents", []):
                present[obj["Key"]] = obj["ETag"]
            if not resp.get("IsTruncated"):
                break
            kwargs["ContinuationToken"] = resp["NextContinuationToken"]
        changed = False
        for key, etag in present.items():
            entry = self._manifest.get(key)
            if entry and entry.get("etag") == etag:
                continue
            got = s3.get_object(Bucket=self.bucket, Key=key)
            name = hashlib.sha256(key.encode()).hexdigest()
            _atomic_write(self.objects_dir / name, got["Body"].read())
            self._manifest[key] = {
                "file": name,
                "etag": etag,
                "contentType": got.get("ContentType"),
                "metadata": got.get("Metadata") or {},
                "contentEncoding": got.get("ContentEncoding"),
            }
            changed = True
        for key in [k for k in self._manifest if k not in present]:
            entry = self._manifest.pop(key)
            with contextlib.suppress(FileNotFoundError):
                (self.objects_dir / entry["file"]).unlink()
            changed = True
        if changed or not (self.dir / "s3" / "manifest.json").exists():
            _atomic_write(self.dir / "s3" / "manifest.json", json.dumps(self._manifest, indent=1).encode())

    # --- background -------------------------------------------------------------------------------------------

    def start(self) -> None:
        self._seen = self.activity()
        self._thread = threading.Thread(target=self._run, name="orbital-snapshot", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.snapshot()
            except Exception:
                log.exception("snapshot failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.snapshot(force=True)
