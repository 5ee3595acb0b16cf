"""Uploaded artifacts: files a client hands the gateway once and then refers to by id (WindieOS's screenshots,
images for a conversation), kept in the media store beside GSV's media, so `GET /media/{artifact_id}` serves them too.

An artifact id is `{uuid}.{ext}`, which matches GSV's media name pattern (`NAME`). The object lives at
`keys.media_object(id)`; its metadata records the owner (the install's user id, or `GATEWAY_OWNER` for an upload
made with the gateway's own credential), the SHA-256 of the bytes, the original file name and when it was uploaded.
An object may carry `expires-at` (epoch ms): past it, the media route deletes it and answers 410, as GSV does.

Who may read an artifact: its owner, and anyone holding the gateway's own credential (`reader=None`). An upload made
with the gateway's credential is private (`PRIVATE_OWNER`) unless it asked to be public: only a public object
(`GATEWAY_OWNER`: GSV's media, an upload that asked) is served by the media route to anyone who knows its name, as GSV
does, and only until its link expires (`public_expiry_ms`: its `expires-at`, else its upload time plus the public
link lifetime); an install's artifact only to that install or the gateway's credential.
"""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from urllib.parse import unquote

from orbital.domain.media_types import content_type, extension, metadata_text
from orbital.store import keys

if TYPE_CHECKING:
    from orbital.store.table import Table
    from orbital.store.workspace import ObjectInfo, Workspace

NAME = re.compile(r"^[a-f0-9-]+\.[a-z0-9]+$", re.IGNORECASE)
"""A media name GSV serves at `/media/{name}` (case-insensitive), and the shape of every artifact id."""

GATEWAY_OWNER = "~gateway"
"""The owner of a public object: GSV's media, or an upload made with the gateway's own credential that asked to be
public. No install's user id starts with `~`."""

PRIVATE_OWNER = "~private"
"""The owner of an object only the gateway's own credential reads (an upload made with it, such as the xeno bridge's
attachments; a screenshot a client's tool returned, which its user never chose to publish): the media route serves
it to no one without that credential."""

PUBLIC_LINK_DAYS = 7
"""How long a public media link lives by default (`media.publicLinkDays` in the configuration)."""
DAY_MS = 24 * 3600 * 1000

MAX_ARTIFACT_BYTES = 25 * 1024 * 1024
"""The largest artifact the gateway keeps (GSV's media limit)."""

UPLOAD_ROUTE = "/api/artifacts/"
"""Where clients upload artifacts (the HTTP API's route; the xeno bridge posts there)."""
REFERENCE = "artifact:"
"""An attachment path that names an uploaded artifact: `artifact:{id}`."""


