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
from typing import Literal, Protocol


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


class MissingObjectError(KeyError):
    """The object a copy reads from does not exist."""


@dataclass(frozen=True)
class Headers:
    """What an object keeps beside its bytes: its content type, metadata and the HTTP headers S3 keeps with it."""

    content_type: str = "application/octet-stream"
    metadata: dict[str, str] | None = None
    content_encoding: str | None = None
    content_disposition: str | None = None
    content_language: str | None = None
    cache_control: str | None = None


class Workspace(ABC):
    """The object store of the gateway (see the module's docstring for the semantics every implementation keeps).

    A template: the public methods check their arguments (`check_key`, `check_body`, `check_range`) and call the few
    methods a backend implements (`_head`, `_get`, `_stream`, `_read_range`, `_put`, `_copy`, `_delete`,
    `_listing`, `_presign`; `_delete_prefix` when it can do better than deleting one by one)."""

    def head(self, key: str) -> ObjectInfo | None:
        """The object's description, None when nothing is stored at `key`."""
        return self._head(key)

    def get(self, key: str) -> tuple[bytes, ObjectInfo] | None:
        """The object's bytes and description, None when nothing is stored at `key`."""
        return self._get(key)

    def stream(self, key: str) -> tuple[ByteStream, ObjectInfo] | None:
        """The object's bytes to read in parts (the caller closes the stream) and its description, None when nothing is
        stored at `key`. The bytes are those of the object as it was when this was called."""
        return self._stream(key)

    def read_range(self, key: str, start: int, end: int) -> bytes | None:
        """Bytes `start` to `end` (exclusive) of the object, fewer at its end, b"" from `start` past it; None when
        nothing is stored at `key`."""
        check_range(start, end)
        return self._read_range(key, start, end)

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
        check_key(key)
        check_body(body)
        headers = Headers(
            content_type, metadata, content_encoding, content_disposition, content_language, cache_control
        )
        self._put(key, body, headers)

    def copy(self, source: str, destination: str, *, content_type: str) -> None:
        """Copy an object (metadata replaced, with `content_type`). `MissingObjectError` when `source` does
        not exist."""
        check_key(destination)
        self._copy(source, destination, content_type)

    def delete(self, key: str) -> None:
        """Remove the object at `key`, if any."""
        self._delete(key)

    def delete_prefix(self, prefix: str) -> int:
        """Remove every object whose key starts with `prefix`; returns how many."""
        return self._delete_prefix(prefix)

    def listing(self, prefix: str, *, delimiter: str | None = "/") -> Listing:
        """One level (with a delimiter: the keys under `prefix` without it past the prefix, and the common prefixes
        of the others up to it) or everything under a prefix, in key order."""
        return self._listing(prefix, delimiter)

    def list_all(self, prefix: str) -> list[ObjectInfo]:
        return self.listing(prefix, delimiter=None).keys

    def presign_get(self, key: str, expires: int = 900) -> str:
        """A URL that reads the object with a plain HTTP GET for `expires` seconds."""
        check_key(key)
        return self._presign("GET", key, expires)

    def presign_put(self, key: str, expires: int = 900) -> str:
        """A URL that writes the object with a plain HTTP PUT (its body, its Content-Type) for `expires` seconds."""
        check_key(key)
        return self._presign("PUT", key, expires)

    @property
    def s3_bucket(self) -> str | None:
        """The S3 bucket holding the objects, for AWS services that read or write them there; None off S3."""
        return None

    # --- what a backend implements ----------------------------------------------------------------------------

    @abstractmethod
    def _head(self, key: str) -> ObjectInfo | None: ...

    @abstractmethod
    def _get(self, key: str) -> tuple[bytes, ObjectInfo] | None: ...

    @abstractmethod
    def _stream(self, key: str) -> tuple[ByteStream, ObjectInfo] | None: ...

    @abstractmethod
    def _read_range(self, key: str, start: int, end: int) -> bytes | None:
        """`0 <= start < end`."""

    @abstractmethod
    def _put(self, key: str, body: bytes, headers: Headers) -> None: ...

    @abstractmethod
    def _copy(self, source: str, destination: str, content_type: str) -> None: ...

    @abstractmethod
    def _delete(self, key: str) -> None: ...

    def _delete_prefix(self, prefix: str) -> int:
        """By default one delete per object listed."""
        count = 0
        for info in self.list_all(prefix):
            self._delete(info.key)
            count += 1
        return count

    @abstractmethod
    def _listing(self, prefix: str, delimiter: str | None) -> Listing: ...

    @abstractmethod
    def _presign(self, method: Literal["GET", "PUT"], key: str, expires: int) -> str: ...


MAX_KEY_BYTES = 1024
"""The longest object key, in bytes of UTF-8 (S3's limit)."""


def check_key(key: str) -> None:
    """An object key a write or a URL names: non-empty Unicode text, at most `MAX_KEY_BYTES` of UTF-8, no NUL."""
    if not isinstance(key, str) or not key:
        raise ValueError("an object key is a non-empty string")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("an object key must be valid Unicode text (no lone surrogate)") from None
    if size > MAX_KEY_BYTES:
        raise ValueError(f"an object key is at most {MAX_KEY_BYTES} bytes of UTF-8 ({size} given)")
    if "\x00" in key:
        raise ValueError("an object key cannot contain a NUL character")


def check_body(body: bytes) -> None:
    if not isinstance(body, bytes | bytearray | memoryview):
        raise TypeError(f"an object's body is bytes, not {type(body).__name__}")


def check_range(start: int, end: int) -> None:
    if start < 0 or end <= start:
        raise ValueError(f"invalid byte range {start}-{end}: want 0 <= start < end")
