"""The data directory is its owner's alone: API keys, bot tokens and transcripts live there.

The directory is created 0700 and every file in it 0600 (the gateway also runs with umask 077 while it serves, so
files written by any of its parts are private too). A directory left readable by an earlier version, or created by
hand, is tightened at start: the directory itself and everything in it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def _open_to_others(path: Path) -> bool:
    return bool(stat.S_IMODE(path.lstat().st_mode) & 0o077)


def make_private(directory: Path) -> str:
    """Create `directory` (0700) or tighten it and its contents. Returns what had to be tightened ("" if nothing)."""
    if not directory.exists():
        directory.mkdir(parents=True, mode=DIR_MODE)
        directory.chmod(DIR_MODE)  # mkdir's mode is subject to the umask
        return ""
    dirs = files = 0
    if _open_to_others(directory):
        directory.chmod(DIR_MODE)
        dirs += 1
    for path in directory.rglob("*"):
        if path.is_symlink() or not _open_to_others(path):
            continue
        if path.is_dir():
            path.chmod(DIR_MODE)
            dirs += 1
        elif path.is_file():
            path.chmod(FILE_MODE)
            files += 1
    return f"{dirs} directories set to 0700, {files} files to 0600" if dirs or files else ""


def write_private(path: Path, data: bytes) -> None:
    """Write `path` whole, readable by its owner only, replacing it atomically."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        os.write(fd, data)
    finally:
        os.close(fd)
    tmp.replace(path)


class LockHeldError(Exception):
    """Another process holds the lock; `holder` is what it wrote in the lock file (its pid), or ""."""

    def __init__(self, holder: str) -> None:
        super().__init__(holder or "another process")
        self.holder = holder


def lock_exclusively(path: Path) -> int:
    """Open the lock file `path` (owner-only) and lock it for this process without waiting; the open descriptor
    holds the lock until it is closed. LockHeldError when another process has it. Without `flock` (not POSIX) there is
    no lock, and the file is only opened."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not a POSIX system: no lock
        return fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        raise LockHeldError(holder) from None
    return fd
