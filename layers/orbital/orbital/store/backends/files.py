"""The workspace on plain files, for the local gateway: `Workspace` with S3's semantics, in a directory.

    <root>/blobs/ab/<sha256>   the bytes of every object, named by their SHA-256 (one file for equal contents)
    <root>/index.sqlite3       key -> blob, size, ETag, content type, metadata, time of change and the further
                               headers given with it (encoding, disposition, language, cache control)
    <root>/tmp/                writes under way
    <root>/lock                held by the one `FileWorkspace` that has the directory open

Keys never become paths, so `a` and `a/b` are both objects, and any key S3 takes is one (but for NUL). A write
lands in `tmp/`, is fsynced, renamed to its blob name and the blob directory fsynced, then the index row is
committed (SQLite in WAL mode with `synchronous=FULL`): when `put` returns the object is on disk, and a crash at any
point leaves either the old object or the new one. A copy is one more row naming the same blob. A blob no row names any
more is removed at once; one left by a crash between the rename and the commit, and stray files in `tmp/`, are
removed when the directory is opened again. The index is `ObjectIndex`, the only part that knows SQL.

Presigned URLs point at the local gateway's own port (`orbital.local.object_urls`): `presign_get`/`presign_put`
need the gateway's base URL (`base_url`, a string or a callable read at each call, or `set_base_url`) and sign with
`signing_key` (drawn at random when not given). `ObjectRoute` serves them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal

from orbital.store.backends import private
from orbital.store.backends.signed_urls import ObjectUrls
from orbital.store.workspace import Headers, Listing, MissingObjectError, ObjectInfo, Workspace, check_key

INDEX_FILE = "index.sqlite3"
MAX_PUT_BYTES = 5 * 1024**3
"""The largest object one PUT writes: S3's limit for a single PUT, which is what a presigned upload to the AWS
workspace takes (the transfer engine and the node set no lower one)."""
DIR_MODE = 0o700


class WorkspaceInUseError(RuntimeError):
    """Another `FileWorkspace` (in this process or another) has the directory open."""


def successor(prefix: str) -> str | None:
    """The smallest text greater than every text that starts with `prefix` (None: no such text, every text from
    `prefix` on starts with it). Code point order is the order of UTF-8 bytes, SQLite's for text."""
    chars = list(prefix)
    while chars:
        code = ord(chars.pop()) + 1
        if code == 0xD800:  # surrogates have no UTF-8 form
            code = 0xE000
        if code <= 0x10FFFF:
            return "".join(chars) + chr(code)
    return None


