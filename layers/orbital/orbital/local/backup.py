"""Local backups of a data directory (ADR 0047): consistent snapshots taken while the gateway runs, kept in a
directory of their own, verified, pruned, and restored whole.

    <dir>/lock                    held (flock) by the one process taking, pruning or cleaning backups
    <dir>/blobs/ab/<sha256>       the bytes of every object of every backup, named by their SHA-256 (shared)
    <dir>/<name>/manifest.json    what the backup holds: item counts by kind, object key -> SHA-256, sizes
    <dir>/<name>/orbital.sqlite3  the table (SQLite's online backup of the data directory's database)
    <dir>/<name>/index.sqlite3    the workspace's index of objects (its online backup)
    <dir>/<name>/files/           the data directory's other files (its token)
    <dir>/.partial-<name>/        a backup being written (never listed; removed by the next start or backup)

`<name>` is the UTC time it was taken (`20261128T230512Z`). A backup is written under `.partial-<name>` and renamed
to `<name>` once it is complete, on disk and verified, so a half-written one is never listed and a crash (kill -9)
at any point leaves the earlier backups as they were. Verifying opens the copies and compares their item counts by
kind and the objects' hashes with the manifest (`verify`; `deep` also reads every blob back and hashes it).

The workspace already keeps objects by content hash (`orbital.store.backends.files`), and a blob never changes once
written: a backup hard-links the blobs it does not have yet into the shared store (copies them where the backup
directory is on another file system), so an unchanged object is never copied twice and a new backup of an unchanged
gateway adds no blob. The index is copied and the blobs linked under the workspace's lock (a write waits for it), so the
index and its blobs agree; the table is copied in one step of SQLite's backup API, a read transaction that sees one
commit and blocks no writer. Pruning keeps the newest `keep` backups and removes the blobs none of them names.

`Backups` is the engine of one open data directory (the gateway's, or the CLI's when no gateway runs); it answers
the `backup.status` and `backup.run` methods (`orbital.ports.backups`) and runs the schedule (`backup.every`).
`restore` puts a backup in place of a data directory no gateway holds, keeping the replaced one aside.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orbital import __version__
from orbital.domain.heartbeat import parse_every
from orbital.errors import ConflictError, GatewayFailureError
from orbital.store import keys
from orbital.store.backends import private
from orbital.store.backends.database import fsync_path

if TYPE_CHECKING:
    from orbital.local.store import LocalStore

log = logging.getLogger("orbital.local")

FORMAT = "orbital-backup"
VERSION = 1
DEFAULT_KEEP = 7
DEFAULT_DIR = "backups"
"""Under the data directory, unless `backup.dir` says otherwise."""
MANIFEST = "manifest.json"
TABLE_FILE = "orbital.sqlite3"
INDEX_FILE = "index.sqlite3"
FILES_DIR = "files"
BLOBS_DIR = "blobs"
LOCK_FILE = "lock"
PARTIAL = ".partial-"
NAME = re.compile(r"^\d{8}T\d{6}Z(?:-\d+)?$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
POLL_S = 1.0
"""How often the schedule looks at the configuration and the clock."""
SKIPPED_FILES = frozenset({"lock", "runtime.json", TABLE_FILE, f"{TABLE_FILE}-wal", f"{TABLE_FILE}-shm"})
"""Top-level files of a data directory a backup leaves out: what belongs to the process holding it, and the
database (copied through SQLite)."""
CHUNK = 1024 * 1024


class BackupError(Exception):
    """A backup cannot be taken, read or restored; the message says why."""


class BackupBusyError(ConflictError, BackupError):
    """Another backup is being taken."""

    def __init__(self, message: str = "a backup is already running") -> None:
        super().__init__(message)


class BackupCancelledError(BackupError):
    """The gateway stopped while a backup was being taken (nothing of it is kept)."""


@dataclass(frozen=True)
class BackupSettings:
    every_ms: int
    """0: no automatic backups."""
    every: str
    keep: int
    dir: Path


def settings_of(config: dict[str, Any], data_dir: Path) -> BackupSettings:
    """The `backup` section of the effective configuration `config`, for the data directory `data_dir`."""
    section = config.get("backup") if isinstance(config, dict) else None
    section = section if isinstance(section, dict) else {}
    every = section.get("every")
    every_text = every if isinstance(every, str) and every.strip() else "off"
    every_ms = 0 if every_text.strip().lower() == "off" else parse_every(every_text.strip())
    keep = section.get("keep")
    keep_n = keep if isinstance(keep, int) and not isinstance(keep, bool) and keep >= 1 else DEFAULT_KEEP
    where = section.get("dir")
    directory = Path(where).expanduser() if isinstance(where, str) and where.strip() else Path(DEFAULT_DIR)
    if not directory.is_absolute():
        directory = data_dir / directory
    return BackupSettings(every_ms=every_ms, every=every_text if every_ms else "off", keep=keep_n, dir=directory)


def stored_config(data_dir: Path) -> dict[str, Any]:
    """The configuration overrides kept in a data directory's table, read without opening the gateway's store (for
    the CLI: where its backups go). {} when there is no table or no configuration."""
    database = data_dir / TABLE_FILE
    if not database.is_file():
        return {}
    try:
        conn = _read_only(database)
        try:
            row = conn.execute("SELECT d FROM items WHERE pk = ? AND sk = ?", keys.CONFIG).fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return {}
    try:
        data = json.loads(row[0]) if row and row[0] else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


# --- what a backup is -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BackupInfo:
    name: str
    path: Path
    manifest: dict[str, Any]

    @property
    def at_ms(self) -> int:
        return int(self.manifest.get("createdAtMs", 0))

    @property
    def size_bytes(self) -> int:
        return int(self.manifest.get("sizeBytes", 0))

    def to_json(self, *, verified: bool = True) -> dict[str, Any]:
        """The `last` shape of `backup.status`."""
        return {
            "name": self.name,
            "at": self.at_ms,
            "sizeBytes": self.size_bytes,
            "items": int(self.manifest.get("itemCount", 0)),
            "objects": len(self.manifest.get("objects") or {}),
            "verified": verified,
        }


def _name_at(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y%m%dT%H%M%SZ")


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        data = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BackupError(f"{path.name}: no readable manifest ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BackupError(f"{path.name}: not an Orbital backup")
    if data.get("version") != VERSION:
        raise BackupError(f"{path.name}: written by another version of Orbital (format version {data.get('version')})")
    return data


def list_backups(directory: Path) -> list[BackupInfo]:
    """The complete backups in `directory`, oldest first (partial ones and other entries are not listed)."""
    found: list[BackupInfo] = []
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except FileNotFoundError:
        return []
    for entry in entries:
        if not NAME.match(entry.name) or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            found.append(BackupInfo(entry.name, Path(entry.path), _read_manifest(Path(entry.path))))
        except BackupError as exc:
            log.warning("backup %s is not listed: %s", entry.name, exc)
    return found


def find_backup(directory: Path, name: str) -> BackupInfo:
    if not NAME.match(name):
        raise BackupError(f"{name!r} is not the name of a backup (such as 20261128T230512Z): see `orbital backup list`")
    for info in list_backups(directory):
        if info.name == name:
            return info
    raise BackupError(f"no backup {name} in {directory}: see `orbital backup list`")


def _read_only(database: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{database.absolute().as_uri()}?mode=ro", uri=True)


def _blob_path(directory: Path, blob: str) -> Path:
    return directory / BLOBS_DIR / blob[:2] / blob


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _item_counts(database: Path) -> Counter[str]:
    counts: Counter[str] = Counter()
    conn = _read_only(database)
    try:
        for pk, sk in conn.execute("SELECT pk, sk FROM items"):
            counts[keys.item_kind(pk, sk)] += 1
    finally:
        conn.close()
    return counts


def _index_objects(index: Path) -> dict[str, tuple[str, int]]:
    """key -> (blob, size) of a copy of the workspace's index."""
    conn = _read_only(index)
    try:
        return {str(k): (str(b), int(s)) for k, b, s in conn.execute("SELECT key, blob, size FROM workspace_objects")}
    finally:
        conn.close()


