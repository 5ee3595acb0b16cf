"""The xeno bridge's attachments: a gateway elsewhere cannot read the client's disk, so before a `gateway.query` is
relayed each attachment's file is uploaded to the gateway's `POST /api/artifacts/` and its `path` rewritten to
`artifact:{id}`, which the gateway reads from its media store (`orbital.dialects.xeno`).

Only absolute paths to regular files are uploaded, at most `MAX_UPLOAD_BYTES` each; the uploads are private (only
the gateway token reads them). An attachment that cannot be uploaded (unreadable, too large, the HTTP API refusing it
or unreachable) keeps its path, which the gateway refuses over its WebSocket (the query ends with `gateway.error`),
and the bridge logs why (never the token).
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from orbital.store import artifacts
from orbital.store.artifacts import MAX_ARTIFACT_BYTES

log = logging.getLogger("orbital.xeno.bridge")

MAX_UPLOAD_BYTES = MAX_ARTIFACT_BYTES
UPLOAD_TIMEOUT_S = 60.0


def http_base(ws_url: str, given: str | None) -> str | None:
    """The gateway's HTTP base for uploads: `given` (`--http-url`), else the WebSocket URL's own host when it serves
    both (a `ws://` gateway, or a `/ws` path: the local gateway, or a stack behind one domain). None when it cannot
    be told (API Gateway's WebSocket and HTTP APIs have hosts of their own)."""
    if given:
        parts = urllib.parse.urlsplit(given)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("the HTTP URL must be http://HOST… or https://HOST… (the gateway's HTTP API)")
        return given.rstrip("/")
    parts = urllib.parse.urlsplit(ws_url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme)
    if scheme is None or not parts.hostname:
        return None
    path = parts.path.rstrip("/")
    if parts.scheme == "ws" or path.endswith("/ws"):
        return urllib.parse.urlunsplit(
            (scheme, parts.netloc, path[: -len("/ws")] if path.endswith("/ws") else "", "", "")
        )
    return None


def _read(path: str) -> tuple[bytes, str] | str:
    """The file's bytes and name, or why it is not uploaded."""
    if not Path(path).is_absolute():
        return "not an absolute path"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))  # a FIFO must not block
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file"
        if info.st_size > MAX_UPLOAD_BYTES:
            return f"larger than {MAX_UPLOAD_BYTES} bytes"
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(MAX_UPLOAD_BYTES + 1)
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    finally:
        os.close(fd)
    if len(data) > MAX_UPLOAD_BYTES:
        return f"larger than {MAX_UPLOAD_BYTES} bytes"
    return data, Path(path).name


class Uploader:
    """Uploads a query's attachments to one gateway's HTTP API (one HTTP client, reused)."""

    def __init__(self, base: str, token: Callable[[], str | None], *, timeout: float = UPLOAD_TIMEOUT_S) -> None:
        self.base = base
        self.token = token
        self.client = httpx.AsyncClient(timeout=timeout, follow_redirects=False)

    async def close(self) -> None:
        await self.client.aclose()

    async def rewrite(self, message: dict[str, Any]) -> None:
        """Upload the attachments of a `gateway.query` message and rewrite their paths, in place."""
        params = message.get("params")
        attachments = params.get("attachments") if isinstance(params, dict) else None
        if not isinstance(attachments, list):
            return
        for item in attachments:
            path = item.get("path") if isinstance(item, dict) else None
            if not isinstance(path, str) or not path.strip() or path.startswith(artifacts.REFERENCE):
                continue
            artifact_id = await self._upload(path, item.get("mimeType"))
            if artifact_id is not None:
                if not (isinstance(item.get("fileName"), str) and item["fileName"].strip()):
                    item["fileName"] = Path(path).name
                item["path"] = f"{artifacts.REFERENCE}{artifact_id}"

    async def _upload(self, path: str, mime: Any) -> str | None:
        read = await asyncio.to_thread(_read, path)
        if isinstance(read, str):
            log.warning("attachment %s not uploaded: %s", path, read)
            return None
        data, name = read
        headers: dict[str, str] = {}
        try:
            token = self.token()
        except ValueError as exc:  # the token file went missing
            log.warning("attachment %s not uploaded: %s", path, exc)
            return None
        if token:
            headers["Authorization"] = f"Bearer {token}"
        kind = mime if isinstance(mime, str) and mime.strip() else "application/octet-stream"
        try:
            answer = await self.client.post(
                f"{self.base}{artifacts.UPLOAD_ROUTE}", files={"file": (name, data, kind)}, headers=headers
            )
        except httpx.HTTPError as exc:
            log.warning("attachment %s not uploaded: %s", path, type(exc).__name__)
            return None
        if answer.status_code != 200:
            log.warning("attachment %s not uploaded: the gateway answered %d", path, answer.status_code)
            return None
        try:
            artifact_id = answer.json()["artifact_id"]
        except (ValueError, KeyError, TypeError):
            log.warning("attachment %s not uploaded: the gateway's answer has no artifact_id", path)
            return None
        return artifact_id if isinstance(artifact_id, str) else None