def iso(modified_ns: int) -> str:
    return (
        datetime.fromtimestamp(modified_ns // 1_000_000_000, UTC)
        .replace(microsecond=(modified_ns // 1000) % 1_000_000)
        .isoformat()
    )


@dataclass(frozen=True)
class Entry:
    """One object of the index."""

    key: str
    blob: str
    """The SHA-256 of the bytes, in hex: the blob's file name."""
    size: int
    etag: str
    content_type: str
    content_encoding: str | None
    metadata: dict[str, str]
    modified_ns: int
    content_disposition: str | None = None
    content_language: str | None = None
    cache_control: str | None = None

    def info(self, *, listed: bool = False) -> ObjectInfo:
        """As `head` describes it, or as a listing does (`listed`: no content type, headers or metadata)."""
        if listed:
            return ObjectInfo(key=self.key, size=self.size, last_modified=iso(self.modified_ns), etag=self.etag)
        return ObjectInfo(
            key=self.key,
            size=self.size,
            last_modified=iso(self.modified_ns),
            content_type=self.content_type,
            metadata=dict(self.metadata),
            etag=self.etag,
            content_encoding=self.content_encoding,
            content_disposition=self.content_disposition,
            content_language=self.content_language,
            cache_control=self.cache_control,
        )


class ObjectIndex:
    """The index of the objects, in a SQLite database (the only code of the workspace that knows SQL). Not safe
    for concurrent use: `FileWorkspace` calls it under its lock. Every change is one committed transaction."""

    TABLE = "workspace_objects"
    COLUMNS = (
        "key, blob, size, etag, content_type, content_encoding, metadata, modified_ns, content_disposition, "
        "content_language, cache_control"
    )
    ADDED_COLUMNS = ("content_disposition", "content_language", "cache_control")
    """Added to an index written before they were kept (nullable text: NULL for the objects it holds)."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        """`connection` in autocommit mode (`isolation_level=None`): the index opens its own transactions."""
        self.db = connection
        with self._transaction():
            self.db.execute(
                f"CREATE TABLE IF NOT EXISTS {self.TABLE} (key TEXT PRIMARY KEY, blob TEXT NOT NULL, "
                "size INTEGER NOT NULL, etag TEXT NOT NULL, content_type TEXT NOT NULL, content_encoding TEXT, "
                "metadata TEXT, modified_ns INTEGER NOT NULL, content_disposition TEXT, content_language TEXT, "
                "cache_control TEXT) WITHOUT ROWID"
            )
            present = {str(row[1]) for row in self.db.execute(f"PRAGMA table_info({self.TABLE})")}
            for column in self.ADDED_COLUMNS:
                if column not in present:
                    self.db.execute(f"ALTER TABLE {self.TABLE} ADD COLUMN {column} TEXT")
            self.db.execute(f"CREATE INDEX IF NOT EXISTS {self.TABLE}_blob ON {self.TABLE} (blob)")

    @classmethod
    def open(cls, path: Path, *, durable: bool = True) -> ObjectIndex:
        db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={'FULL' if durable else 'OFF'}")
        return cls(db)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()

    @staticmethod
    def _entry(row: tuple[Any, ...]) -> Entry:
        key, blob, size, etag, content_type, encoding, metadata, modified_ns, disposition, language, caching = row
        return Entry(
            key,
            blob,
            size,
            etag,
            content_type,
            encoding,
            json.loads(metadata or "{}"),
            modified_ns,
            disposition,
            language,
            caching,
        )

    def get(self, key: str) -> Entry | None:
        row = self.db.execute(f"SELECT {self.COLUMNS} FROM {self.TABLE} WHERE key = ?", (key,)).fetchone()
        return None if row is None else self._entry(row)

    def put(self, entry: Entry) -> str | None:
        """Store `entry`; returns the blob the key named before, if any."""
        with self._transaction():
            before = self.db.execute(f"SELECT blob FROM {self.TABLE} WHERE key = ?", (entry.key,)).fetchone()
            self.db.execute(
                f"INSERT OR REPLACE INTO {self.TABLE} ({self.COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    entry.key,
                    entry.blob,
                    entry.size,
                    entry.etag,
                    entry.content_type,
                    entry.content_encoding,
                    json.dumps(entry.metadata) if entry.metadata else None,
                    entry.modified_ns,
                    entry.content_disposition,
                    entry.content_language,
                    entry.cache_control,
                ),
            )
        return None if before is None else str(before[0])

    def delete(self, key: str) -> str | None:
        """Remove `key`; returns the blob it named, if any."""
        with self._transaction():
            rows = self.db.execute(f"DELETE FROM {self.TABLE} WHERE key = ? RETURNING blob", (key,)).fetchall()
        return str(rows[0][0]) if rows else None

    def delete_prefix(self, prefix: str) -> list[str]:
        """Remove every key starting with `prefix`; returns the blobs they named (one per key)."""
        upper = successor(prefix)
        with self._transaction():
            if upper is None:
                rows = self.db.execute(f"DELETE FROM {self.TABLE} WHERE key >= ? RETURNING blob", (prefix,))
            else:
                rows = self.db.execute(
                    f"DELETE FROM {self.TABLE} WHERE key >= ? AND key < ? RETURNING blob", (prefix, upper)
                )
            return [str(row[0]) for row in rows.fetchall()]

    def listed(self, lower: str, upper: str | None) -> sqlite3.Cursor:
        """(key, size, etag, modified_ns) of the keys from `lower` (included) to `upper` (excluded; None: to the
        end), in key order, read as the cursor is iterated (close it when done)."""
        where, args = ("key >= ?", [lower]) if upper is None else ("key >= ? AND key < ?", [lower, upper])
        return self.db.execute(
            f"SELECT key, size, etag, modified_ns FROM {self.TABLE} WHERE {where} ORDER BY key", args
        )

    def referenced(self, blob: str) -> bool:
        return self.db.execute(f"SELECT 1 FROM {self.TABLE} WHERE blob = ? LIMIT 1", (blob,)).fetchone() is not None

    def blobs(self) -> set[str]:
        return {str(row[0]) for row in self.db.execute(f"SELECT DISTINCT blob FROM {self.TABLE}")}


class Upload:
    """The bytes of one object being written, in a temporary file (`FileWorkspace.upload`); `commit` makes it the
    object, `discard` drops it."""

    def __init__(self, directory: Path) -> None:
        fd, name = tempfile.mkstemp(dir=directory, prefix="up-")
        self.path: Path | None = Path(name)
        """The temporary file; None once it became a blob or was removed."""
        self.file: IO[bytes] | None = os.fdopen(fd, "wb")
        self.sha256 = hashlib.sha256()
        self.md5 = hashlib.md5(usedforsecurity=False)
        self.size = 0

    def write(self, data: bytes) -> None:
        assert self.file is not None, "write after commit or discard"
        self.file.write(data)
        self.sha256.update(data)
        self.md5.update(data)
        self.size += len(data)

    def finish(self, durable: bool) -> None:
        """Flush the bytes (and fsync them when `durable`) and close the file."""
        assert self.file is not None
        self.file.flush()
        if durable:
            os.fsync(self.file.fileno())
        self.file.close()
        self.file = None

    def discard(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            self.path = None

    def move_to(self, target: Path) -> None:
        assert self.file is None and self.path is not None, "move before finish, or after discard"
        self.path.replace(target)
        self.path = None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileWorkspace(Workspace):
    """Objects under `root` (see the module's docstring).

    `base_url`: the local gateway's HTTP URL (`http://127.0.0.1:8765`), or a callable giving it, for presigned URLs;
    `signing_key`: the key their signatures are made with (random when not given; never logged); `max_put_bytes`:
    the largest body a presigned PUT may carry; `durable`: off, nothing is fsynced (only to measure the cost);
    `index`: an index kept elsewhere (by default `root/index.sqlite3`); `exclusive` (the default): take the
    directory for this instance and clear what a crash left; off: open it beside the instance that has it (a tool
    reading or seeding a running gateway's workspace), which then sweeps nothing."""

    def __init__(
        self,
        root: Path,
        *,
        base_url: str | Callable[[], str] | None = None,
        signing_key: bytes | None = None,
        max_put_bytes: int = MAX_PUT_BYTES,
        durable: bool = True,
        index: ObjectIndex | None = None,
        exclusive: bool = True,
    ) -> None:
        self.root = Path(root)
        self.durable = durable
        self.max_put_bytes = max_put_bytes
        self.urls = ObjectUrls(signing_key if signing_key is not None else secrets.token_bytes(32), base_url)
        self._lock = threading.RLock()
        self._ensure_dir(self.root)
        self._lock_fd = self._take_lock() if exclusive else os.open(self.root, os.O_RDONLY)
        try:
            self.blobs = self.root / "blobs"
            self.tmp = self.root / "tmp"
            self._ensure_dir(self.blobs)
            self._ensure_dir(self.tmp)
            self._own_index = index is None
            self.index = index if index is not None else ObjectIndex.open(self.root / INDEX_FILE, durable=durable)
            if exclusive:
                self._recover()
        except BaseException:
            os.close(self._lock_fd)
            raise

    # --- opening and closing -----------------------------------------------------------------------------------

    def _ensure_dir(self, path: Path) -> None:
        if path.is_dir():
            return
        path.mkdir(mode=DIR_MODE, parents=True)
        if self.durable:
            _fsync_dir(path.parent)

    def _take_lock(self) -> int:
        try:
            return private.lock_exclusively(self.root / "lock")
        except private.LockHeldError:
            raise WorkspaceInUseError(f"{self.root} is open in another workspace (close that one first)") from None

    def _recover(self) -> None:
        """Remove what a crash may have left: writes under way, blobs no key names."""
        for stray in self.tmp.iterdir():
            stray.unlink(missing_ok=True)
        named = self.index.blobs()
        with os.scandir(self.blobs) as fans:
            for fan in fans:
                if not fan.is_dir(follow_symlinks=False):
                    continue
                with os.scandir(fan.path) as files:
                    for blob in files:
                        if blob.name not in named:
                            Path(blob.path).unlink(missing_ok=True)

    def close(self) -> None:
        with self._lock:
            if self._lock_fd < 0:
                return
            if self._own_index:
                self.index.close()
            os.close(self._lock_fd)
            self._lock_fd = -1

    def __enter__(self) -> FileWorkspace:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def set_base_url(self, base_url: str | Callable[[], str]) -> None:
        """Where presigned URLs point (the gateway's HTTP URL, once its port is known)."""
        self.urls.base_url = base_url

    # --- blobs ---------------------------------------------------------------------------------------------------

    def _blob_path(self, blob: str) -> Path:
        return self.blobs / blob[:2] / blob

    def _forget_blobs(self, blobs: Iterable[str]) -> None:
        """Remove the blobs no key names any more (under the lock)."""
        for blob in set(blobs):
            if not self.index.referenced(blob):
                self._blob_path(blob).unlink(missing_ok=True)

    def _store(self, entry: Entry) -> None:
        """Point `entry.key` at `entry.blob` (under the lock), dropping a blob that no key names any more."""
        before = self.index.put(entry)
        if before is not None and before != entry.blob:
            self._forget_blobs([before])

    # --- writing -------------------------------------------------------------------------------------------------

    def upload(self) -> Upload:
        """A new object's bytes, written in parts (`Upload.write`), then `commit`ted or `Upload.discard`ed."""
        return Upload(self.tmp)

    def commit(
        self,
        upload: Upload,
        key: str,
        *,
        content_type: str = "application/octet-stream",
        metadata: dict[str, str] | None = None,
        content_encoding: str | None = None,
        content_disposition: str | None = None,
        content_language: str | None = None,
        cache_control: str | None = None,
    ) -> Entry:
        """Make `upload` the object at `key`: on disk and in the index when this returns."""
        check_key(key)
        try:
            upload.finish(self.durable)
            blob = upload.sha256.hexdigest()
            entry = Entry(
                key=key,
                blob=blob,
                size=upload.size,
                etag=f'"{upload.md5.hexdigest()}"',
                content_type=content_type,
                content_encoding=content_encoding or None,
                metadata={name.lower(): value for name, value in (metadata or {}).items()},
                modified_ns=0,
                content_disposition=content_disposition or None,
                content_language=content_language or None,
                cache_control=cache_control or None,
            )
            target = self._blob_path(blob)
            with self._lock:
                if target.exists():  # the same bytes are stored already
                    upload.discard()
                else:
                    self._ensure_dir(target.parent)
                    upload.move_to(target)
                    if self.durable:
                        _fsync_dir(target.parent)
                entry = replace(entry, modified_ns=time.time_ns())
                self._store(entry)
            return entry
        finally:
            upload.discard()  # the temporary file, unless it became the blob

    def _put(self, key: str, body: bytes, headers: Headers) -> None:
        upload = self.upload()
        try:
            upload.write(bytes(body))
        except BaseException:
            upload.discard()
            raise
        self.commit(
            upload,
            key,
            content_type=headers.content_type,
            metadata=headers.metadata,
            content_encoding=headers.content_encoding,
            content_disposition=headers.content_disposition,
            content_language=headers.content_language,
            cache_control=headers.cache_control,
        )

    def _copy(self, source: str, destination: str, content_type: str) -> None:
        with self._lock:
            found = self.index.get(source)
            if found is None:
                raise MissingObjectError(source)
            copied = replace(
                found,
                key=destination,
                content_type=content_type,
                content_encoding=None,
                metadata={},
                modified_ns=time.time_ns(),
                content_disposition=None,
                content_language=None,
                cache_control=None,
            )
            self._store(copied)

    def _delete(self, key: str) -> None:
        with self._lock:
            blob = self.index.delete(key)
            if blob is not None:
                self._forget_blobs([blob])

    def _delete_prefix(self, prefix: str) -> int:
        with self._lock:
            blobs = self.index.delete_prefix(prefix)
            self._forget_blobs(blobs)
        return len(blobs)

    # --- reading -------------------------------------------------------------------------------------------------

    def entry(self, key: str) -> Entry | None:
        with self._lock:
            return self.index.get(key)

    def open(self, key: str) -> tuple[IO[bytes], Entry] | None:
        """The object's bytes as an open file (the caller closes it) and its entry; None when there is none. The
        file stays readable whatever is written or deleted meanwhile."""
        with self._lock:
            found = self.index.get(key)
            if found is None:
                return None
            try:
                return self._blob_path(found.blob).open("rb"), found
            except FileNotFoundError:
                raise OSError(f"the bytes of {key!r} are missing from {self.blobs}") from None

    def _head(self, key: str) -> ObjectInfo | None:
        found = self.entry(key)
        return None if found is None else found.info()

    def _get(self, key: str) -> tuple[bytes, ObjectInfo] | None:
        opened = self.open(key)
        if opened is None:
            return None
        fh, found = opened
        with fh:
            return fh.read(), found.info()

    def _stream(self, key: str) -> tuple[IO[bytes], ObjectInfo] | None:
        opened = self.open(key)
        if opened is None:
            return None
        fh, found = opened
        return fh, found.info()

    def _read_range(self, key: str, start: int, end: int) -> bytes | None:
        opened = self.open(key)
        if opened is None:
            return None
        fh, _ = opened
        with fh:
            fh.seek(start)
            return fh.read(end - start)

    def _listing(self, prefix: str, delimiter: str | None) -> Listing:
        keys: list[ObjectInfo] = []
        prefixes: list[str] = []
        upper = successor(prefix)
        lower: str | None = prefix
        with self._lock:
            while lower is not None:
                rows = self.index.listed(lower, upper)
                lower = None
                try:
                    for key, size, etag, modified_ns in rows:
                        cut = key.find(delimiter, len(prefix)) if delimiter else -1
                        if cut < 0:
                            keys.append(ObjectInfo(key, size, iso(modified_ns), etag=etag))
                            continue
                        common = key[: cut + len(delimiter or "")]
                        prefixes.append(common)
                        lower = successor(common)  # on past every key under this common prefix
                        break
                finally:
                    rows.close()
        return Listing(keys, prefixes)

    # --- URLs ----------------------------------------------------------------------------------------------------

    def _presign(self, method: Literal["GET", "PUT"], key: str, expires: int) -> str:
        return self.urls.url(method, key, expires)