def verify(directory: Path, path: Path, *, deep: bool = False, hashed: set[str] | None = None) -> dict[str, Any]:
    """Check the backup at `path` (in the backup directory `directory`) against its manifest: the table copy opens and
    holds the items it lists by kind, the index copy names the same object -> blob map, and every blob is in the
    store with its size. `deep`: every blob is read and hashed too (`hashed`: only these). BackupError if not."""
    manifest = _read_manifest(path)
    try:
        counts = _item_counts(path / TABLE_FILE)
        objects = _index_objects(path / INDEX_FILE)
    except sqlite3.Error as exc:
        raise BackupError(f"{path.name}: its database copies cannot be read ({exc})") from None
    if dict(counts) != manifest.get("items"):
        raise BackupError(f"{path.name}: its table does not hold the items its manifest lists")
    listed = manifest.get("objects") or {}
    if {key: blob for key, (blob, _size) in objects.items()} != listed:
        raise BackupError(f"{path.name}: its index does not name the objects its manifest lists")
    for blob, size in dict(objects.values()).items():
        if not SHA256.match(blob):
            raise BackupError(f"{path.name}: an object names the blob {blob[:80]!r}, which is no SHA-256")
        stored = _blob_path(directory, blob)
        try:
            actual = stored.stat().st_size
        except OSError:
            raise BackupError(f"{path.name}: the blob {blob} is missing") from None
        if actual != size:
            raise BackupError(f"{path.name}: the blob {blob} is {actual} bytes, not {size}")
        if (deep or (hashed is not None and blob in hashed)) and _hash_file(stored) != blob:
            raise BackupError(f"{path.name}: the blob {blob} does not hold what it was written with")
    return manifest


