"""Presigned URLs of the file workspace, served on the local gateway's own port.

    {base}/_objects/{key, percent-encoded whole}?expires={unix seconds}&signature={hex}

The signature is HMAC-SHA256, under a key drawn at each start, of the method, the expiry and the key: a URL reads
(GET) or writes (PUT) one object until it expires, and nothing else. A wrong or missing signature, another method,
another key and an expired URL are all answered 403; an unknown key 404.

`ObjectRoute` is the ASGI app of those URLs; `mount` puts it in front of the gateway's app, for paths under
`/_objects/`. GET sends the object (one `Range: bytes=…` range may be asked, as of S3); PUT streams the body to a
temporary file and makes it the object only once the whole body has arrived (Content-Type, Content-Encoding,
Content-Disposition, Content-Language and Cache-Control kept, and sent back by GET, as S3 does), with 413 for a
body over the workspace's `max_put_bytes` (said by Content-Length, or counted while it streams in). Unlike S3, a GET
always carries `X-Content-Type-Options: nosniff` and `Content-Disposition: attachment` (a stored `attachment; …`
kept): these URLs are on the console's own origin, where an object shown as a page could run script.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from email.utils import formatdate
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_to_bytes

from orbital.store.backends.signed_urls import PATH

if TYPE_CHECKING:
    from orbital.store.backends.files import FileWorkspace

ASGIApp = Callable[[dict[str, Any], Callable[..., Awaitable[Any]], Callable[..., Awaitable[Any]]], Awaitable[None]]

READ_BYTES = 1024 * 1024
"""The bytes of a GET read from disk and sent at a time."""
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


def mount(app: ASGIApp, objects: ASGIApp) -> ASGIApp:
    """`app`, with the HTTP requests under `/_objects/` going to `objects`."""

    async def routed(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] == "http" and scope["path"].startswith(PATH):
            await objects(scope, receive, send)
        else:
            await app(scope, receive, send)

    return routed


async def _answer(
    send: Callable[..., Any], status: int, text: str, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = (text + "\n").encode() if text else b""
    head = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": head + (headers or [])})
    await send({"type": "http.response.body", "body": body})


def _download(disposition: str | None) -> str:
    """The Content-Disposition a GET sends: always a download (`attachment`, keeping a stored one's file name), so an
    object is never shown as a page of the gateway's origin, whatever its type."""
    if disposition and disposition.strip().lower().startswith("attachment"):
        return disposition
    return "attachment"


def _byte_range(header: str | None, size: int) -> tuple[int, int] | bool | None:
    """(start, end exclusive) asked by a `Range` header; None: the whole object (no header, or one not understood,
    as S3 does); False: a range the object cannot satisfy."""
    match = _RANGE.fullmatch(header.strip()) if header else None
    if match is None:
        return None
    first, last = match.group(1), match.group(2)
    if not first and not last:
        return None
    if not first:  # the last N bytes
        count = int(last)
        return (max(0, size - count), size) if count > 0 and size > 0 else False
    start = int(first)
    end = size if not last else min(size, int(last) + 1)
    if last and int(last) < start:
        return None
    return (start, end) if start < size else False


class ObjectRoute:
    """The ASGI app serving the signed URLs of `workspace`."""

    def __init__(self, workspace: FileWorkspace) -> None:
        self.workspace = workspace

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            return
        raw = scope.get("raw_path") or scope["path"].encode()
        prefix = PATH.encode()
        if not raw.startswith(prefix):
            await _answer(send, 404, "Not found")
            return
        try:
            key = unquote_to_bytes(raw[len(prefix) :]).decode("utf-8")
        except UnicodeDecodeError:
            await _answer(send, 403, "Forbidden: not a signed URL of this gateway")
            return
        method = scope["method"]
        query = scope.get("query_string", b"").decode("latin-1")
        why = self.workspace.urls.refusal(method, key, query)
        if why is not None:
            await _answer(send, 403, f"Forbidden: {why}")
            return
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        if method == "GET":
            await self._get(key, headers, send)
        elif method == "PUT":
            await self._put(key, headers, receive, send)
        else:  # a signature is only ever made for GET or PUT
            await _answer(send, 403, "Forbidden: not a signed URL of this gateway")

    async def _get(self, key: str, headers: dict[str, str], send: Callable[..., Any]) -> None:
        opened = await asyncio.to_thread(self.workspace.open, key)
        if opened is None:
            await _answer(send, 404, "No such object")
            return
        fh, entry = opened
        try:
            size = entry.size
            asked = _byte_range(headers.get("range"), size)
            if asked is False:
                await _answer(send, 416, "Range not satisfiable", [(b"content-range", f"bytes */{size}".encode())])
                return
            start, end = asked if isinstance(asked, tuple) else (0, size)
            out = [
                (b"content-type", entry.content_type.encode("latin-1", "replace")),
                (b"content-length", str(end - start).encode()),
                (b"etag", entry.etag.encode()),
                (b"last-modified", formatdate(entry.modified_ns / 1e9, usegmt=True).encode()),
                (b"accept-ranges", b"bytes"),
                (b"x-content-type-options", b"nosniff"),
            ]
            for name, value in (
                (b"content-encoding", entry.content_encoding),
                (b"content-disposition", _download(entry.content_disposition)),
                (b"content-language", entry.content_language),
                (b"cache-control", entry.cache_control),
            ):
                if value:
                    out.append((name, value.encode("latin-1", "replace")))
            if isinstance(asked, tuple):
                out.append((b"content-range", f"bytes {start}-{end - 1}/{size}".encode()))
            await send(
                {"type": "http.response.start", "status": 206 if isinstance(asked, tuple) else 200, "headers": out}
            )
            fh.seek(start)
            left = end - start
            while left > 0:
                data = await asyncio.to_thread(fh.read, min(READ_BYTES, left))
                if not data:
                    raise OSError(f"the bytes of {key!r} end before its size")
                left -= len(data)
                await send({"type": "http.response.body", "body": data, "more_body": left > 0})
            if end == start:
                await send({"type": "http.response.body", "body": b""})
        finally:
            fh.close()

    async def _put(
        self, key: str, headers: dict[str, str], receive: Callable[..., Any], send: Callable[..., Any]
    ) -> None:
        limit = self.workspace.max_put_bytes
        declared = headers.get("content-length")
        if declared is not None and not (declared.isascii() and declared.isdigit()):
            await _answer(send, 400, "Bad Content-Length")
            return
        if declared is not None and int(declared) > limit:
            await _answer(send, 413, f"Entity too large: at most {limit} bytes")
            return
        upload = await asyncio.to_thread(self.workspace.upload)
        refusal: tuple[int, str] | None = None
        try:  # what is not committed is removed before any answer goes out
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return  # the body never arrived whole: nothing is stored
                data = message.get("body", b"")
                if upload.size + len(data) > limit:
                    refusal = (413, f"Entity too large: at most {limit} bytes")
                    break
                if data:
                    upload.write(data)
                if not message.get("more_body", False):
                    break
            if refusal is None and declared is not None and upload.size != int(declared):
                refusal = (400, f"Incomplete body: {upload.size} of {declared} bytes")
            if refusal is None:
                entry = await asyncio.to_thread(
                    self.workspace.commit,
                    upload,
                    key,
                    content_type=headers.get("content-type") or "application/octet-stream",
                    content_encoding=headers.get("content-encoding"),
                    content_disposition=headers.get("content-disposition"),
                    content_language=headers.get("content-language"),
                    cache_control=headers.get("cache-control"),
                )
        finally:
            upload.discard()  # the partial body, unless it was committed
        if refusal is not None:
            await _answer(send, *refusal)
            return
        await _answer(send, 200, "", [(b"etag", entry.etag.encode())])
