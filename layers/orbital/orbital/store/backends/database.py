"""The local gateway's SQLite database: one file in the data directory, shared by the components that keep state in it.

`Database` owns the file and its connections and makes a write durable before it is acknowledged:

- **WAL mode**, so readers never wait for the writer nor the writer for readers. Reads use a pool of connections
  (one per thread reading at that moment); all writes go through one connection, one transaction at a time, in the
  order a lock hands it out. `transaction()` holds that lock from `BEGIN IMMEDIATE` to `COMMIT`, so a read-check-write
  inside it is atomic.
- **Group commit.** The writer runs with `synchronous=NORMAL`: a commit writes its frames to the `-wal` file without
  syncing it. A durable transaction then waits, after releasing the lock, until an `fsync` of the `-wal` file that
  began after its commit has finished. The first waiter to find no sync running starts one and covers every commit
  made so far; those arriving meanwhile wait for the next. So many writers share one fsync, and the lock is never
  held across one. (`sync="full"` instead makes every commit sync the WAL itself, `synchronous=FULL`, under the lock:
  kept to measure against, see `bench/table_sqlite.py`.) A failed fsync fails every waiter, and every write after it.
- A transaction opened with `durable=False` (what does not outlive the process) does not wait; it reaches the disk
  with the next sync. With `durable=False` on the database, nothing waits (`GatewayOptions.durable`).
- **Checkpoints** (copying the WAL into the main file) run on a thread of their own every `CHECKPOINT_EVERY` commits
  and every second, never on a writer's time.
- **What changed since.** `state()` reads the WAL index's header (the first bytes of the `-shm` file, which SQLite's
  unix and Windows VFSes map into every process that has the database open; its layout is documented in SQLite's
  walformat.html): every commit, by any connection of any process, writes a new one, so two equal states mean
  nothing was committed in between. A read costs a `pread` and an `fstat`, and no lock: what lets a reader keep rows
  it read (`SqliteTable`) and still see every commit, also one made by a tool writing beside the gateway.
- Opening an existing file recovers every committed transaction (SQLite replays the WAL); a transaction whose
  frames were torn by a crash was not acknowledged, and is dropped whole.

Other components keep their own tables in the same file: `schema()` creates them once (with a version), and
`transaction()` nests — a transaction opened inside another on the same thread is a savepoint of it, so a component
can write its rows and the table's items in one atomic commit. `reading()` lends a connection for reads (inside a
transaction, the transaction's own, so it sees what the transaction wrote).

Thread-safe; one process per file (the data directory's lock keeps a second gateway out).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Literal

log = logging.getLogger("orbital.local")

SCHEMA_TABLE = "orbital_schema"
CHECKPOINT_EVERY = 256
"""Commits between two checkpoints (the WAL then holds a few MB at most)."""
CHECKPOINT_INTERVAL_S = 1.0
WAL_SIZE_LIMIT = 64 * 1024 * 1024
"""A WAL larger than this (after a burst) is cut back to it once checkpointed."""

WAL_INDEX_HEADER = 48
"""Bytes of the WAL index header that `Database.state` compares (its first copy: SQLite writes it last)."""

Sync = Literal["group", "full"]


class DatabaseError(RuntimeError):
    """The database cannot be used: closed, written by a newer version, or its disk failed a sync."""


def _fsync(fd: int) -> None:
    """The file's data on disk (and what is needed to read it back: its size), as SQLite syncs its own files."""
    if sys.platform == "darwin":  # pragma: no cover - fsync there does not flush the drive's cache
        import fcntl

        full = getattr(fcntl, "F_FULLFSYNC", None)
        if full is not None:
            fcntl.fcntl(fd, full)
            return
    sync = getattr(os, "fdatasync", os.fsync)  # no wait for the modification time
    sync(fd)