# --- the backup directory ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _held(directory: Path) -> Iterator[None]:
    """The backup directory for this process (created 0700): BackupBusyError if another process has it."""
    _make_dir(directory)
    try:
        fd = private.lock_exclusively(directory / LOCK_FILE)
    except private.LockHeldError as held:
        raise BackupBusyError(f"a backup is being taken in {directory} (pid {held.holder or '?'})") from None
    try:
        yield
    finally:
        os.close(fd)


def _make_dir(directory: Path) -> None:
    """Create `directory` readable by its owner only. One that exists keeps its mode (a `backup.dir` may name a
    directory shared with other things): what a backup writes in it is 0700 and 0600 itself."""
    if not directory.exists():
        directory.mkdir(parents=True, mode=private.DIR_MODE)
        directory.chmod(private.DIR_MODE)  # mkdir's mode is subject to the umask


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _clean(directory: Path) -> tuple[int, int]:
    """Remove partial backups and blobs that no complete backup names (under the directory's lock). Returns
    (partial backups removed, blobs removed)."""
    partials = 0
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(directory):
            if entry.name.startswith(PARTIAL) and entry.is_dir(follow_symlinks=False):
                _remove_tree(Path(entry.path))
                partials += 1
    named: set[str] = set()
    for info in list_backups(directory):
        named.update(str(blob) for blob in (info.manifest.get("objects") or {}).values())
    removed = 0
    blobs = directory / BLOBS_DIR
    with contextlib.suppress(FileNotFoundError):
        for fan in os.scandir(blobs):
            if not fan.is_dir(follow_symlinks=False):
                Path(fan.path).unlink(missing_ok=True)  # a copy a crash cut short
                continue
            for blob in os.scandir(fan.path):
                if blob.name not in named:
                    Path(blob.path).unlink(missing_ok=True)
                    removed += 1
    return partials, removed


