"""Keeping the local gateway's state in its data directory: durable before acknowledged.

moto holds the table and the bucket in memory. Every change to them is also written to a journal
(`orbital.local.journal`) and is on disk before the request that made it is answered: the hooks below sit around
moto's write operations (DynamoDB put, update, delete, batch writes and transactions; S3 puts, copies, completed
multipart uploads and deletes, whether they come from the gateway's own clients or over HTTP from a node following
a presigned URL). A record is the *state* of what changed, read right after the change: the whole item, the object
(its bytes stored once, content-addressed, in `blobs/`), or its absence. Replaying records is therefore idempotent
and the order of two records for different keys does not matter; for one key the later record is read later.

The data directory (`state/`):

- `checkpoint.json` names the current checkpoint: `items-{gen}.jsonl` (one DynamoDB JSON item per line) and
  `objects-{gen}.json` (key → blob hash and metadata). It covers every record of journals older than `gen`.
- `journal-{gen}.log`, … : records since (frames with length and CRC, see the journal module).
- `blobs/ab/abcdef…`: object bytes by SHA-256.

A checkpoint is written in the background when the journal has grown past `compact_bytes`, and on a clean stop.
It is fuzzy: the journal moves to a new generation first, then the state is dumped while writes go on; replaying
the new generation over the dump gives the exact state, since every change after the switch is in it. Items past
their TTL are left out (that is when they expire). The cost of a write is a journal append and a shared fsync,
whatever the size of the state. Items bound to the process (`keys.process_bound`: connection records, the registries
of connected clients, nodes and channel sockets, pending deferred calls and their wait groups) are journaled in
order like the rest but not waited for: sockets and runs do not outlive the process, and after a crash the restart
closes whatever sockets the registries name and ends the runs.

Recovery: the checkpoint, then every journal from its generation on; a torn tail (a crash in the middle of a write)
is cut off and reported, and nothing before it is lost. A data directory written by an earlier version (a full
snapshot, `dynamodb.jsonl` and `s3/manifest.json`) is read once and converted.

One gateway per data directory: `lock` holds an exclusive `flock` on `{data_dir}/lock` for as long as it runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from orbital.local import journal as jr
from orbital.local.moto_shared import ACCOUNT, MOTO_LOCKS, REGION
from orbital.store import keys

log = logging.getLogger("orbital.local")

CHECKPOINT = "checkpoint.json"
FORMAT_VERSION = 2
DEFAULT_COMPACT_BYTES = 64 * 1024 * 1024


class DataDirLocked(RuntimeError):
    """Another gateway (or tool) is using the data directory."""


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


@dataclass
class Recovered:
    items: int = 0
    objects: int = 0
    records: int = 0
    """Journal records replayed on top of the checkpoint."""
    torn_bytes: int = 0
    """Bytes of a torn journal tail that were cut off."""
    seconds: float = 0.0
    legacy: bool = False

    def describe(self) -> str:
        text = f"restored {self.items} items and {self.objects} objects"
        if self.records:
            text += f" ({self.records} journal records replayed)"
        if self.torn_bytes:
            text += f"; cut off a torn journal tail of {self.torn_bytes} bytes (a write interrupted by a crash)"
        if self.legacy:
            text += "; converted a data directory written by an earlier version"
        return text + f" in {self.seconds:.2f} s"


# --- the moto side ---------------------------------------------------------------------------------------------------


def _backends() -> tuple[Any, Any]:
    from moto.dynamodb.models import dynamodb_backends
    from moto.s3.models import s3_backends

    return dynamodb_backends[ACCOUNT][REGION], s3_backends[ACCOUNT]["aws"]


def _process_bound(key: dict[str, Any]) -> bool:
    pk, sk = key.get("PK"), key.get("SK")
    if not (isinstance(pk, dict) and isinstance(sk, dict)):
        return False
    return isinstance(pk.get("S"), str) and isinstance(sk.get("S"), str) and keys.process_bound(pk["S"], sk["S"])


def _key_of(table: Any, item: dict[str, Any]) -> dict[str, Any]:
    key = {table.hash_key_attr: item[table.hash_key_attr]}
    if table.range_key_attr:
        key[table.range_key_attr] = item[table.range_key_attr]
    return key


def _expired(item: dict[str, Any], ttl_attribute: str | None, now: float) -> bool:
    if not ttl_attribute:
        return False
    value = item.get(ttl_attribute)
    if not isinstance(value, dict) or "N" not in value:
        return False
    try:
        return float(value["N"]) < now
    except ValueError:
        return False


def _live_object(fake_key: Any) -> bool:
    from moto.s3.models import FakeDeleteMarker

    return fake_key is not None and not isinstance(fake_key, FakeDeleteMarker)


# --- the store --------------------------------------------------------------------------------------------------------


class Persistence:
    def __init__(
        self,
        data_dir: Path,
        table: str,
        bucket: str,
        *,
        durable: bool = True,
        compact_bytes: int = DEFAULT_COMPACT_BYTES,
        ttl_attribute: str | None = "ttl",
    ) -> None:
        self.data_dir = data_dir
        self.dir = data_dir / "state"
        self.table = table
        self.bucket = bucket
        self.durable = durable
        self.compact_bytes = compact_bytes
        self.ttl_attribute = ttl_attribute
        self.journal: jr.Journal | None = None
        self._lock_fd: int | None = None
        self._generation = 0
        self._objects: dict[str, tuple[Any, str]] = {}
        """Object key → (moto's object, blob hash) as last recorded: checkpoints need not hash again."""
        self._objects_lock = threading.Lock()
        self._recent_blobs: set[str] = set()
        self._pinned: dict[str, int] = {}
        """Blobs being written for a record not appended yet: never collected."""
        self._checkpointing = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._legacy_files: list[Path] = []
        self.recording = False

    @property
    def blobs_dir(self) -> Path:
        return self.dir / "blobs"

    def _blob_path(self, digest: str) -> Path:
        return self.blobs_dir / digest[:2] / digest

    # --- the lock -----------------------------------------------------------------------------------------------

    def lock(self) -> None:
        """Take the data directory for this process; DataDirLocked if another one has it."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        path = self.data_dir / "lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not a POSIX system: no lock, as before
            self._lock_fd = fd
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise DataDirLocked(
                f"{self.data_dir} is in use by another Orbital gateway (pid {holder}); stop it first, or use "
                "another data directory (--data-dir)"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._lock_fd, 0)
            os.close(self._lock_fd)  # closing releases the flock
            self._lock_fd = None

    # --- recovery -----------------------------------------------------------------------------------------------

    def recover(self) -> Recovered:
        """Load the checkpoint and replay the journals into moto (the table and bucket exist already)."""
        import gc

        # Loading creates millions of long-lived objects and no garbage cycles; the collector would walk the growing
        # heap again and again (a third of the time of a large load). Afterwards the loaded state is moved out of
        # the collector's sight (`gc.freeze`), so later collections do not walk it either while serving.
        collecting = gc.isenabled()
        gc.collect()  # what is garbage now is not frozen with the state
        gc.disable()
        try:
            return self._recover()
        finally:
            gc.freeze()
            if collecting:
                gc.enable()

    def _recover(self) -> Recovered:
        began = time.perf_counter()
        out = Recovered()
        self.dir.mkdir(parents=True, exist_ok=True)
        ddb, s3 = _backends()
        checkpoint_file = self.dir / CHECKPOINT
        start_generation = 0
        if checkpoint_file.exists():
            info = json.loads(checkpoint_file.read_text(encoding="utf-8"))
            start_generation = int(info["generation"])
            out.items = self._load_items(ddb, self.dir / str(info["items"]))
            out.objects = self._load_objects(s3, self.dir / str(info["objects"]))
        elif (self.dir / "dynamodb.jsonl").exists() or (self.dir / "s3" / "manifest.json").exists():
            out.items, out.objects = self._load_legacy(ddb, s3)
            out.legacy = True
        found = [g for g in jr.generations(self.dir) if g >= start_generation]
        for position, generation in enumerate(found):
            path = jr.journal_path(self.dir, generation)
            result = jr.read_records(path)
            for record in result.records:
                self._apply(ddb, s3, record)
            out.records += len(result.records)
            if result.torn:
                size = path.stat().st_size
                out.torn_bytes += size - result.good_bytes
                if position < len(found) - 1:
                    log.error("journal %s is damaged before its end; later journals are replayed", path.name)
                with path.open("r+b") as fh:
                    fh.truncate(result.good_bytes)
                    fh.flush()
                    os.fsync(fh.fileno())
        self._generation = max([start_generation, *found]) + 1 if (found or start_generation) else 1
        out.seconds = time.perf_counter() - began
        return out

    def _load_items(self, ddb: Any, path: Path) -> int:
        """Items of a checkpoint (valid when they were written): placed straight into moto's table, which is
        several times faster than a put per item with its checks."""
        if not path.exists():
            return 0
        table = ddb.get_table(self.table)
        count = 0
        partition: list[Any] = [None, None]  # a checkpoint lists the items of one partition together
        with path.open("rb") as fh:
            for line in fh:
                if line.strip():
                    self._place(table, jr.loads(line), partition)
                    count += 1
        return count

    @staticmethod
    def _place(table: Any, attributes: dict[str, Any], partition: list[Any] | None = None) -> None:
        """Put a stored item (valid when it was stored) into moto's table as moto's own put would leave it, without
        its checks: building the attribute map in one go skips the size check moto repeats per attribute, which is
        most of the cost of loading a large table. `partition` ([hash key as stored, its rows]) carries the rows of
        the previous item's partition over to the next item, saving a lookup (moto's keys hash slowly)."""
        from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict

        values = LimitedSizeDict({name: DynamoType(value) for name, value in attributes.items()})
        item: Any = Item.__new__(Item)
        item.hash_key = values[table.hash_key_attr]
        item.range_key = values[table.range_key_attr] if table.range_key_attr else None
        item.attrs = values
        if not table.range_key_attr:
            table.items[item.hash_key] = item
            return
        stored = attributes[table.hash_key_attr]
        if partition is not None and partition[0] == stored:
            rows = partition[1]
        else:
            rows = table.items[item.hash_key]
            if partition is not None:
                partition[0], partition[1] = stored, rows
        rows[item.range_key] = item

    @staticmethod
    def _remove(table: Any, key: dict[str, Any]) -> None:
        from moto.dynamodb.models.dynamo_type import DynamoType

        hash_value = DynamoType(key[table.hash_key_attr])
        if table.range_key_attr:
            rows = table.items.get(hash_value)
            if rows is not None:
                rows.pop(DynamoType(key[table.range_key_attr]), None)
                if not rows:
                    table.items.pop(hash_value, None)
        else:
            table.items.pop(hash_value, None)

    def _load_objects(self, s3: Any, path: Path) -> int:
        """Objects of a checkpoint, their bytes read one blob after the other (a pool of reader threads is slower:
        the files are small and in the page cache, and the threads contend with this one for the interpreter)."""
        if not path.exists():
            return 0
        count = 0
        for key, entry in jr.loads(path.read_bytes()).items():
            if self._restore_object(s3, key, str(entry["h"]), entry.get("m") or {}):
                count += 1
        return count

    def _read_blob(self, digest: str) -> bytes | None:
        # a plain string path: building a Path per blob costs more than reading a small one
        try:
            with open(f"{self.dir}/blobs/{digest[:2]}/{digest}", "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            return None

    def _restore_object(
        self, s3: Any, key: str, digest: str, metadata: dict[str, Any], value: bytes | None = None
    ) -> bool:
        if value is None:
            value = self._read_blob(digest)
        if value is None:
            log.error("object %s: its content (blob %s) is missing from the data directory", key, digest[:12])
            return False
        fake_key = s3.put_object(self.bucket, key, value, disable_notification=True)
        if metadata:
            fake_key.set_metadata(dict(metadata))
        self._objects[key] = (fake_key, digest)
        return True

    def _apply(self, ddb: Any, s3: Any, record: dict[str, Any]) -> None:
        op = record.get("o")
        if op == "put":  # a state read back from moto: valid, placed as it was
            self._place(ddb.get_table(self.table), record["i"])
        elif op == "del":
            self._remove(ddb.get_table(self.table), record["k"])
        elif op == "obj":
            self._restore_object(s3, str(record["k"]), str(record["h"]), record.get("m") or {})
        elif op == "rm":
            with contextlib.suppress(Exception):
                s3.delete_object(self.bucket, str(record["k"]))
            self._objects.pop(str(record["k"]), None)
        else:
            log.warning("unknown journal record %r skipped", op)

    def _load_legacy(self, ddb: Any, s3: Any) -> tuple[int, int]:
        """The full-snapshot layout of earlier versions: `dynamodb.jsonl` and `s3/manifest.json` + `s3/objects/`."""
        items = self._load_items(ddb, self.dir / "dynamodb.jsonl")
        self._legacy_files.append(self.dir / "dynamodb.jsonl")
        manifest_file = self.dir / "s3" / "manifest.json"
        objects = 0
        if manifest_file.exists():
            manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
            for key, entry in manifest.items():
                path = self.dir / "s3" / "objects" / str(entry["file"])
                if not path.exists():
                    continue
                value = path.read_bytes()
                fake_key = s3.put_object(self.bucket, key, value)
                metadata = {f"x-amz-meta-{k}": v for k, v in (entry.get("metadata") or {}).items()}
                if entry.get("contentType"):
                    metadata["content-type"] = entry["contentType"]
                if entry.get("contentEncoding"):
                    metadata["content-encoding"] = entry["contentEncoding"]
                if metadata:
                    fake_key.set_metadata(metadata)
                digest = self._store_blob(value)
                self._objects[key] = (fake_key, digest)
                objects += 1
            self._legacy_files.append(self.dir / "s3")
        return items, objects

    # --- recording ------------------------------------------------------------------------------------------------

    def start(self, *, background: bool = True) -> None:
        """Open a new journal generation and record every change from now on."""
        self.journal = jr.Journal(self.dir, self._generation, durable=self.durable)
        self.recording = True
        install(self)
        if self._legacy_files:
            self.checkpoint()
            for path in self._legacy_files:
                if path.is_dir():
                    import shutil

                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
            self._legacy_files = []
        if background:
            self._thread = threading.Thread(target=self._run, name="orbital-checkpoint", daemon=True)
            self._thread.start()

    def _store_blob(self, value: bytes, digest: str | None = None) -> str:
        digest = digest or hashlib.sha256(value).hexdigest()
        path = self._blob_path(digest)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{digest}.{threading.get_ident()}.tmp")
            with tmp.open("wb") as fh:
                fh.write(value)
                fh.flush()
                if self.durable:
                    os.fsync(fh.fileno())
            tmp.replace(path)
            if self.durable:
                jr.fsync_directory(path.parent)
        return digest

    def record_item(self, ddb: Any, table_name: str, key: dict[str, Any]) -> int:
        """Append the current state of one item (called under moto's DynamoDB lock, right after a change)."""
        assert self.journal is not None
        item = ddb.get_item(table_name, key)
        if item is None:
            return self.journal.append({"o": "del", "t": table_name, "k": key})
        return self.record_put(table_name, item.to_json()["Attributes"])

    def record_put(self, table_name: str, attributes: dict[str, Any]) -> int:
        """Append an item as it is now stored (DynamoDB JSON attributes), likewise."""
        assert self.journal is not None
        return self.journal.append({"o": "put", "t": table_name, "i": attributes})

    def record_object(self, bucket_name: str, key: str, before: Any) -> int:
        """Append the current state of one object if it changed since `before` (moto's object before the request).
        Returns the record's sequence number, or 0 when nothing changed."""
        assert self.journal is not None
        if bucket_name != self.bucket:
            return 0
        _, s3 = _backends()
        for _ in range(8):
            try:
                current = s3.get_bucket(bucket_name).keys.get(key)
            except Exception:
                return 0
            if current is before:
                return 0
            if not _live_object(current):
                with self._objects_lock:
                    seq = self.journal.append({"o": "rm", "b": bucket_name, "k": key})
                    self._objects.pop(key, None)
                return seq
            value = current.value
            digest = hashlib.sha256(value).hexdigest()
            with self._objects_lock:
                self._pinned[digest] = self._pinned.get(digest, 0) + 1
            try:
                self._store_blob(value, digest)
                metadata = dict(current.metadata)
                with self._objects_lock:
                    if s3.get_bucket(bucket_name).keys.get(key) is not current:
                        before = current
                        continue  # replaced meanwhile: record the newer one
                    seq = self.journal.append({"o": "obj", "b": bucket_name, "k": key, "h": digest, "m": metadata})
                    self._objects[key] = (current, digest)
                    self._recent_blobs.add(digest)
                return seq
            finally:
                with self._objects_lock:
                    left = self._pinned.pop(digest) - 1
                    if left:
                        self._pinned[digest] = left
        return 0

    # --- checkpoints ----------------------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            journal = self.journal
            if journal is None or journal.size < self.compact_bytes:
                continue
            try:
                self.checkpoint()
            except Exception:
                log.exception("checkpoint failed (the journal keeps everything; retrying later)")

    def checkpoint(self) -> int:
        """Write a checkpoint of the current state and drop the journals it covers. Returns its generation."""

        assert self.journal is not None
        with self._checkpointing:
            ddb, s3 = _backends()
            with MOTO_LOCKS["dynamodb"], self._objects_lock:
                generation = self.journal.rotate()
                items = list(ddb.get_table(self.table).all_items())
                self._recent_blobs = set()  # from now on: blobs the new journal names
                objects = dict(self._objects)
            now = time.time()
            lines = []
            for item in items:
                attributes = self._item_json(item)
                if not _expired(attributes, self.ttl_attribute, now):
                    lines.append(jr.dumps(attributes))
            items_name, objects_name = f"items-{generation:08d}.jsonl", f"objects-{generation:08d}.json"
            _atomic_write(self.dir / items_name, b"\n".join(lines) + (b"\n" if lines else b""))
            listed = self._object_entries(s3, objects)
            _atomic_write(self.dir / objects_name, jr.dumps(listed))
            info = {"version": FORMAT_VERSION, "generation": generation, "items": items_name, "objects": objects_name}
            _atomic_write(self.dir / CHECKPOINT, json.dumps(info, indent=1).encode("utf-8"))
            jr.fsync_directory(self.dir)
            self._drop_covered(generation, {e["h"] for e in listed.values()})
            return generation

    @staticmethod
    def _item_json(item: Any) -> dict[str, Any]:

        try:
            attributes: dict[str, Any] = item.to_json()["Attributes"]
        except RuntimeError:  # changed while it was read: read it again, holding the table still
            with MOTO_LOCKS["dynamodb"]:
                attributes = item.to_json()["Attributes"]
        return attributes

    def _object_entries(self, s3: Any, known: dict[str, tuple[Any, str]]) -> dict[str, dict[str, Any]]:
        """Every object of the bucket now: blob hash and metadata (hashed again only if not recorded)."""
        bucket = s3.get_bucket(self.bucket)
        for _ in range(8):
            try:
                present = list(bucket.keys.items())
                break
            except RuntimeError:
                continue
        else:
            present = list(bucket.keys.items())
        out: dict[str, dict[str, Any]] = {}
        for key, fake_key in present:
            if not _live_object(fake_key):
                continue
            entry = known.get(key)
            digest = entry[1] if entry is not None and entry[0] is fake_key else self._store_blob(fake_key.value)
            out[key] = {"h": digest, "m": dict(fake_key.metadata)}
        return out

    def _drop_covered(self, generation: int, keep_blobs: set[str]) -> None:
        for old in jr.generations(self.dir):
            if old < generation:
                jr.journal_path(self.dir, old).unlink(missing_ok=True)
        for pattern in ("items-*.jsonl", "objects-*.json"):
            for path in self.dir.glob(pattern):
                if f"{generation:08d}" not in path.name:
                    path.unlink(missing_ok=True)
        if not self.blobs_dir.exists():
            return
        with self._objects_lock:  # no record can name a blob meanwhile (pinned and recent ones are kept)
            keep = keep_blobs | self._recent_blobs | set(self._pinned)
            for path in self.blobs_dir.glob("*/*"):
                if path.name not in keep and not path.name.endswith(".tmp"):
                    path.unlink(missing_ok=True)

    def stop(self) -> None:
        """Checkpoint (so the next start replays nothing), close the journal, release the directory, and give the
        loaded state back to the garbage collector (a process may go on without this gateway)."""
        import gc

        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        try:
            if self.journal is not None:
                try:
                    self.checkpoint()
                finally:
                    uninstall(self)
                    self.recording = False
                    self.journal.close()
                    self.journal = None
        finally:
            self.unlock()
            gc.unfreeze()


# --- the hooks around moto's writes -----------------------------------------------------------------------------------

_current: Persistence | None = None
_local = threading.local()
_installed = False


def install(store: Persistence) -> None:
    global _current
    _patch()
    _current = store


def uninstall(store: Persistence) -> None:
    global _current
    if _current is store:
        _current = None


@contextlib.contextmanager
def _changes() -> Iterator[Persistence | None]:
    """Around a write: yields the store to record in (None when nothing records); the outermost one waits until
    what was recorded inside it is on disk before the caller answers."""
    depth = getattr(_local, "depth", 0)
    _local.depth = depth + 1
    try:
        yield _current if _current is not None and _current.recording else None
    finally:
        _local.depth = depth
        if depth == 0:
            seq = getattr(_local, "seq", 0)
            _local.seq = 0
            store = _current
            if seq and store is not None and store.journal is not None:
                store.journal.wait(seq)


_table_lock: threading.RLock | None = None


def _dynamodb_lock() -> threading.RLock:
    """The lock of moto's DynamoDB (`MOTO_LOCKS`), looked up once."""
    global _table_lock
    if _table_lock is None:
        _table_lock = MOTO_LOCKS["dynamodb"]
    return _table_lock


class _WholeOperation:
    """`whole_operation`'s context: `_changes()` around the table's lock, as a class (a generator-based context
    manager costs more than the dictionary write it would wrap)."""

    __slots__ = ("_depth", "_lock")

    def __enter__(self) -> Persistence | None:
        self._lock = _dynamodb_lock()
        self._depth = depth = getattr(_local, "depth", 0)
        _local.depth = depth + 1
        try:
            self._lock.acquire()
        except BaseException:
            _local.depth = depth
            raise
        return _current if _current is not None and _current.recording else None

    def __exit__(self, *_: object) -> None:
        self._lock.release()
        depth = self._depth
        _local.depth = depth
        if depth == 0:  # the outermost write waits for what it recorded (as `_changes` does)
            seq = getattr(_local, "seq", 0)
            _local.seq = 0
            store = _current
            if seq and store is not None and store.journal is not None:
                store.journal.wait(seq)


def whole_operation() -> contextlib.AbstractContextManager[Persistence | None]:
    """One DynamoDB operation of moto's response handler, atomic as on AWS. The handler reads an item, copies or
    renders it, writes it and renders the answer in separate steps, each serialized on its own (`make_moto_atomic`),
    so another thread's write can change the item between them (a copy then fails with "dictionary changed size
    during iteration", or the answer mixes two states). Hold the table's lock across the whole operation; what it
    journaled is waited for after the lock is released, so a wait for the disk does not hold up other operations.
    Yields the store to record in (None when nothing records), for writes made here directly (`moto_items`)."""
    return _WholeOperation()


def recorded_put(store: Persistence, table_name: str, key: dict[str, Any], attributes: dict[str, Any]) -> None:
    """Journal `attributes` as the item now stored at `key` (what `recorded` would read back), likewise."""
    seq = store.record_put(table_name, attributes)
    if not _process_bound(key):
        _note(seq)


def recorded(store: Persistence | None, ddb: Any, table_name: str, key: dict[str, Any]) -> None:
    """Journal the item at `key` as it is now, after a change made inside `_changes()` and under moto's DynamoDB
    lock; the outermost `_changes()` waits for it unless the item is bound to the process."""
    if store is not None:
        seq = store.record_item(ddb, table_name, key)
        if not _process_bound(key):  # in the journal all the same, in order; not waited for
            _note(seq)


def _note(seq: int) -> None:
    if seq:
        _local.seq = max(getattr(_local, "seq", 0), seq)


def _patch() -> None:
    global _installed
    if _installed:
        return
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.responses import DynamoHandler
    from moto.s3.responses import S3Response

    from orbital.local.moto_updates import fast_update_items  # lazy, as moto above: loaded when installed

    fast_update_items()  # inside the journal's wrapper, not around it
    lock = MOTO_LOCKS["dynamodb"]

    def item_write(name: str, keys_of: Callable[[Any, tuple[Any, ...], dict[str, Any]], list[tuple[str, Any]]]) -> None:
        method = getattr(DynamoDBBackend, name)

        def call(self: Any, *args: Any, _method: Callable[..., Any] = method, **kwargs: Any) -> Any:
            with _changes() as store:
                with lock:
                    result = _method(self, *args, **kwargs)
                    if store is not None:
                        for table_name, key in keys_of(self, args, kwargs):
                            recorded(store, self, table_name, key)
                return result

        call._orbital_serialized = True  # type: ignore[attr-defined]
        setattr(DynamoDBBackend, name, call)

    def arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> Any:
        return args[index] if len(args) > index else kwargs[name]

    def put_keys(backend: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
        table_name = arg(args, kwargs, 0, "table_name")
        return [(table_name, _key_of(backend.get_table(table_name), arg(args, kwargs, 1, "item_attrs")))]

    def key_keys(backend: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
        return [(arg(args, kwargs, 0, "table_name"), arg(args, kwargs, 1, "key"))]

    def transaction_keys(backend: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
        out = []
        for entry in arg(args, kwargs, 0, "transact_items"):
            op_type, op = next(iter(entry.items()))
            if op_type == "ConditionCheck":
                continue
            table_name = op["TableName"]
            key = op["Key"] if "Key" in op else _key_of(backend.get_table(table_name), op["Item"])
            out.append((table_name, key))
        return out

    item_write("put_item", put_keys)
    item_write("update_item", key_keys)
    item_write("delete_item", key_keys)
    item_write("transact_write_items", transaction_keys)

    batch = DynamoHandler.batch_write_item

    def batch_write_item(self: Any) -> Any:
        with _changes():  # the items are recorded one by one inside; answered once all are on disk
            return batch(self)

    DynamoHandler.batch_write_item = batch_write_item  # type: ignore[method-assign]

    key_response = S3Response._key_response

    def _key_response(self: Any, request: Any, full_url: str) -> Any:
        with _changes() as store:
            if store is None or request.method not in ("PUT", "POST", "DELETE"):
                return key_response(self, request, full_url)
            bucket_name, key = _object_of(self, request, full_url)
            before = _current_object(bucket_name, key)
            result = key_response(self, request, full_url)
            if "partNumber" not in parse_qs(urlparse(full_url).query):
                _note(store.record_object(bucket_name, key, before))
            return result

    S3Response._key_response = _key_response  # type: ignore[method-assign]

    delete_keys = S3Response._bucket_response_delete_keys

    def _bucket_response_delete_keys(self: Any, bucket_name: str, authenticated: bool = True) -> Any:
        with _changes() as store:
            if store is None:
                return delete_keys(self, bucket_name, authenticated)
            named = _keys_to_delete(self.body)
            before = {key: _current_object(bucket_name, key) for key in named}
            result = delete_keys(self, bucket_name, authenticated)
            for key in named:
                _note(store.record_object(bucket_name, key, before[key]))
            return result

    S3Response._bucket_response_delete_keys = _bucket_response_delete_keys  # type: ignore[method-assign]
    _installed = True


def _object_of(response: Any, request: Any, full_url: str) -> tuple[str, str]:
    """The bucket and key of an object request (the handler has parsed the request already)."""
    return response.parse_bucket_name_from_url(request, full_url), response.parse_key_name()


def _current_object(bucket_name: str, key: str) -> Any:
    _, s3 = _backends()
    try:
        return s3.get_bucket(bucket_name).keys.get(key)
    except Exception:
        return None


def _keys_to_delete(body: Any) -> list[str]:
    import xmltodict

    try:
        parsed = xmltodict.parse(body, strip_whitespace=False)
        objects = parsed["Delete"].get("Object", [])
    except Exception:
        return []
    if not isinstance(objects, list):
        objects = [objects]
    return [str(o["Key"]) for o in objects if isinstance(o, dict) and "Key" in o]
