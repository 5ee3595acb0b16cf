"""The S3 workspace (AWS): the `Workspace` port (`orbital.store.workspace`) over one bucket."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from orbital.store.workspace import ByteStream, Headers, Listing, MissingObjectError, ObjectInfo, Workspace

if TYPE_CHECKING:
    from botocore.client import BaseClient


class S3Workspace(Workspace):
    def __init__(self, client: BaseClient, bucket: str) -> None:
        self.client = client
        self.bucket = bucket

    @property
    def s3_bucket(self) -> str | None:
        return self.bucket

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

    def _head(self, key: str) -> ObjectInfo | None:
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

    def _get(self, key: str) -> tuple[bytes, ObjectInfo] | None:
        resp = self._get_object(key)
        if resp is None:
            return None
        body = resp["Body"].read()
        return body, self._info(key, resp, len(body))

    def _stream(self, key: str) -> tuple[ByteStream, ObjectInfo] | None:
        resp = self._get_object(key)
        if resp is None:
            return None
        body: ByteStream = resp["Body"]
        return body, self._info(key, resp)

    def _read_range(self, key: str, start: int, end: int) -> bytes | None:
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

    def _put(self, key: str, body: bytes, headers: Headers) -> None:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": key, "Body": body, "ContentType": headers.content_type}
        if headers.metadata:
            kwargs["Metadata"] = headers.metadata
        for param, value in (
            ("ContentEncoding", headers.content_encoding),
            ("ContentDisposition", headers.content_disposition),
            ("ContentLanguage", headers.content_language),
            ("CacheControl", headers.cache_control),
        ):
            if value:
                kwargs[param] = value
        self.client.put_object(**kwargs)

    def _copy(self, source: str, destination: str, content_type: str) -> None:
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

    def _delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=key)

    def _listing(self, prefix: str, delimiter: str | None) -> Listing:
        """Following pagination."""
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

    def _presign(self, method: Literal["GET", "PUT"], key: str, expires: int) -> str:
        operation = "get_object" if method == "GET" else "put_object"
        return str(
            self.client.generate_presigned_url(operation, Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires)
        )