def _open_wal_index(database: Path) -> int | None:
    """A read-only descriptor of the database's WAL index (None where there is no `-shm` file: then
    `Database.state` is None and nothing is kept by readers). It is read with `pread`, never mapped: a mapping of a
    file that SQLite truncates under it ends the process with SIGBUS at the next read, where a read just comes back
    short."""
    try:
        return os.open(f"{database}-shm", os.O_RDONLY)
    except OSError:
        return None


def fsync_path(directory: Path) -> None:
    """A directory's entries (or a file's data) on disk; a path that cannot be opened or synced is let be."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class Transaction:
    """`with database.transaction() as conn:` — see `Database.transaction`."""

    __slots__ = ("_db", "_durable", "_outer", "_savepoint")

    def __init__(self, db: Database, durable: bool) -> None:
        self._db = db
        self._durable = durable
        self._outer: Transaction | None = None
        self._savepoint = ""

    def __enter__(self) -> sqlite3.Connection:
        db = self._db
        outer: Transaction | None = getattr(db._local, "tx", None)
        if outer is not None:
            self._outer = outer
            outer._durable = outer._durable or self._durable
            depth = getattr(db._local, "depth", 0) + 1
            db._local.depth = depth
            self._savepoint = f"orbital_sp{depth}"
            db._writer.execute(f"SAVEPOINT {self._savepoint}")
            return db._writer
        db._lock.acquire()
        try:
            db._check_open()
            db._writer.execute("BEGIN IMMEDIATE")
        except BaseException:
            db._lock.release()
            raise
        db._local.tx = self
        db._local.depth = 0
        return db._writer

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        db = self._db
        conn = db._writer
        if self._outer is not None:
            db._local.depth -= 1
            if exc_type is not None:
                conn.execute(f"ROLLBACK TO {self._savepoint}")
            conn.execute(f"RELEASE {self._savepoint}")
            return
        seq = 0
        try:
            if exc_type is None:
                try:
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                db._committed += 1
                seq = db._committed
                if seq % CHECKPOINT_EVERY == 0:
                    db._checkpoint_due.set()
            elif conn.in_transaction:
                conn.execute("ROLLBACK")
        finally:
            db._local.tx = None
            db._lock.release()
        if seq and self._durable:
            db.wait_durable(seq)


class Database:
    """One SQLite database file (see the module's docstring).

    `Database(path)` opens (or creates) the file; `close()` (or leaving a `with` block) closes it. `durable=False`:
    nothing waits for the disk. `sync`: "group" (the default) or "full" (see the module's docstring).
    `checkpoint_interval_s`: the longest time between two checkpoints (None: only every `CHECKPOINT_EVERY`
    commits)."""

    def __init__(
        self,
        path: Path | str,
        *,
        durable: bool = True,
        sync: Sync = "group",
        checkpoint_interval_s: float | None = CHECKPOINT_INTERVAL_S,
    ) -> None:
        if sync not in ("group", "full"):
            raise ValueError(f"sync is 'group' or 'full', not {sync!r}")
        self.path = Path(path)
        self.durable = durable
        self.sync = sync
        self._local = threading.local()
        self._lock = threading.Lock()
        """Held by the one transaction writing (`Transaction`)."""
        self._idle: list[sqlite3.Connection] = []
        """Read connections not lent out."""
        self._readers: list[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()
        self._closed = False
        self._committed = 0
        """Transactions committed so far (each one's number is what `wait_durable` takes)."""
        self._synced = 0
        """Every transaction up to this number is on disk."""
        self._syncing = False
        self._sync_cond = threading.Condition(threading.Lock())
        self._failure: BaseException | None = None
        self.syncs = 0
        """fsyncs of the WAL made so far (for tests and benchmarks)."""
        self._checkpoint_due = threading.Event()
        self._checkpoint_interval_s = checkpoint_interval_s
        self._checkpointer: threading.Thread | None = None
        self._stopping = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._wal_fd = -1
        self._wal_index: int | None = None
        """(descriptor, inode) of the `-shm` file, read by `state`."""
        try:
            self._writer = self._connect()
        except sqlite3.Error as exc:
            raise DatabaseError(f"{self.path}: cannot open the database: {exc}") from exc
        try:
            mode = self._writer.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise DatabaseError(f"{self.path}: SQLite could not use WAL mode (got {mode})")
            full = durable and sync == "full"
            self._writer.execute(f"PRAGMA synchronous={'FULL' if full else 'NORMAL'}")
            self._writer.execute("PRAGMA wal_autocheckpoint=0")  # the checkpointer's thread does it, not a writer
            self._writer.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
            self._writer.execute(
                f"CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} (component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
            )
            if durable and sync == "group":
                self._wal_fd = os.open(f"{self.path}-wal", os.O_RDONLY)
        except (sqlite3.Error, OSError) as exc:
            self._writer.close()
            raise DatabaseError(f"{self.path}: cannot open the database: {exc}") from exc
        except BaseException:
            self._writer.close()
            raise
        fsync_path(self.path.parent)  # the file and its WAL (new at every open) are in the directory for good
        # the WAL index's header (`state`); the writer's open connection keeps the `-shm` file and its size
        self._wal_index = _open_wal_index(self.path)
        self._checkpointer = threading.Thread(target=self._checkpoints, name="orbital-db-checkpoint", daemon=True)
        self._checkpointer.start()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, cached_statements=256)
        conn.execute("PRAGMA busy_timeout=10000")
        return conn

    def _check_open(self) -> None:
        if self._closed:
            raise DatabaseError(f"{self.path}: the database is closed")
        if self._failure is not None:
            raise DatabaseError(f"{self.path}: the database could not be synced to disk: {self._failure}")

    # --- writing ------------------------------------------------------------------------------------------------

    def transaction(self, *, durable: bool = True) -> Transaction:
        """`with db.transaction() as conn:` runs `conn.execute(...)` statements in one transaction, alone among the
        writers: committed when the block ends, rolled back if it raises. A durable transaction returns only once
        its commit is on disk (`durable=False`: once committed; it reaches the disk with the next sync). Inside
        another transaction of this thread it is a savepoint of that one (rolled back alone if it raises; on disk
        with the outer commit, which then waits if either is durable)."""
        return Transaction(self, durable)

    def wait_durable(self, seq: int) -> None:
        """Return once transaction number `seq` (and every one before it) is on disk."""
        if not self.durable or self.sync == "full":
            return
        cond = self._sync_cond
        with cond:
            while self._synced < seq:
                if self._failure is not None:
                    raise DatabaseError(f"{self.path}: the database could not be synced to disk: {self._failure}")
                if self._syncing:
                    cond.wait()
                    continue
                self._syncing = True
                upto = self._committed  # every commit counted here has written its frames to the WAL
                cond.release()
                failure: BaseException | None = None
                try:
                    _fsync(self._wal_fd)
                    self.syncs += 1
                except BaseException as exc:  # every waiter must hear of it, or it would wait for ever
                    failure = exc
                finally:
                    cond.acquire()
                    self._syncing = False
                    if failure is None:
                        self._synced = max(self._synced, upto)
                    elif self._failure is None:
                        self._failure = failure
                    cond.notify_all()

    @property
    def committed(self) -> int:
        """Transactions committed so far."""
        return self._committed

    @property
    def synced(self) -> int:
        """Every transaction up to this number is on disk (with `durable=False`, 0)."""
        if self.sync == "full" and self.durable:
            return self._committed
        return self._synced

    def schema(self, component: str, version: int, statements: Sequence[str]) -> int:
        """Create a component's tables once: run `statements` (`CREATE TABLE …`) if the component has no version
        recorded yet, and record `version`. A database whose recorded version is newer is refused (written by a
        newer Orbital). Returns the version found before (0: none)."""
        with self.transaction() as conn:
            row = conn.execute(f"SELECT version FROM {SCHEMA_TABLE} WHERE component = ?", (component,)).fetchone()
            found = int(row[0]) if row else 0
            if found > version:
                raise DatabaseError(
                    f"{self.path}: {component} was written by a newer Orbital"
                    f" (schema {found}, this one knows {version})"
                )
            if found < version:
                for statement in statements:
                    conn.execute(statement)
                conn.execute(
                    f"INSERT OR REPLACE INTO {SCHEMA_TABLE} (component, version) VALUES (?, ?)", (component, version)
                )
        return found

    # --- reading ------------------------------------------------------------------------------------------------

    def state(self) -> bytes | None:
        """What has been committed, as a value that changes with every commit, by any connection in any process
        (the WAL index's header): equal twice, nothing was committed in between. Read before a read, it is the
        oldest state that read can see. None when it cannot be told (no WAL index open, the database closed, a
        short read, or a `-shm` file that is no longer the one opened): readers then keep nothing."""
        opened = self._wal_index
        if opened is None:
            return None
        try:
            header = os.pread(opened, WAL_INDEX_HEADER, 0)
            # no link left: the file was removed or replaced, and the one at the path is not ours to read
            if len(header) < WAL_INDEX_HEADER or os.fstat(opened).st_nlink == 0:
                return None
        except OSError:  # closed meanwhile, or the file is gone
            return None
        return header

    def in_transaction(self) -> bool:
        """Whether this thread is inside a transaction (its reads then see its own uncommitted writes)."""
        return getattr(self._local, "tx", None) is not None

    def reader(self) -> sqlite3.Connection:
        """A connection to read with, lent until `give_back`; inside a transaction of this thread, the transaction's
        own (which sees what it wrote). `reading()` does both."""
        if self.in_transaction():
            return self._writer
        try:
            return self._idle.pop()
        except IndexError:
            pass
        self._check_open()
        conn = self._connect()
        conn.execute("PRAGMA query_only=1")
        with self._pool_lock:
            if self._closed:
                conn.close()
                raise DatabaseError(f"{self.path}: the database is closed")
            self._readers.append(conn)
        return conn

    def give_back(self, conn: sqlite3.Connection) -> None:
        if conn is not self._writer:
            self._idle.append(conn)

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        conn = self.reader()
        try:
            yield conn
        finally:
            self.give_back(conn)

    # --- closing ------------------------------------------------------------------------------------------------

    def _checkpoints(self) -> None:
        """Copy the WAL's pages into the database file every `CHECKPOINT_EVERY` commits (and every so often),
        on a connection of its own, so no writer pays for it. PASSIVE: it never waits for readers or the writer; the
        next writer after a complete checkpoint starts the WAL from its beginning again."""
        conn = self._connect()
        try:
            while not self._stopping:
                self._checkpoint_due.wait(self._checkpoint_interval_s)
                self._checkpoint_due.clear()
                if self._stopping:
                    break
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error as exc:  # busy or failing: the next round tries again; the WAL keeps everything
                    log.warning("checkpoint of %s failed: %s", self.path, exc)
        finally:
            conn.close()

    def close(self) -> None:
        """Close every connection (nothing may use the database any more). SQLite checkpoints the WAL into the main
        file and removes it when the last connection closes."""
        self._stop_checkpointer()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            with self._pool_lock:
                readers, self._readers = self._readers, []
                self._idle.clear()
            for conn in readers:
                conn.close()
            if self._wal_fd >= 0:
                os.close(self._wal_fd)
                self._wal_fd = -1
            opened, self._wal_index = self._wal_index, None
            if opened is not None:
                os.close(opened)
            self._writer.close()

    def _stop_checkpointer(self) -> None:
        """Stop the checkpointer (before the connections close, so the writer's close is the last one)."""
        checkpointer = self._checkpointer
        if checkpointer is None:
            return
        self._stopping = True
        self._checkpoint_due.set()
        if checkpointer is not threading.current_thread():
            checkpointer.join()
        self._checkpointer = None

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