def clean(directory: Path) -> tuple[int, int]:
    """What a crash left in `directory` (partial backups, blobs none names) removed; BackupBusyError while a backup is
    being taken there."""
    if not directory.is_dir():
        return 0, 0
    with _held(directory):
        return _clean(directory)


def _prune(directory: Path, keep: int) -> list[str]:
    """Remove the oldest complete backups beyond `keep` (each renamed to a partial first, so a crash in the middle
    never leaves half of one listed), then the blobs none of the rest names."""
    backups = list_backups(directory)
    gone = backups[: max(0, len(backups) - keep)]
    for info in gone:
        doomed = directory / f"{PARTIAL}{info.name}"
        info.path.rename(doomed)
        _remove_tree(doomed)
    if gone:
        fsync_path(directory)
    _clean(directory)
    return [info.name for info in gone]


# --- taking a backup --------------------------------------------------------------------------------------------------


@dataclass
class Taken:
    info: BackupInfo
    new_blobs: int
    new_blob_bytes: int
    pruned: list[str]


def _link_or_copy(source: Path, target: Path, tmp_dir: Path) -> None:
    """`target` holds the bytes of `source`: a hard link, or a copy written aside and renamed (another file
    system)."""
    try:
        os.link(source, target)
        return
    except FileExistsError:
        return
    except OSError:
        pass
    tmp = tmp_dir / f".copy-{os.getpid()}-{threading.get_ident()}"
    with source.open("rb") as src, open(tmp, "wb") as dst:
        shutil.copyfileobj(src, dst, CHUNK)
        dst.flush()
        os.fsync(dst.fileno())
    tmp.chmod(private.FILE_MODE)
    tmp.replace(target)


