"""Object storage: the agent workspace, global skills, archives and media.

Keys are built by `orbital.store.keys`; a workspace only moves bytes. `Workspace` is the port every caller uses;
`S3Workspace` keeps the objects in an S3 bucket (AWS), `orbital.local.files.FileWorkspace` in plain files (the local
gateway). Both keep S3's semantics: any key may hold an object whatever other keys exist (`a` and `a/b` both), keys
list in the order of their UTF-8 bytes, with a delimiter a listing folds deeper keys into common prefixes, an object
has a size, an ETag (the quoted MD5 of its bytes), a content type, metadata (lowercase names), a time of change and,
when they were given, the HTTP headers S3 keeps with it (Content-Encoding, Content-Disposition, Content-Language,
Cache-Control).

With `cache=True` (the one-process local gateway, where every write goes through this object, as for the table in
ADR 0005) `S3Workspace` keeps listings in memory and every put, copy or delete drops the listings it could change. A
listing that was being read while a write landed is not kept (a generation counter tells), so the cache never holds
an older state than the store. A Lambda container keeps no listing: other containers write too.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from botocore.client import BaseClient


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
        """Copy an object (metadata replaced, with `content_type`). `MissingObjectError` when `source` does not
        exist."""

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


class S3Workspace(Workspace):
    def __init__(self, client: BaseClient, bucket: str, *, cache: bool = False) -> None:
        self.client = client
        self.bucket = bucket
        self._cache_on = cache
        self._listings: dict[tuple[str, str | None], Listing] = {}
        self._generation = 0
        self._lock = threading.Lock()

    @property
    def s3_bucket(self) -> str | None:
        return self.bucket

    def _changed(self, key: str) -> None:
        """A write to `key`: forget every listing that could include it."""
        if not self._cache_on:
            return
        with self._lock:
            self._generation += 1
            for cached in [k for k in self._listings if key.startswith(k[0])]:
                del self._listings[cached]

    def _code(self, exc: Exception) -> Any:
        return getattr(exc, "response", {}).get("Error", {}).get("Code")

    def _missing(self, exc: Exception) -> bool:
        return self._code(exc) in {"404", "NoSuchKey", "NotFound"}

    def _info(self, key: str, resp: dict[str, Any], size: int | None = None) -> ObjectInfo:
        return ObjectInfo(
            key=key,
            size=int(resp.get("ContentLength", size or 0)),
            last_modified=resp["LastModified"].isoformat() if resp.get("LastModified") else None,
            content_type=resp.get("ContentType"),
            metadata=resp.get("Metadata") or {},
            etag=resp.get("ETag"),
            content_encoding=resp.get("ContentEncoding") or None,
            content_disposition=resp.get("ContentDisposition") or None,
            content_language=resp.get("ContentLanguage") or None,
            cache_control=resp.get("CacheControl") or None,
        )

    def head(self, key: str) -> ObjectInfo | None:
        try:
            resp = self.client.head_object(Bucket=self.bucket, Key=key)
        except self.client.exceptions.ClientError as exc:
            if self._missing(exc):
                return None
            raise
        return self._info(key, resp)

    def _get_object(self, key: str) -> dict[str, Any] | None:
        """GetObject's answer, None when the object does not exist."""
        try:
            return self.client.get_object(Bucket=self.bucket, Key=key)
        except self.client.exceptions.NoSuchKey:
            return None
        except self.client.exceptions.ClientError as exc:
            if self._missing(exc):
                return None
            raise

    def get(self, key: str) -> tuple[bytes, ObjectInfo] | None:
        resp = self._get_object(key)
        if resp is None:
            return None
        body = resp["Body"].read()
        return body, self._info(key, resp, len(body))

    def stream(self, key: str) -> tuple[ByteStream, ObjectInfo] | None:
        resp = self._get_object(key)
        if resp is None:
            return None
        body: ByteStream = resp["Body"]
        return body, self._info(key, resp)

    def read_range(self, key: str, start: int, end: int) -> bytes | None:
        check_range(start, end)
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={start}-{end - 1}")
        except self.client.exceptions.NoSuchKey:
            return None
        except self.client.exceptions.ClientError as exc:
            if self._missing(exc):
                return None
            if self._code(exc) == "InvalidRange":  # `start` is past the end
                return b""
            raise
        return bytes(resp["Body"].read())

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
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": key, "Body": body, "ContentType": content_type}
        if metadata:
            kwargs["Metadata"] = metadata
        for param, value in (
            ("ContentEncoding", content_encoding),
            ("ContentDisposition", content_disposition),
            ("ContentLanguage", content_language),
            ("CacheControl", cache_control),
        ):
            if value:
                kwargs[param] = value
        try:
            self.client.put_object(**kwargs)
        finally:
            self._changed(key)

    def copy(self, source: str, destination: str, *, content_type: str) -> None:
        try:
            self.client.copy_object(
                Bucket=self.bucket,
                Key=destination,
                CopySource={"Bucket": self.bucket, "Key": source},
                ContentType=content_type,
                MetadataDirective="REPLACE",
            )
        except self.client.exceptions.ClientError as exc:
            if self._missing(exc):
                raise MissingObjectError(source) from None
            raise
        finally:
            self._changed(destination)

    def delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=key)
        finally:
            self._changed(key)

    def listing(self, prefix: str, *, delimiter: str | None = "/") -> Listing:
        """Following pagination; from the cache when it is on."""
        if not self._cache_on:
            return self._list(prefix, delimiter)
        with self._lock:
            hit = self._listings.get((prefix, delimiter))
            generation = self._generation
        if hit is not None:
            return Listing(list(hit.keys), list(hit.prefixes))
        fresh = self._list(prefix, delimiter)
        with self._lock:
            if self._generation == generation:  # nothing was written meanwhile
                self._listings[(prefix, delimiter)] = fresh
        return Listing(list(fresh.keys), list(fresh.prefixes))

    def _list(self, prefix: str, delimiter: str | None) -> Listing:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        objects: list[ObjectInfo] = []
        prefixes: list[str] = []
        while True:
            resp = self.client.list_objects_v2(**kwargs)
            for obj in resp.get("Contents", []):
                objects.append(
                    ObjectInfo(
                        key=obj["Key"],
                        size=int(obj.get("Size", 0)),
                        last_modified=obj["LastModified"].isoformat() if obj.get("LastModified") else None,
                        etag=obj.get("ETag"),
                    )
                )
            prefixes.extend(p["Prefix"] for p in resp.get("CommonPrefixes", []))
            if not resp.get("IsTruncated"):
                break
            kwargs["ContinuationToken"] = resp["NextContinuationToken"]
        return Listing(objects, prefixes)

    def presign_get(self, key: str, expires: int = 900) -> str:
        return str(
            self.client.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires
            )
        )

    def presign_put(self, key: str, expires: int = 900) -> str:
        return str(
            self.client.generate_presigned_url(
                "put_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires
            )
        )
