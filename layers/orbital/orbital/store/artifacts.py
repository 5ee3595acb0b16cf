"""Uploaded artifacts: files a client hands the gateway once and then refers to by id (WindieOS's screenshots,
images for a conversation), kept in the media store beside GSV's media, so `GET /media/{artifact_id}` serves them too.

An artifact id is `{uuid}.{ext}`, which matches GSV's media name pattern (`NAME`). The object lives at
`keys.media_object(id)`; its metadata records the owner (the install's user id, or `GATEWAY_OWNER` for an upload
made with the gateway's own credential), the SHA-256 of the bytes, the original file name and when it was uploaded.
An object may carry `expires-at` (epoch ms): past it, the media route deletes it and answers 410, as GSV does.

Who may read an artifact: its owner, and anyone holding the gateway's own credential (`reader=None`). The media
route serves an object of the gateway's own (GSV's media, the owner's uploads) to anyone who knows its name, as GSV
does, and an install's artifact only to that install or the gateway's credential.
"""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

from orbital.domain.media_types import content_type, extension, metadata_text
from orbital.store import keys

if TYPE_CHECKING:
    from orbital.store.workspace import ObjectInfo, Workspace

NAME = re.compile(r"^[a-f0-9-]+\.[a-z0-9]+$", re.IGNORECASE)
"""A media name GSV serves at `/media/{name}` (case-insensitive), and the shape of every artifact id."""

GATEWAY_OWNER = "~gateway"
"""The owner of an artifact uploaded with the gateway's own credential (the token, or a loopback gateway without
one). No install's user id starts with `~`."""

PRIVATE_OWNER = "~private"
"""The owner of an object only the gateway's own credential reads (a screenshot a client's tool returned, which its
user never chose to publish): the media route serves it to no one without that credential."""

MAX_ARTIFACT_BYTES = 25 * 1024 * 1024
"""The largest artifact the gateway keeps (GSV's media limit)."""

UPLOAD_ROUTE = "/api/artifacts/"
"""Where clients upload artifacts (the HTTP API's route; the xeno bridge posts there)."""
REFERENCE = "artifact:"
"""An attachment path that names an uploaded artifact: `artifact:{id}`."""


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
) -> Artifact:
    """Store `data` as a new artifact and describe it. The caller has checked the size."""
    kind = content_type(mime_type)
    artifact_id = f"{uuid.uuid4()}.{extension(kind)}"
    digest = hashlib.sha256(data).hexdigest()
    uploaded = int(time.time() * 1000) if now_ms is None else now_ms
    metadata = {"owner": metadata_text(owner), "sha256": digest, "uploaded-at": str(uploaded)}
    if filename:
        metadata["filename"] = metadata_text(filename)
    workspace.put(keys.media_object(artifact_id), data, content_type=kind, metadata=metadata)
    return Artifact(artifact_id, kind, len(data), digest, owner, filename or None, uploaded)


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
        uploaded_at_ms=_int(meta.get("uploaded-at")),
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
