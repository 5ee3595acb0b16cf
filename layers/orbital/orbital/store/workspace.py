"""Object storage: the agent workspace, global skills, archives and media.

Keys are built by `orbital.store.keys`; a workspace only moves bytes. `Workspace` is the port every caller uses;
`orbital.store.backends.s3.S3Workspace` keeps the objects in an S3 bucket (AWS),
`orbital.store.backends.files.FileWorkspace` in plain files (the local gateway). Both keep S3's semantics: any key
may hold an object whatever other keys exist (`a` and `a/b` both), keys list in the order of their UTF-8 bytes, with
a delimiter a listing folds deeper keys into common prefixes, an object has a size, an ETag (the quoted MD5 of its
bytes), a content type, metadata (lowercase names), a time of change and, when they were given, the HTTP headers S3
keeps with it (Content-Encoding, Content-Disposition, Content-Language, Cache-Control).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Protocol


@dataclass
class ObjectInfo:
    key: str
    size: int
    last_modified: str | None
    content_type: str | None = None
    """From `head` and `get` (a listing does not carry it)."""
    metadata: dict[str, str] | None = None
    """From `head` and `get` (a listing does not carry it)."""
    etag: str | None = None
    """The quoted MD5 of the bytes, as S3 gives it for an object written in one request."""
    content_encoding: str | None = None
    """From `head` and `get`, when the object has one (as the next three)."""
    content_disposition: str | None = None
    content_language: str | None = None
    cache_control: str | None = None


class ByteStream(Protocol):
    """The bytes of an object as they are read (`Workspace.stream`)."""

    def read(self, size: int = -1, /) -> bytes: ...

    def close(self) -> None: ...


@dataclass
class Listing:
    keys: list[ObjectInfo]
    prefixes: list[str]


class MissingObject(KeyError):
    """The object a copy reads from does not exist."""


class Workspace(ABC):
    """The object store of the gateway (see the module's docstring for the semantics every implementation keeps)."""

    @abstractmethod
    def head(self, key: str) -> ObjectInfo | None:
        """The object's description, None when nothing is stored at `key`."""

    @abstractmethod
    def get(self, key: str) -> tuple[bytes, ObjectInfo] | None:
        """The object's bytes and description, None when nothing is stored at `key`."""

    @abstractmethod
    def stream(self, key: str) -> tuple[ByteStream, ObjectInfo] | None:
        """The object's bytes to read in parts (the caller closes the stream) and its description, None when nothing is
        stored at `key`. The bytes are those of the object as it was when this was called."""

    @abstractmethod
    def read_range(self, key: str, start: int, end: int) -> bytes | None:
        """Bytes `start` to `end` (exclusive) of the object, fewer at its end, b"" from `start` past it; None when
        nothing is stored at `key`."""

    @abstractmethod
    def put(
        self,
        key: str,
        body: bytes,
        *,
        content_type: str = "application/octet-stream",
        metadata: dict[str, str] | None = None,
        content_encoding: str | None = None,
        content_disposition: str | None = None,
        content_language: str | None = None,
        cache_control: str | None = None,
    ) -> None:
        """Store `body` at `key` (replacing what was there, headers and metadata too)."""

    @abstractmethod
    def copy(self, source: str, destination: str, *, content_type: str) -> None:
        """Copy an object (metadata replaced, with `content_type`). `MissingObject` when `source` does not exist."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object at `key`, if any."""

    def delete_prefix(self, prefix: str) -> int:
        """Remove every object whose key starts with `prefix`; returns how many."""
        count = 0
        for info in self.list_all(prefix):
            self.delete(info.key)
            count += 1
        return count

    @abstractmethod
    def listing(self, prefix: str, *, delimiter: str | None = "/") -> Listing:
        """One level (with a delimiter: the keys under `prefix` without it past the prefix, and the common prefixes
        of the others up to it) or everything under a prefix, in key order."""

    def list_all(self, prefix: str) -> list[ObjectInfo]:
        return self.listing(prefix, delimiter=None).keys

    @abstractmethod
    def presign_get(self, key: str, expires: int = 900) -> str:
        """A URL that reads the object with a plain HTTP GET for `expires` seconds."""

    @abstractmethod
    def presign_put(self, key: str, expires: int = 900) -> str:
        """A URL that writes the object with a plain HTTP PUT (its body, its Content-Type) for `expires` seconds."""

    @property
    def s3_bucket(self) -> str | None:
        """The S3 bucket holding the objects, for AWS services that read or write them there; None off S3."""
        return None


def check_range(start: int, end: int) -> None:
    if start < 0 or end <= start:
        raise ValueError(f"invalid byte range {start}-{end}: want 0 <= start < end")
