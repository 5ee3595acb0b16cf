"""Object storage over S3: the agent workspace, global skills, archives and media.

Keys are built by `orbital.store.keys`; this class only moves bytes.

With `cache=True` (the one-process local gateway, where every write goes through this object, as for the table in
ADR 0005) listings are kept in memory and every put, copy or delete drops the listings it could change. A listing
that was being read while a write landed is not kept (a generation counter tells), so the cache never holds an
older state than the store. A Lambda container keeps no listing: other containers write too.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from botocore.client import BaseClient


@dataclass
class ObjectInfo:
    key: str
    size: int
    last_modified: str | None
    content_type: str | None = None
    metadata: dict[str, str] | None = None


@dataclass
class Listing:
    keys: list[ObjectInfo]
    prefixes: list[str]


class Workspace:
    def __init__(self, client: BaseClient, bucket: str, *, cache: bool = False) -> None:
        self.client = client
        self.bucket = bucket
        self._cache_on = cache
        self._listings: dict[tuple[str, str | None], Listing] = {}
        self._generation = 0
        self._lock = threading.Lock()

    def _changed(self, key: str) -> None:
        """A write to `key`: forget every listing that could include it."""
        if not self._cache_on:
            return
        with self._lock:
            self._generation += 1
            for cached in [k for k in self._listings if key.startswith(k[0])]:
                del self._listings[cached]

    def _missing(self, exc: Exception) -> bool:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code")
        return code in {"404", "NoSuchKey", "NotFound"}

    def head(self, key: str) -> ObjectInfo | None:
        try:
            resp = self.client.head_object(Bucket=self.bucket, Key=key)
        except self.client.exceptions.ClientError as exc:
            if self._missing(exc):
                return None
            raise
        return ObjectInfo(
            key=key,
            size=int(resp.get("ContentLength", 0)),
            last_modified=resp["LastModified"].isoformat() if resp.get("LastModified") else None,
            content_type=resp.get("ContentType"),
            metadata=resp.get("Metadata") or {},
        )

    def get(self, key: str) -> tuple[bytes, ObjectInfo] | None:
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=key)
        except self.client.exceptions.NoSuchKey:
            return None
        except self.client.exceptions.ClientError as exc:
            if self._missing(exc):
                return None
            raise
        body = resp["Body"].read()
        info = ObjectInfo(
            key=key,
            size=int(resp.get("ContentLength", len(body))),
            last_modified=resp["LastModified"].isoformat() if resp.get("LastModified") else None,
            content_type=resp.get("ContentType"),
            metadata=resp.get("Metadata") or {},
        )
        return body, info

    def put(
        self,
        key: str,
        body: bytes,
        *,
        content_type: str = "application/octet-stream",
        metadata: dict[str, str] | None = None,
        content_encoding: str | None = None,
    ) -> None:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": key, "Body": body, "ContentType": content_type}
        if metadata:
            kwargs["Metadata"] = metadata
        if content_encoding:
            kwargs["ContentEncoding"] = content_encoding
        try:
            self.client.put_object(**kwargs)
        finally:
            self._changed(key)

    def copy(self, source: str, destination: str, *, content_type: str) -> None:
        """Copy an object within the bucket (metadata replaced, with `content_type`)."""
        try:
            self.client.copy_object(
                Bucket=self.bucket,
                Key=destination,
                CopySource={"Bucket": self.bucket, "Key": source},
                ContentType=content_type,
                MetadataDirective="REPLACE",
            )
        finally:
            self._changed(destination)

    def delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=key)
        finally:
            self._changed(key)

    def delete_prefix(self, prefix: str) -> int:
        count = 0
        for info in self.list_all(prefix):
            self.delete(info.key)
            count += 1
        return count

    def listing(self, prefix: str, *, delimiter: str | None = "/") -> Listing:
        """One level (with a delimiter) or everything under a prefix, following pagination."""
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
                    )
                )
            prefixes.extend(p["Prefix"] for p in resp.get("CommonPrefixes", []))
            if not resp.get("IsTruncated"):
                break
            kwargs["ContinuationToken"] = resp["NextContinuationToken"]
        return Listing(objects, prefixes)

    def list_all(self, prefix: str) -> list[ObjectInfo]:
        return self.listing(prefix, delimiter=None).keys

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
