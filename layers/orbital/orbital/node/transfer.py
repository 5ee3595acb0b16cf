"""File transfers with the gateway (node as source or destination; chunked frames or presigned URLs)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import errno
import logging
import os
import shutil
import struct
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from orbital.domain.sniff import guess_mime
from orbital.node.tools import resolve_path

CHUNK_SIZE = 64 * 1024
"""Text (`bin`) frames: 64 KiB of data is ~87 KB encoded, inside API Gateway's 128 KB message limit."""
BINARY_CHUNK_SIZE = 256 * 1024
"""Binary frames (local gateway only; API Gateway refuses them): GSV's chunk size."""
SNIFF_BYTES = 8192
START_TIMEOUT_S = 600.0
END_WAIT_S = 30.0
HTTP_TIMEOUT_S = 300.0

log = logging.getLogger("orbital.node")


class TransferLink(Protocol):
    """What transfers need from the connection."""

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]: ...

    async def send_chunk(self, transfer_id: int, offset: int, data: bytes) -> None: ...

    def chunk_size(self) -> int: ...

    def run_blocking(self, fn: Callable[..., Any], *args: Any) -> Awaitable[Any]: ...


class TransferAbortedError(Exception):
    pass


@dataclass
class _Source:
    transfer_id: int
    path: Path
    started: asyncio.Future[dict[str, Any]]
    aborted: bool = False


@dataclass
class _Destination:
    transfer_id: int
    target: Path
    temp: Path
    fh: BinaryIO
    size: int
    mode: str
    download_url: str | None
    received: int = 0
    next_offset: int = 0
    offsets: set[int] = field(default_factory=set)
    error: str | None = None
    aborted: bool = False
    progress: asyncio.Event = field(default_factory=asyncio.Event)


