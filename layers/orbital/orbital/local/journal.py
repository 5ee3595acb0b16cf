"""An append-only journal with group commit: what makes a local write durable before it is acknowledged.

A journal file is a sequence of frames: a header (payload length, CRC-32 of the payload; big-endian, 4 bytes each)
and a JSON payload. Writers `append` a record (cheap: it is only buffered) and then `wait` until it is on disk. The
first waiter to find nothing being written becomes the leader: it writes everything buffered so far in one go and
calls `fsync` once, then wakes the others; writers arriving meanwhile wait for the next round. So concurrent writers
share flushes, and a lone writer pays one write and one fsync.

Reading stops at the first frame that is incomplete or fails its checksum: a crash can tear only the tail, and
everything before it is kept (`read_records` says where the good part ends, so the tail can be cut off).
"""

from __future__ import annotations

import json
import os
import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:  # several times faster on the paths that load a large state; the standard library otherwise
    import orjson

    def dumps(value: Any) -> bytes:
        return orjson.dumps(value)

    def loads(data: bytes | str) -> Any:
        return orjson.loads(data)

except ImportError:  # pragma: no cover

    def dumps(value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def loads(data: bytes | str) -> Any:
        return json.loads(data)


HEADER = struct.Struct(">II")
MAX_RECORD = 1 << 30
"""A length beyond this is garbage, not a record (objects live in blobs; records are small)."""


def encode(record: dict[str, Any]) -> bytes:
    payload = dumps(record)
    return HEADER.pack(len(payload), zlib.crc32(payload)) + payload


@dataclass
class ReadResult:
    records: list[dict[str, Any]]
    good_bytes: int
    """Where the last complete, intact record ends."""
    torn: bool
    """Bytes after `good_bytes` that are not a complete record (a write cut short by a crash)."""


def read_records(path: Path) -> ReadResult:
    data = path.read_bytes()
    records: list[dict[str, Any]] = []
    at = 0
    while at + HEADER.size <= len(data):
        length, crc = HEADER.unpack_from(data, at)
        start, end = at + HEADER.size, at + HEADER.size + length
        if length > MAX_RECORD or end > len(data):
            break
        payload = data[start:end]
        if zlib.crc32(payload) != crc:
            break
        try:
            record = loads(payload)
        except ValueError:
            break
        if not isinstance(record, dict):
            break
        records.append(record)
        at = end
    return ReadResult(records, at, at < len(data))


def journal_path(directory: Path, generation: int) -> Path:
    return directory / f"journal-{generation:08d}.log"


def generations(directory: Path) -> list[int]:
    """The generations of the journal files in `directory`, oldest first."""
    found = []
    for path in directory.glob("journal-*.log"):
        stem = path.stem.removeprefix("journal-")
        if stem.isdigit():
            found.append(int(stem))
    return sorted(found)


def fsync_directory(directory: Path) -> None:
    """Make a rename or a new file in `directory` durable (where the platform allows it)."""
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


class Journal:
    """The open journal of one generation; `rotate` moves on to the next."""

    def __init__(self, directory: Path, generation: int, *, durable: bool = True) -> None:
        self.directory = directory
        self.durable = durable
        self.generation = generation
        self._cond = threading.Condition()
        self._buffer: list[bytes] = []
        self._appended = 0
        self._written = 0
        self._leader = False
        self._bytes = 0
        self._closed = False
        self._failure: BaseException | None = None
        directory.mkdir(parents=True, exist_ok=True)
        self._file = journal_path(directory, generation).open("ab")
        fsync_directory(directory)

    @property
    def size(self) -> int:
        """Bytes appended to this generation's file so far (written or still buffered)."""
        return self._bytes

    def append(self, record: dict[str, Any]) -> int:
        """Buffer a record; returns its sequence number for `wait`."""
        frame = encode(record)
        with self._cond:
            if self._closed:
                raise RuntimeError("journal is closed")
            self._buffer.append(frame)
            self._appended += 1
            self._bytes += len(frame)
            return self._appended

    def wait(self, seq: int) -> None:
        """Return once record `seq` (and every one before it) is on disk."""
        with self._cond:
            while self._written < seq:
                if self._failure is not None:
                    raise OSError(f"the journal could not be written: {self._failure}") from self._failure
                if self._leader:
                    self._cond.wait()
                    continue
                self._leader = True
                frames, upto = self._buffer, self._appended
                self._buffer = []
                self._cond.release()
                try:
                    self._write(frames)
                except BaseException as exc:  # every waiter must hear of it, or it would wait forever
                    self._failure = exc
                    raise
                finally:
                    self._cond.acquire()
                    self._leader = False
                    if self._failure is None:
                        self._written = upto
                    self._cond.notify_all()

    def flush(self) -> None:
        """Everything appended so far is on disk when this returns."""
        with self._cond:
            target = self._appended
        self.wait(target)

    def _write(self, frames: list[bytes]) -> None:
        if not frames:
            return
        self._file.write(b"".join(frames))
        self._file.flush()
        if self.durable:
            os.fsync(self._file.fileno())

    def rotate(self) -> int:
        """Flush, close this generation's file and start the next. Returns the new generation. The caller makes
        sure nothing is appended meanwhile (it holds the lock that orders appends)."""
        self.flush()
        with self._cond:
            self._file.close()
            self.generation += 1
            self._file = journal_path(self.directory, self.generation).open("ab")
            self._bytes = 0
        fsync_directory(self.directory)
        return self.generation

    def close(self) -> None:
        try:
            self.flush()
        finally:
            with self._cond:
                self._closed = True
                self._file.close()


def iter_generation_records(directory: Path, generation: int) -> Iterator[dict[str, Any]]:
    """Every intact record of one generation (stopping at a torn tail)."""
    yield from read_records(journal_path(directory, generation)).records