def _copy_database(source: sqlite3.Connection, target: Path) -> None:
    """An online backup of `source` into the new file `target`, in one step (one read transaction: one commit's
    state), left as a self-contained file (no WAL)."""
    dst = sqlite3.connect(target)
    try:
        source.backup(dst)
        dst.execute("PRAGMA journal_mode=DELETE")
    finally:
        dst.close()
    target.chmod(private.FILE_MODE)
    fd = os.open(target, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def take(
    store: LocalStore,
    data_dir: Path,
    directory: Path,
    *,
    keep: int,
    now_ms: int | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Taken:
    """Take a backup of the open data directory `store` into `directory`, verify it, then prune beyond `keep`.
    BackupBusyError while another is being taken there; BackupError if it cannot be taken (nothing of it is kept)."""
    if directory.expanduser().absolute() == data_dir.expanduser().absolute():
        raise BackupError("the backup directory cannot be the data directory itself: set backup.dir to another one")
    with _held(directory):
        _clean(directory)  # partials of a crash
        at = now_ms if now_ms is not None else int(time.time() * 1000)
        name = _name_at(at)
        n = 1
        while (directory / name).exists():
            n += 1
            name = f"{_name_at(at)}-{n}"
        partial = directory / f"{PARTIAL}{name}"
        partial.mkdir(mode=private.DIR_MODE)
        try:
            taken = _write(store, data_dir, directory, partial, name, at, cancelled or (lambda: False))
            final = directory / name
            partial.rename(final)
            fsync_path(directory)
        except BaseException:
            _remove_tree(partial)
            raise
        info = BackupInfo(name, final, taken[0])
        pruned = _prune(directory, keep)
    return Taken(info, taken[1], taken[2], pruned)


def _copy_workspace(
    store: LocalStore, directory: Path, partial: Path, cancelled: Callable[[], bool]
) -> tuple[dict[str, tuple[str, int]], set[str], int]:
    """The workspace: its index and the blobs it names, under its lock (no write in between). Returns the objects
    (key → blob and size), the blobs this backup added to the directory's store, and their bytes."""
    workspace = store.workspace
    blobs_dir = directory / BLOBS_DIR
    _make_dir(blobs_dir)
    new_blobs: set[str] = set()
    new_bytes = 0
    fans: set[Path] = set()
    with workspace._lock:
        _copy_database(workspace.index.db, partial / INDEX_FILE)
        objects = _index_objects(partial / INDEX_FILE)
        for blob, size in dict(objects.values()).items():
            if cancelled():
                raise BackupCancelledError("the gateway is stopping")
            target = _blob_path(directory, blob)
            if target.exists():
                continue
            if target.parent not in fans and not target.parent.is_dir():
                target.parent.mkdir(mode=private.DIR_MODE)
            fans.add(target.parent)
            try:
                _link_or_copy(workspace.blobs / blob[:2] / blob, target, blobs_dir)
            except FileNotFoundError:
                raise BackupError(f"the workspace's blob {blob} is missing: the data directory is damaged") from None
            new_blobs.add(blob)
            new_bytes += size
    for fan in fans:
        fsync_path(fan)
    return objects, new_blobs, new_bytes


def _copy_files(data_dir: Path, files: Path) -> int:
    """The data directory's other files (its token), copied into `files`; returns their bytes."""
    files.mkdir(mode=private.DIR_MODE)
    file_bytes = 0
    for entry in os.scandir(data_dir):
        if entry.name in SKIPPED_FILES or entry.name.startswith(".") or not entry.is_file(follow_symlinks=False):
            continue
        shutil.copyfile(entry.path, files / entry.name)
        (files / entry.name).chmod(private.FILE_MODE)
        file_bytes += entry.stat(follow_symlinks=False).st_size
    return file_bytes


def _write(
    store: LocalStore,
    data_dir: Path,
    directory: Path,
    partial: Path,
    name: str,
    at: int,
    cancelled: Callable[[], bool],
) -> tuple[dict[str, Any], int, int]:
    # the table: one step of the online backup, from a connection of its own
    source = _read_only(Path(store.db.path))
    try:
        _copy_database(source, partial / TABLE_FILE)
    finally:
        source.close()
    if cancelled():
        raise BackupCancelledError("the gateway is stopping")
    objects, new_blobs, new_bytes = _copy_workspace(store, directory, partial, cancelled)
    files = partial / FILES_DIR
    file_bytes = _copy_files(data_dir, files)
    counts = _item_counts(partial / TABLE_FILE)
    size = (
        (partial / TABLE_FILE).stat().st_size
        + (partial / INDEX_FILE).stat().st_size
        + file_bytes
        + sum(dict(objects.values()).values())
    )
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "name": name,
        "createdAt": datetime.fromtimestamp(at / 1000, UTC).isoformat().replace("+00:00", "Z"),
        "createdAtMs": at,
        "orbitalVersion": __version__,
        "dataDir": str(data_dir),
        "items": dict(sorted(counts.items())),
        "itemCount": sum(counts.values()),
        "objects": {key: blob for key, (blob, _size) in sorted(objects.items())},
        "objectBytes": sum(s for _k, (_b, s) in objects.items()),
        "sizeBytes": size,
        "newBlobs": len(new_blobs),
        "newBlobBytes": new_bytes,
    }
    private.write_private(partial / MANIFEST, json.dumps(manifest, indent=1).encode())
    fsync_path(partial / MANIFEST)
    fsync_path(files)
    fsync_path(partial)
    verify(directory, partial, hashed=new_blobs)  # what it copied now is read back and hashed
    return manifest, len(new_blobs), new_bytes


# --- the engine of a running gateway ----------------------------------------------------------------------------------


class LocalBackups:
    """The backups of one open data directory: `run` one now, `status`, and the schedule (`start`/`stop`) that
    takes one every `backup.every` (next due from the last backup's time; one at a time). `config` gives the
    effective configuration, read at every use."""

    def __init__(self, store: LocalStore, data_dir: Path, config: Callable[[], dict[str, Any]]) -> None:
        self.store = store
        self.data_dir = data_dir
        self.config = config
        self._running = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: dict[Path, BackupInfo | None] = {}
        self.failure: str | None = None
        """The last automatic backup's error, until one succeeds."""

    def settings(self) -> BackupSettings:
        return settings_of(self.config(), self.data_dir)

    def _latest(self, directory: Path) -> BackupInfo | None:
        if directory not in self._last:
            backups = list_backups(directory)
            self._last[directory] = backups[-1] if backups else None
        return self._last[directory]

    @property
    def running(self) -> bool:
        return self._running.locked()

    def run(self, *, now_ms: int | None = None) -> dict[str, Any]:
        """Take a backup now: the `last` shape of `backup.status`. BackupBusyError (409) while one is being taken; a
        GatewayFailureError (500) saying why when it cannot be taken."""
        try:
            return self.take(now_ms=now_ms).info.to_json()
        except BackupBusyError:
            raise
        except (BackupError, OSError, sqlite3.Error) as exc:
            raise GatewayFailureError(f"the backup failed: {exc}") from None

    def take(self, *, now_ms: int | None = None) -> Taken:
        if not self._running.acquire(blocking=False):
            raise BackupBusyError()
        try:
            settings = self.settings()
            taken = take(
                self.store, self.data_dir, settings.dir, keep=settings.keep, now_ms=now_ms, cancelled=self._stop.is_set
            )
            self._last[settings.dir] = taken.info
            log.info(
                "backup %s taken in %s: %d items, %d objects (%d new blobs)%s",
                taken.info.name,
                settings.dir,
                int(taken.info.manifest["itemCount"]),
                len(taken.info.manifest["objects"]),
                taken.new_blobs,
                f"; removed {', '.join(taken.pruned)}" if taken.pruned else "",
            )
            return taken
        finally:
            self._running.release()

    def status(self, *, now_ms: int | None = None) -> dict[str, Any]:
        """`backup.status`'s answer."""
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        settings = self.settings()
        backups = list_backups(settings.dir)
        last = backups[-1] if backups else None
        self._last[settings.dir] = last
        status: dict[str, Any] = {
            "available": True,
            "every": settings.every,
            "keep": settings.keep,
            "dir": str(settings.dir),
            "running": self.running,
            "last": last.to_json() if last else None,
            "next": self._next_ms(settings, last, now),
            "count": len(backups),
        }
        if self.failure:
            status["error"] = self.failure
        return status

    @staticmethod
    def _next_ms(settings: BackupSettings, last: BackupInfo | None, now: int) -> int | None:
        if settings.every_ms <= 0:
            return None
        return now if last is None else max(now, last.at_ms + settings.every_ms)

    # --- the schedule ------------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Remove what a crash left in the backup directory, then run the schedule on a thread of its own."""
        with contextlib.suppress(BackupError, OSError):
            partials, blobs = clean(self.settings().dir)
            if partials or blobs:
                log.warning(
                    "removed %d partial backup(s) and %d unreferenced blob(s) left by an interrupted backup",
                    partials,
                    blobs,
                )
        self._thread = threading.Thread(target=self._schedule, name="orbital-backup", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None

    def due(self, now_ms: int) -> bool:
        settings = self.settings()
        if settings.every_ms <= 0:
            return False
        last = self._latest(settings.dir)
        return last is None or now_ms >= last.at_ms + settings.every_ms

    def _schedule(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                if not self.due(int(time.time() * 1000)):
                    continue
                self.take()
                self.failure = None
            except BackupBusyError:
                continue
            except BackupCancelledError:
                return
            except Exception as exc:
                self.failure = f"the automatic backup failed: {exc}"
                log.exception("automatic backup failed")
                self._stop.wait(max(POLL_S, self.settings().every_ms / 1000))  # not again at once


# --- restoring --------------------------------------------------------------------------------------------------------


def restore(data_dir: Path, directory: Path, name: str, *, now: float | None = None) -> Path | None:
    """Put the backup `name` of `directory` in place of `data_dir`, which no process may hold (its lock is taken
    here): the backup is verified (every blob hashed), a new data directory is built beside it, the current one is
    renamed `<data_dir>.replaced-<UTC time>` (returned) and the new one takes its name. A backup directory inside the
    replaced data directory moves into the new one (None returned when there was no data directory: a lost one is
    restored from a backup kept elsewhere). BackupError if it cannot be done (nothing is changed then)."""
    data_dir = data_dir.expanduser().absolute()
    directory = directory.expanduser().absolute()
    info = find_backup(directory, name)
    stamp = datetime.fromtimestamp(now if now is not None else time.time(), UTC).strftime("%Y%m%dT%H%M%SZ")
    aside = data_dir.with_name(f"{data_dir.name}.replaced-{stamp}")
    if aside.exists():
        raise BackupError(f"{aside} exists already: move it away first")
    lock_fd: int | None = None
    existed = data_dir.exists()
    if existed:
        try:
            lock_fd = private.lock_exclusively(data_dir / "lock")
        except private.LockHeldError as held:
            raise BackupError(
                f"{data_dir} is in use (pid {held.holder or '?'}): stop the gateway first (Ctrl-C where it runs)"
            ) from None
    staging = data_dir.with_name(f".{data_dir.name}.restoring-{stamp}")
    try:
        with _held(directory):
            manifest = verify(directory, info.path, deep=True)
            _remove_tree(staging)
            _build(directory, info, manifest, staging)
        inside = directory.is_relative_to(data_dir) and data_dir.exists()
        if existed:
            data_dir.rename(aside)
        if inside:
            moved = aside / directory.relative_to(data_dir)
            target = staging / directory.relative_to(data_dir)
            target.parent.mkdir(parents=True, exist_ok=True, mode=private.DIR_MODE)
            moved.rename(target)
        staging.rename(data_dir)
        fsync_path(data_dir.parent)
    except BaseException:
        _remove_tree(staging)
        raise
    finally:
        if lock_fd is not None:
            os.close(lock_fd)
    return aside if existed else None


def _build(directory: Path, info: BackupInfo, manifest: dict[str, Any], staging: Path) -> None:
    """A data directory made of the backup `info`, at `staging`."""
    staging.mkdir(mode=private.DIR_MODE)
    shutil.copyfile(info.path / TABLE_FILE, staging / TABLE_FILE)
    (staging / TABLE_FILE).chmod(private.FILE_MODE)
    objects = staging / "objects"
    blobs = objects / "blobs"
    blobs.mkdir(parents=True, mode=private.DIR_MODE)
    (objects / "tmp").mkdir(mode=private.DIR_MODE)
    shutil.copyfile(info.path / INDEX_FILE, objects / INDEX_FILE)
    (objects / INDEX_FILE).chmod(private.FILE_MODE)
    for blob in sorted(set((manifest.get("objects") or {}).values())):
        fan = blobs / blob[:2]
        if not fan.is_dir():
            fan.mkdir(mode=private.DIR_MODE)
        _link_or_copy(_blob_path(directory, blob), fan / blob, blobs)
    files = info.path / FILES_DIR
    if files.is_dir():
        for entry in os.scandir(files):
            if entry.is_file(follow_symlinks=False) and entry.name not in SKIPPED_FILES:
                shutil.copyfile(entry.path, staging / entry.name)
                (staging / entry.name).chmod(private.FILE_MODE)
    for path in (staging / TABLE_FILE, objects / INDEX_FILE):
        fsync_path(path)
    for path in (blobs, objects, staging):
        fsync_path(path)
