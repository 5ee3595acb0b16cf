"""The local gateway's state in its data directory: the table on SQLite, the workspace on files (ADR 0030).

    {data_dir}/lock            held (flock) by the one gateway or tool that has the directory open
    {data_dir}/orbital.sqlite3 the table (`orbital.store.backends.sqlite` over `orbital.store.backends.database`)
    {data_dir}/objects/        the workspace (`orbital.store.backends.files`)

A directory written by an earlier version (its state kept under `state/`) is converted once when it is opened
(`orbital.local.upgrade`). `temporary` keeps everything in a directory of its own that is removed at `close`
(a gateway that persists nothing).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orbital.store.backends import private
from orbital.store.backends.database import Database
from orbital.store.backends.files import FileWorkspace
from orbital.store.backends.sqlite import SqliteTable

DATABASE_FILE = "orbital.sqlite3"
OBJECTS_DIR = "objects"
LOCK_FILE = "lock"


class DataDirLockedError(RuntimeError):
    """Another gateway (or tool) is using the data directory."""


def _lock(data_dir: Path) -> int | None:
    """Take the data directory for this process; DataDirLockedError if another one has it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = private.lock_exclusively(data_dir / LOCK_FILE)
    except private.LockHeldError as held:
        holder = held.holder or "another process"
        raise DataDirLockedError(
            f"{data_dir} is in use by another Orbital gateway (pid {holder}); stop it first, or use another data "
            "directory (--data-dir)"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def _unlock(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
    os.close(fd)  # closing releases the flock


class LocalStore:
    """The table and the workspace of one data directory, open in this process."""

    def __init__(self, root: Path, db: Database, table: SqliteTable, workspace: FileWorkspace) -> None:
        self.root = root
        self.db = db
        self.table = table
        self.workspace = workspace
        self.opened: str = ""
        """What opening found (for the log)."""
        self._lock_fd: int | None = None
        self._temporary = False

    @classmethod
    def open(
        cls,
        data_dir: Path,
        *,
        durable: bool = True,
        temporary: bool = False,
        base_url: str | Callable[[], str] | None = None,
        exclusive: bool = True,
    ) -> LocalStore:
        """Open the state of `data_dir`. `exclusive` (the gateway, `orbital import`): take its lock first, and
        convert an earlier version's state. Without it (a tool reading or seeding the state of a running gateway)
        nothing is swept or converted."""
        began = time.perf_counter()
        root = Path(tempfile.mkdtemp(prefix="orbital-")) if temporary else data_dir
        lock_fd = _lock(data_dir) if exclusive and not temporary else None
        try:
            db = Database(root / DATABASE_FILE, durable=durable)
            try:
                table = SqliteTable(db)
                workspace = FileWorkspace(root / OBJECTS_DIR, base_url=base_url, durable=durable, exclusive=exclusive)
            except BaseException:
                db.close()
                raise
        except BaseException:
            if lock_fd is not None:
                _unlock(lock_fd)
            if temporary:
                shutil.rmtree(root, ignore_errors=True)
            raise
        store = cls(root, db, table, workspace)
        store._lock_fd = lock_fd
        store._temporary = temporary
        upgraded = None
        if exclusive and not temporary:
            # lazy: converting an earlier data directory is needed once, if ever
            from orbital.local.upgrade import upgrade

            upgraded = upgrade(data_dir, table.put_items, store._put_earlier_object)
        seconds = time.perf_counter() - began
        if upgraded is not None:
            store.opened = (
                f"converted a data directory written by an earlier version: {len(upgraded.items)} items and "
                f"{len(upgraded.objects)} files"
            )
            if upgraded.torn_bytes:
                store.opened += f" (left out a torn tail of {upgraded.torn_bytes} bytes: a write a crash cut short)"
            store.opened += f", in {seconds:.2f} s"
        else:
            store.opened = f"opened in {seconds:.2f} s"
        return store

    def _put_earlier_object(self, obj: Any) -> None:
        self.workspace.put(
            obj.key,
            obj.data,
            content_type=obj.content_type or "application/octet-stream",
            metadata=obj.metadata or None,
            content_encoding=obj.content_encoding,
        )

    def describe(self) -> str:
        return self.opened

    def close(self) -> None:
        try:
            self.workspace.close()
        finally:
            try:
                self.db.close()
            finally:
                if self._lock_fd is not None:
                    _unlock(self._lock_fd)
                    self._lock_fd = None
                if self._temporary:
                    shutil.rmtree(self.root, ignore_errors=True)