def _transfer_id(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return None
    if int(value) != value or value < 0:
        return None
    return int(value)


def http_put_file(url: str, path: Path, size: int, mime: str | None) -> int:
    """Upload a file to a presigned URL, streaming it from disk."""
    with path.open("rb") as fh:
        # always name a type: urllib would otherwise send a form content type, and a form body is not a file
        headers = {"Content-Length": str(size), "Content-Type": mime or "application/octet-stream"}
        request = urllib.request.Request(url, data=fh, method="PUT", headers=headers)
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            response.read()
    return size


def http_get_into(url: str, fh: BinaryIO) -> int:
    """Download a presigned URL into an open file; returns the byte count."""
    fh.seek(0)
    fh.truncate()
    with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
        shutil.copyfileobj(response, fh, 1024 * 1024)
    return fh.tell()


class TransferManager:
    def __init__(self, link: TransferLink, workspace: Path) -> None:
        self.link = link
        self.workspace = workspace
        self.sources: dict[int, _Source] = {}
        self.destinations: dict[int, _Destination] = {}

    # -- node as source ---------------------------------------------------------------------------------------
    async def on_send(self, payload: dict[str, Any]) -> None:
        tid = _transfer_id(payload.get("transferId"))
        raw_path = payload.get("path")
        if tid is None or not isinstance(raw_path, str) or not raw_path:
            return
        mode = payload.get("mode") or "chunks"
        path = resolve_path(self.workspace, raw_path)
        try:
            size, head = await self.link.run_blocking(_stat_and_head, path)
        except OSError as exc:
            log.warning("transfer %s: cannot read %s", tid, path, extra={"fields": {"transferId": tid}})
            failure = f"Failed to read file {path}: {exc.strerror or exc}"
            await self._call_quietly("transfer.meta", {"transferId": tid, "size": 0, "error": failure})
            return
        mime = guess_mime(head, path.name)
        loop = asyncio.get_running_loop()
        # the gateway may send transfer.start before it answers transfer.meta: the waiter exists first
        source = _Source(tid, path, loop.create_future())
        self.sources[tid] = source
        try:
            meta: dict[str, Any] = {"transferId": tid, "size": size}
            if mime:
                meta["mime"] = mime
            response = await self.link.call("transfer.meta", meta)
            if not response.get("ok"):
                log.warning("transfer %s: gateway refused transfer.meta: %s", tid, _error_text(response))
                return
            start = await asyncio.wait_for(source.started, START_TIMEOUT_S)
            log.info("transfer %s: sending %s (%s bytes, %s)", tid, path, size, mode)
            error: str | None = None
            sent: int | None = None
            if mode == "presigned":
                url = start.get("uploadUrl")
                try:
                    if not isinstance(url, str) or not url:
                        raise ValueError("transfer.start carried no uploadUrl")
                    await self.link.run_blocking(http_put_file, url, path, size, mime)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # file, network and HTTP errors alike
                    error = f"Upload failed: {exc}"
            else:
                try:
                    sent = await self._stream_chunks(source)
                except (TransferAbortedError, ConnectionError):
                    return  # aborted, or the socket is gone (the gateway fails the transfer itself)
                except OSError as exc:
                    error = f"Failed to read file {path}: {exc.strerror or exc}"
            if source.aborted:
                return
            complete: dict[str, Any] = {"transferId": tid}
            if sent is not None:
                complete["bytesSent"] = sent  # lets the gateway wait for chunks still on their way, and no longer
            if error:
                log.warning("transfer %s: %s", tid, error)
                complete["error"] = error
            await self._call_quietly("transfer.complete", complete)
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            log.warning("transfer %s: no transfer.start from the gateway; giving up", tid)
        except (TransferAbortedError, ConnectionError):
            return
        finally:
            if self.sources.get(tid) is source:
                del self.sources[tid]

    async def _stream_chunks(self, source: _Source) -> int:
        """Send the file as chunks; returns how many bytes were sent."""
        fh = await self.link.run_blocking(source.path.open, "rb")
        try:
            offset = 0
            while True:
                if source.aborted:
                    raise TransferAbortedError()
                data = fh.read(self.link.chunk_size())
                if not data:
                    return offset
                await self.link.send_chunk(source.transfer_id, offset, data)
                offset += len(data)
        finally:
            fh.close()

    def on_start(self, payload: dict[str, Any]) -> None:
        tid = _transfer_id(payload.get("transferId"))
        source = self.sources.get(tid) if tid is not None else None
        if source is not None and not source.started.done():
            source.started.set_result(payload)

    # -- node as destination ----------------------------------------------------------------------------------
    async def on_receive(self, payload: dict[str, Any]) -> None:
        tid = _transfer_id(payload.get("transferId"))
        raw_path = payload.get("path")
        if tid is None or not isinstance(raw_path, str) or not raw_path:
            return
        size = _transfer_id(payload.get("size")) or 0
        mode = payload.get("mode") or "chunks"
        download_url = payload.get("downloadUrl") if isinstance(payload.get("downloadUrl"), str) else None
        target = resolve_path(self.workspace, raw_path)
        directory = target.parent
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            error = f"Failed to create directory {directory}: {exc.strerror or exc}"
            await self._call_quietly("transfer.accept", {"transferId": tid, "error": error})
            return
        temp = directory / f".{target.name}.orbital-part-{tid}"
        try:
            if target.is_dir():
                raise IsADirectoryError(errno.EISDIR, "Is a directory")
            fh: BinaryIO = temp.open("w+b")
        except OSError as exc:
            failure = f"Failed to create file {target}: {exc.strerror or exc}"
            await self._call_quietly("transfer.accept", {"transferId": tid, "error": failure})
            return
        old = self.destinations.pop(tid, None)
        if old is not None:
            self._discard(old)
        dest = _Destination(tid, target, temp, fh, size, mode, download_url)
        self.destinations[tid] = dest
        log.info("transfer %s: receiving %s (%s bytes, %s)", tid, target, size, mode)
        try:
            response = await self.link.call("transfer.accept", {"transferId": tid})
        except (ConnectionError, TimeoutError):
            self._drop(dest)
            return
        if not response.get("ok"):
            log.warning("transfer %s: gateway refused transfer.accept: %s", tid, _error_text(response))
            self._drop(dest)

    def on_binary(self, frame: bytes) -> None:
        if len(frame) < 4:
            return
        (tid,) = struct.unpack_from("<I", frame)
        dest = self.destinations.get(tid)
        if dest is not None:
            self._write(dest, dest.next_offset, frame[4:])

    def on_text_chunk(self, frame: dict[str, Any]) -> None:
        tid = _transfer_id(frame.get("transferId"))
        dest = self.destinations.get(tid) if tid is not None else None
        if dest is None:
            return
        data_text = frame.get("data")
        if not isinstance(data_text, str):
            return
        try:
            data = base64.b64decode(data_text, validate=True)
        except (binascii.Error, ValueError):
            dest.error = dest.error or "invalid base64 in chunk"
            dest.progress.set()
            return
        offset = _transfer_id(frame.get("offset"))
        self._write(dest, dest.next_offset if offset is None else offset, data)

    def _write(self, dest: _Destination, offset: int, data: bytes) -> None:
        if dest.aborted or dest.error or offset in dest.offsets:
            return
        if offset + len(data) > dest.size:
            dest.error = f"received {offset + len(data)} bytes, more than the announced {dest.size}"
        else:
            try:
                dest.fh.seek(offset)
                dest.fh.write(data)
                dest.fh.flush()
            except (OSError, ValueError) as exc:
                dest.error = str(exc)
            else:
                dest.offsets.add(offset)
                dest.received += len(data)
                dest.next_offset = max(dest.next_offset, offset + len(data))
        dest.progress.set()

    async def on_end(self, payload: dict[str, Any]) -> None:
        tid = _transfer_id(payload.get("transferId"))
        dest = self.destinations.get(tid) if tid is not None else None
        if tid is None or dest is None:
            return
        try:
            if dest.mode == "presigned":
                url = payload.get("downloadUrl") or dest.download_url
                if not isinstance(url, str) or not url:
                    raise OSError("no downloadUrl")
                dest.received = await self.link.run_blocking(http_get_into, url, dest.fh)
            else:
                await self._wait_for_bytes(dest)
            if dest.aborted:
                return
            if dest.error:
                raise OSError(dest.error)
            if dest.received != dest.size:
                raise OSError(f"expected {dest.size} bytes, received {dest.received}")
            await self.link.run_blocking(_finish_file, dest.fh, dest.temp, dest.target)
        except asyncio.CancelledError:
            self._drop(dest)
            raise
        except Exception as exc:
            if dest.aborted:
                return
            self._drop(dest)
            text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            log.warning("transfer %s: write failed: %s", tid, text)
            params = {"transferId": tid, "bytesWritten": dest.received, "error": f"Write error: {text}"}
            await self._call_quietly("transfer.done", params)
            return
        if self.destinations.get(tid) is dest:
            del self.destinations[tid]
        log.info("transfer %s: wrote %s (%s bytes)", tid, dest.target, dest.received)
        await self._call_quietly("transfer.done", {"transferId": tid, "bytesWritten": dest.received})

    async def _wait_for_bytes(self, dest: _Destination) -> None:
        deadline = time.monotonic() + END_WAIT_S
        while dest.received < dest.size and not dest.aborted and not dest.error:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise OSError(f"timed out waiting for data ({dest.received} of {dest.size} bytes)")
            dest.progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(dest.progress.wait(), remaining)

    # -- abort ------------------------------------------------------------------------------------------------
    def on_abort(self, payload: dict[str, Any]) -> None:
        tid = _transfer_id(payload.get("transferId"))
        if tid is None:
            return
        reason = payload.get("error")
        source = self.sources.pop(tid, None)
        if source is not None:
            self._abort_source(source)
            log.info("transfer %s: aborted by the gateway (%s)", tid, reason)
        dest = self.destinations.get(tid)
        if dest is not None:
            self._drop(dest)
            log.info("transfer %s: aborted by the gateway (%s)", tid, reason)

    def abort_all(self) -> None:
        """The connection is gone: the gateway has failed these transfers. Leave no partial files."""
        for source in list(self.sources.values()):
            self._abort_source(source)
        self.sources.clear()
        for dest in list(self.destinations.values()):
            self._drop(dest)

    @staticmethod
    def _abort_source(source: _Source) -> None:
        source.aborted = True
        if not source.started.done():
            source.started.set_exception(TransferAbortedError())
            source.started.exception()  # mark retrieved

    def _drop(self, dest: _Destination) -> None:
        dest.aborted = True
        dest.progress.set()
        if self.destinations.get(dest.transfer_id) is dest:
            del self.destinations[dest.transfer_id]
        self._discard(dest)

    @staticmethod
    def _discard(dest: _Destination) -> None:
        with contextlib.suppress(OSError):
            dest.fh.close()
        with contextlib.suppress(OSError):
            dest.temp.unlink(missing_ok=True)

    async def _call_quietly(self, method: str, params: dict[str, Any]) -> None:
        try:
            response = await self.link.call(method, params)
        except (ConnectionError, TimeoutError) as exc:
            log.warning("%s not delivered: %s", method, exc)
            return
        if not response.get("ok"):
            log.warning("gateway refused %s: %s", method, _error_text(response))


def _stat_and_head(path: Path) -> tuple[int, bytes]:
    if path.exists() and not path.is_file():
        if path.is_dir():
            raise OSError(errno.EISDIR, os.strerror(errno.EISDIR))
        raise OSError(errno.EINVAL, "not a regular file")
    with path.open("rb") as fh:
        return os.fstat(fh.fileno()).st_size, fh.read(SNIFF_BYTES)


def _finish_file(fh: BinaryIO, temp: Path, target: Path) -> None:
    fh.flush()
    os.fsync(fh.fileno())
    fh.close()
    temp.replace(target)


def _error_text(response: dict[str, Any]) -> str:
    error = response.get("error")
    if isinstance(error, dict):
        return f"{error.get('code')} {error.get('message')}"
    return str(error)