class QuotaExceededError(Exception):
    """An install has uploaded all it may today (the message says which cap and when it resets)."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def charge_upload(table: Table, install_id: str, size: int, *, now_ms: int, max_count: int, max_bytes: int) -> None:
    """Count an upload of `size` bytes against the install's caps for the current UTC day; raise `QuotaExceededError`
    (counting nothing) when it would go over either. Atomic: two uploads racing for the last room cannot both pass."""
    moment = datetime.fromtimestamp(now_ms / 1000, UTC)
    day_ends = int(datetime(moment.year, moment.month, moment.day, tzinfo=UTC).timestamp()) + 24 * 3600
    key = keys.upload_quota(install_id, moment.strftime("%Y-%m-%d"))
    after = table.update(key, add={"count": 1, "bytes": size}, ttl=day_ends + 24 * 3600)
    count = int(after.attrs.get("count", 0)) if after else 0
    used = int(after.attrs.get("bytes", 0)) if after else 0
    if count <= max_count and used <= max_bytes:
        return
    table.update(key, add={"count": -1, "bytes": -size}, return_values="NONE")
    retry = max(1, day_ends - int(now_ms / 1000))
    if count > max_count:
        raise QuotaExceededError(f"Upload quota reached: this install may upload {max_count} files a day", retry)
    raise QuotaExceededError(f"Upload quota reached: this install may upload {max_bytes} bytes a day", retry)


@dataclass(frozen=True)
class Artifact:
    artifact_id: str
    content_type: str
    size_bytes: int
    sha256: str
    owner: str
    filename: str | None = None
    uploaded_at_ms: int | None = None
    expires_at_ms: int | None = None

    def expired(self, now_ms: int) -> bool:
        return self.expires_at_ms is not None and self.expires_at_ms < now_ms

    def public_expiry_ms(self, lifetime_ms: int) -> int | None:
        """When a public object's link ends: its own `expires-at` when sooner, else its upload time plus
        `lifetime_ms`; None when neither is known."""
        ends = [t for t in (self.expires_at_ms, _plus(self.uploaded_at_ms, lifetime_ms)) if t is not None]
        return min(ends) if ends else None

    def readable_by(self, reader: str | None) -> bool:
        """`reader` is an install's user id, or None for the gateway's own credential (which reads every one)."""
        return reader is None or reader == self.owner


def save(
    workspace: Workspace,
    data: bytes,
    *,
    owner: str,
    mime_type: str | None,
    filename: str | None = None,
    now_ms: int | None = None,
    expires_at_ms: int | None = None,
) -> Artifact:
    """Store `data` as a new artifact and describe it. The caller has checked the size."""
    kind = content_type(mime_type)
    artifact_id = f"{uuid.uuid4()}.{extension(kind)}"
    digest = hashlib.sha256(data).hexdigest()
    uploaded = int(time.time() * 1000) if now_ms is None else now_ms
    metadata = {"owner": metadata_text(owner), "sha256": digest, "uploaded-at": str(uploaded)}
    if filename:
        metadata["filename"] = metadata_text(filename)
    if expires_at_ms is not None:
        metadata["expires-at"] = str(expires_at_ms)
    workspace.put(keys.media_object(artifact_id), data, content_type=kind, metadata=metadata)
    return Artifact(artifact_id, kind, len(data), digest, owner, filename or None, uploaded, expires_at_ms)


def _plus(start: int | None, span: int) -> int | None:
    return None if start is None else start + span


def _modified_ms(info: ObjectInfo) -> int | None:
    """When the object was written, from the store's own record (an object without `uploaded-at`: GSV's media)."""
    if not info.last_modified:
        return None
    try:
        moment = datetime.fromisoformat(info.last_modified.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _described(artifact_id: str, info: ObjectInfo, data: bytes | None) -> Artifact:
    meta = {k.lower(): v for k, v in (info.metadata or {}).items()}
    digest = meta.get("sha256") or (hashlib.sha256(data).hexdigest() if data is not None else "")
    return Artifact(
        artifact_id=artifact_id,
        content_type=info.content_type or "application/octet-stream",
        size_bytes=info.size,
        sha256=digest,
        owner=unquote(meta.get("owner", GATEWAY_OWNER)),
        filename=unquote(meta["filename"]) if meta.get("filename") else None,
        uploaded_at_ms=_int(meta.get("uploaded-at")) or _modified_ms(info),
        expires_at_ms=_int(meta.get("expires-at") or meta.get("expiresat")),
    )


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None


def head(workspace: Workspace, artifact_id: str) -> Artifact | None:
    """The artifact's description without its bytes; None when the id is malformed or nothing is stored."""
    if not NAME.match(artifact_id):
        return None
    info = workspace.head(keys.media_object(artifact_id))
    return None if info is None else _described(artifact_id, info, None)


def load(workspace: Workspace, artifact_id: str) -> tuple[bytes, Artifact] | None:
    """The artifact's bytes and description; None when the id is malformed or nothing is stored."""
    if not NAME.match(artifact_id):
        return None
    found = workspace.get(keys.media_object(artifact_id))
    if found is None:
        return None
    data, info = found
    return data, _described(artifact_id, info, data)
