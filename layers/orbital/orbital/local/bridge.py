"""A WebSocket endpoint with API Gateway semantics, plus its management API, on one Starlette app.

- `ws://HOST:PORT/ws`: `$connect` runs before the upgrade is accepted (a status >= 400 refuses it with HTTP 403),
  text frames are routed by their `type` (the template's RouteSelectionExpression `$request.body.type`) to the
  template's routes or `$default`, binary frames go to `$default` base64-encoded, and a close runs `$disconnect`.
  Frames of one socket are handled in order, sockets concurrently; with `concurrent_frames`, a socket's text
  frames are handled concurrently too, as API Gateway runs them in parallel Lambdas in any order (`frame_jitter_ms`
  adds a random delay of up to that many milliseconds before each, to shuffle them a little). Binary frames, which
  only the local gateway accepts, stay in order. A socket is read all the time, whatever its frames wait for: the
  frames to handle in order queue up (at most `MAX_QUEUED_FRAMES`, then reading waits), so pings and pongs keep
  flowing while a slow frame is handled — a peer's keepalive never times out because the gateway is busy.
- Handlers run in a pool of threads (they may block on AWS calls and on the management API of this same server),
  except requests for `inline_methods`: methods that answer from what the gateway holds and never push to a socket
  (`MethodSpec.reads_only`: `config.get`, `config.schema`, ...) and, when the gateway's AWS calls and management API
  are answered in process, methods that only read, write and post (`MethodSpec.posts_without_waiting`: a node's
  `tool.result`) run on the event loop, saving the hop to a thread (and, for a post, the hop back), which costs more
  than such a method itself. A post made there is accepted at once and written in turn. Such a frame is handled by
  the task that read it when nothing of its socket's is queued or being handled (no hand-off to the socket's ordered
  task), else it takes its place in the queue.
- What goes out on a socket (a route's reply, a post, a close) is written in the order it was sent: while one write
  is under way the others queue behind it.
- Routes with a route response send the handler's `body` back on the socket, like API Gateway's two-way routes.
- API Gateway's caps hold both ways for text: a text frame over 32 KB (`websocket_protocol`, which sees frames
  before they are joined into a message) or a text message over 128 KB closes the socket with 1009 ("Frame too
  big" / "Message too big"), and posting a message over 128 KB answers 413 `PayloadTooLargeException`. Our clients
  send longer messages as fragments (`orbital.protocol.frames.fragments`). Binary frames, which API Gateway refuses
  altogether and only this gateway accepts, are not capped.
- The management API (`Bridge.manage`: POST / GET / DELETE of a connection id) is answered in process (the local
  Sender, `orbital.local.sender`), never on the gateway's public port. Unknown ids answer 410 GoneException. DELETE
  closes the socket (code/reason may be given in x-orbital-close-* headers).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import concurrent.futures
import contextlib
import itertools
import json
import logging
import random
import sys
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Mount, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from orbital.protocol.frames import MAX_FRAME_BYTES, MAX_MESSAGE_BYTES
from orbital.runtime.attempts import PEER_UID

CLOSE_CODE_HEADER = "x-orbital-close-code"
CLOSE_REASON_HEADER = "x-orbital-close-reason"
"""The close code and reason of a DELETE (`Bridge.manage`): what `orbital.local.sender.BridgeSender.close` gives."""

log = logging.getLogger("orbital.bridge")

Invoke = Callable[[str, dict[str, Any]], Any]

MANAGE_TIMEOUT_S = 15.0
"""Bound on one in-process management call (inside botocore's 20 s read timeout of the HTTP path)."""


MAX_QUEUED_FRAMES = 1024
"""Frames of one socket read but not yet handled in order; past this, reading the socket waits for them."""


_REQUEST_PREFIX = uuid.uuid4().hex[:8]
_request_numbers = itertools.count(1)


def request_id() -> str:
    """An id for one request, unique in this process and across restarts, without a random draw each time (uuid4
    reads the system's random source: a system call for every frame)."""
    return f"{_REQUEST_PREFIX}-{next(_request_numbers):012x}"


_Answer = tuple[int, dict[str, str], bytes]
"""A management API answer: status, headers, body."""
_POSTED: _Answer = (200, {}, b"")
_CLOSED: _Answer = (204, {}, b"")


class BridgeUnavailableError(RuntimeError):
    """The bridge is not serving (its event loop stopped): what a refused connection is over HTTP."""


@dataclass
class _Close:
    """An outgoing close, after the frames posted before it."""

    code: int
    reason: str


class LineSocket:
    """A stream socket of JSON lines (the xeno Unix socket) standing in for a WebSocket: each message is one line."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.headers: dict[str, str] = {}

    async def send_text(self, text: str) -> None:
        self.writer.write(text.encode("utf-8") + b"\n")
        await self.writer.drain()

    async def send_bytes(self, data: bytes) -> None:
        self.writer.write(data + b"\n")
        await self.writer.drain()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.writer.close()


@dataclass
class _Socket:
    ws: WebSocket | LineSocket
    connected_at: float
    source_ip: str
    peer_uid: int | None = None
    """The OS user of the peer's socket, where the front door could tell (`runtime.attempts.PEER_UID`)."""
    last_active: float = field(default_factory=time.time)
    closed: bool = False
    """No more posts: closed through the management API, or a write failed."""
    disconnected: bool = False
    outbox: collections.deque[str | bytes | _Close] = field(default_factory=collections.deque)
    """What waits to be written while another write is under way (see `Bridge._send`)."""
    sending: bool = False
    handling: bool = False
    """The socket's ordered task is handling one of its frames (see `Bridge._in_order`)."""


class Bridge:
    def __init__(
        self,
        invoke: Invoke,
        routes: dict[str, dict[str, Any]],
        *,
        stage: str = "local",
        api_id: str = "local",
        domain: str = "127.0.0.1",
        rest_app: Any = None,
        path: str = "/ws",
        workers: int = 8,
        concurrent_frames: bool = False,
        frame_jitter_ms: float = 0.0,
        inline_methods: frozenset[str] = frozenset(),
        connect_inline: bool = True,
        greet_after_s: float = 0.0,
        greet: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        self.invoke = invoke
        self.routes = routes
        self.stage = stage
        self.api_id = api_id
        self.domain = domain
        self.rest_app = rest_app
        self.path = path
        self.sockets: dict[str, _Socket] = {}
        self.workers = workers
        self.concurrent_frames = concurrent_frames
        self.frame_jitter_ms = frame_jitter_ms
        self.inline_methods = inline_methods
        self.connect_inline = connect_inline
        self.greet_after_s = greet_after_s
        self.greet = greet
        """Called (with a `$default`-shaped event without a body) for a socket that said nothing for
        `greet_after_s` seconds after its upgrade: what a client that waits to be greeted gets (Exoclaw's hello on a
        gateway without a token). API Gateway has no such event; 0 turns it off."""
        """`$connect` answered on the loop: it reads and writes nothing (true unless sockets must authenticate, when
        it arms their deadline)."""
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.eager_tasks = sys.version_info >= (3, 12)
        """Writes from the loop's thread start as eager tasks (see `_start`)."""
        self.loop: asyncio.AbstractEventLoop | None = None
        self._time_second = -1
        self._time_text = ""

    def close(self) -> None:
        """Let the handler threads go once they are done (the server has stopped)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    # --- app --------------------------------------------------------------------------------------------------

    def app(self) -> Callable[..., Any]:
        """The ASGI app: the WebSocket endpoint and the HTTP routes (not the management API: see the module's
        docstring). A socket opening on the WebSocket path goes straight to the bridge: Starlette's middleware and
        router were a quarter of the CPU of a handshake (open -> `hello-ok`, docs/performance.md)."""
        routes: list[Any] = [WebSocketRoute(self.path, self._websocket)]
        if self.rest_app is not None:
            routes.append(Mount("/", app=self.rest_app))
        routed = Starlette(routes=routes)
        path = self.path

        async def app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
            if scope["type"] == "websocket" and scope["path"] == path:
                await self._websocket(WebSocket(scope, receive=receive, send=send))
            else:
                await routed(scope, receive, send)

        return app

    # --- events -----------------------------------------------------------------------------------------------

    def _request_time(self, now: float) -> str:
        """API Gateway's `requestTime`, formatted once per second."""
        second = int(now)
        if second != self._time_second:
            self._time_second = second
            self._time_text = datetime.fromtimestamp(second, UTC).strftime("%d/%b/%Y:%H:%M:%S +0000")
        return self._time_text

    def _context(self, cid: str, route: str, event_type: str, sock: _Socket | None) -> dict[str, Any]:
        now = time.time()
        rid = request_id()
        context = {
            "routeKey": route,
            "eventType": event_type,
            "extendedRequestId": rid,
            "requestTime": self._request_time(now),
            "messageDirection": "IN",
            "stage": self.stage,
            "connectedAt": int((sock.connected_at if sock else now) * 1000),
            "requestTimeEpoch": int(now * 1000),
            "identity": _identity(sock),
            "requestId": rid,
            "domainName": self.domain,
            "connectionId": cid,
            "apiId": self.api_id,
        }
        if event_type == "MESSAGE":
            context["messageId"] = rid
        return context

    async def _call(self, route_key: str, event: dict[str, Any], *, inline: bool = False) -> Any:
        if inline:  # a method that answers from what the gateway holds: no hop to a thread (see Bridge)
            return self._invoke_now(route_key, event)
        route = self.routes.get(route_key)
        if route is None:
            return None
        try:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(self.workers, thread_name_prefix="orbital-handler")
            # a plain executor: about a third cheaper a hop than anyio's worker threads, the same bounded pool
            return await asyncio.get_running_loop().run_in_executor(self._pool, self.invoke, route["function"], event)
        except Exception:
            log.exception("handler for %s failed", route_key)
            return {"statusCode": 500}

    def _invoke_now(self, route_key: str, event: dict[str, Any]) -> Any:
        route = self.routes.get(route_key)
        if route is None:
            return None
        try:
            return self.invoke(route["function"], event)
        except Exception:
            log.exception("handler for %s failed", route_key)
            return {"statusCode": 500}

    def _route_for_text(self, text: str) -> tuple[str, bool]:
        """The route of a text frame (API Gateway's selection on `type`), and whether it is a request for one of
        `inline_methods`."""
        try:
            body = json.loads(text)
        except ValueError:
            return "$default", False
        if isinstance(body, dict):
            kind = body.get("type")
            if isinstance(kind, str) and kind in self.routes and not kind.startswith("$"):
                method = body.get("method")  # any JSON value: a list or an object is no method (and unhashable)
                return kind, kind == "req" and isinstance(method, str) and method in self.inline_methods
        return "$default", False

    # --- the socket -------------------------------------------------------------------------------------------

    async def _websocket(self, ws: WebSocket) -> None:
        self.loop = asyncio.get_running_loop()
        cid = base64.b32encode(uuid.uuid4().bytes[:10]).decode().rstrip("=")
        client = ws.client
        uid = ws.scope.get(PEER_UID)
        sock = _Socket(
            ws=ws,
            connected_at=time.time(),
            source_ip=client.host if client else "127.0.0.1",
            peer_uid=uid if isinstance(uid, int) else None,
        )
        event = {
            "headers": dict(ws.headers),
            "multiValueHeaders": {k: [v] for k, v in ws.headers.items()},
            "queryStringParameters": dict(ws.query_params) or None,
            "requestContext": self._context(cid, "$connect", "CONNECT", sock),
            "isBase64Encoded": False,
        }
        # `$connect` reads nothing and writes nothing (the `connect` request registers the socket): answered on the
        # loop, without a hop to a handler thread (unless it arms an authentication deadline)
        result = await self._call("$connect", event, inline=self.connect_inline)
        status = int(result.get("statusCode", 200)) if isinstance(result, dict) else 200
        if status >= 400:
            await _refuse(ws, status, str(result.get("body") or "") if isinstance(result, dict) else "")
            return
        await ws.accept()
        self.sockets[cid] = sock
        first: Any = None
        if self.greet is not None and self.greet_after_s > 0:
            try:
                first = await asyncio.wait_for(ws.receive(), self.greet_after_s)
            except TimeoutError:
                await self._greet(cid, sock)
        in_flight: set[asyncio.Task[None]] = set()  # concurrent frames (kept referenced until done)
        ordered: asyncio.Queue[tuple[str, dict[str, Any], bool] | None] = asyncio.Queue(MAX_QUEUED_FRAMES)
        handler = asyncio.create_task(self._in_order(sock, ordered))
        try:
            while True:
                message, first = (first, None) if first is not None else (await ws.receive(), None)
                if message["type"] == "websocket.disconnect":
                    break
                sock.last_active = time.time()
                text, data = message.get("text"), message.get("bytes")
                if text is not None and len(text) * 4 > MAX_MESSAGE_BYTES and len(text.encode()) > MAX_MESSAGE_BYTES:
                    sock.closed = True
                    with contextlib.suppress(Exception):
                        await ws.close(code=1009, reason="Message too big")
                    break
                inline = False
                if text is not None:
                    route, inline = self._route_for_text(text)
                    event = {
                        "requestContext": self._context(cid, route, "MESSAGE", sock),
                        "body": text,
                        "isBase64Encoded": False,
                    }
                elif data is not None:
                    route = "$default"
                    event = {
                        "requestContext": self._context(cid, route, "MESSAGE", sock),
                        "body": base64.b64encode(data).decode(),
                        "isBase64Encoded": True,
                    }
                else:
                    continue
                if self.concurrent_frames and text is not None:
                    task = asyncio.create_task(self._frame(sock, route, event, inline))
                    in_flight.add(task)
                    task.add_done_callback(in_flight.discard)
                elif inline and not sock.handling and ordered.empty() and self.frame_jitter_ms <= 0:
                    self._frame_now(sock, route, event)  # nothing of this socket's is before it
                else:
                    await ordered.put((route, event, inline))
        except WebSocketDisconnect:
            pass
        finally:
            # what was read before the close is still handled, and before $disconnect
            try:
                await ordered.put(None)
                await handler
            finally:
                handler.cancel()  # only if this task itself was cancelled meanwhile (the server stopping)
                await self._gone(cid, sock)

    async def _greet(self, cid: str, sock: _Socket) -> None:
        assert self.greet is not None
        event = {"requestContext": self._context(cid, "$default", "MESSAGE", sock), "isBase64Encoded": False}
        try:
            loop = asyncio.get_running_loop()
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(self.workers, thread_name_prefix="orbital-handler")
            result = await loop.run_in_executor(self._pool, self.greet, event)
        except Exception:
            log.exception("greeting socket %s failed", cid)
            return
        if isinstance(result, dict) and result.get("body") and not sock.closed:
            await self._send(sock, result["body"])

    async def serve_lines(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        headers: dict[str, str],
        query: dict[str, str],
    ) -> None:
        """A stream of JSON lines (the xeno Unix socket) as one more socket: `$connect` with `headers` and `query`,
        each line a `$default` frame whose answer goes back as a line, posts as lines, `$disconnect` at its end.
        A line longer than the reader's limit ends the connection."""
        self.loop = asyncio.get_running_loop()
        cid = base64.b32encode(uuid.uuid4().bytes[:10]).decode().rstrip("=")
        sock = _Socket(ws=LineSocket(writer), connected_at=time.time(), source_ip="unix")
        event = {
            "headers": headers,
            "multiValueHeaders": {k: [v] for k, v in headers.items()},
            "queryStringParameters": query or None,
            "requestContext": self._context(cid, "$connect", "CONNECT", sock),
            "isBase64Encoded": False,
        }
        result = await self._call("$connect", event)
        if isinstance(result, dict) and int(result.get("statusCode", 200)) >= 400:
            writer.close()
            return
        self.sockets[cid] = sock
        try:
            while not sock.closed:
                try:
                    line = await reader.readline()
                except (ValueError, ConnectionError):  # too long, or reset
                    break
                if not line:
                    break
                text = line.decode("utf-8", "replace").strip()
                if not text:
                    continue
                sock.last_active = time.time()
                frame = {"requestContext": self._context(cid, "$default", "MESSAGE", sock), "body": text}
                await self._frame(sock, "$default", {**frame, "isBase64Encoded": False})
        finally:
            await self._gone(cid, sock)
            with contextlib.suppress(Exception):
                writer.close()

    async def _in_order(self, sock: _Socket, frames: asyncio.Queue[tuple[str, dict[str, Any], bool] | None]) -> None:
        """Handle a socket's ordered frames one after the other until the end marker."""
        while (item := await frames.get()) is not None:
            sock.handling = True
            try:
                await self._frame(sock, *item)
            finally:
                sock.handling = False

    def _frame_now(self, sock: _Socket, route: str, event: dict[str, Any]) -> None:
        """An `inline` frame handled by the task that read it, when none of the socket's frames is queued or being
        handled: no hand-off to the socket's ordered task (a turn of the event loop). The reply is queued, not
        waited for, so the socket is read on at once whatever its writes wait for."""
        result = self._invoke_now(route, event)
        two_way = self.routes.get(route, {}).get("two_way")
        if two_way and isinstance(result, dict) and result.get("body") and not sock.closed:
            self._send_soon(sock, result["body"])

    async def _frame(self, sock: _Socket, route: str, event: dict[str, Any], inline: bool = False) -> None:
        if self.frame_jitter_ms > 0:
            await asyncio.sleep(random.uniform(0, self.frame_jitter_ms / 1000))
        result = await self._call(route, event, inline=inline)
        two_way = self.routes.get(route, {}).get("two_way")
        if two_way and isinstance(result, dict) and result.get("body") and not sock.closed:
            await self._send(sock, result["body"])

    async def _gone(self, cid: str, sock: _Socket) -> None:
        if sock.disconnected:
            return
        sock.disconnected = True
        self.sockets.pop(cid, None)
        event = {"requestContext": self._context(cid, "$disconnect", "DISCONNECT", sock), "isBase64Encoded": False}
        await self._call("$disconnect", event)

    # --- management API ---------------------------------------------------------------------------------------

    def manage(
        self, method: str, cid: str, data: bytes, headers: dict[str, str], *, timeout: float = MANAGE_TIMEOUT_S
    ) -> _Answer:
        """The management API without HTTP, for this process (`orbital.local.sender`). From another thread
        it waits for the loop; on the loop's own thread (a handler run there) it answers at once and the frame or
        the close is written after what was posted to that socket before it. Raises BridgeUnavailableError when the
        bridge's event loop is not running (stopped), TimeoutError when the call took longer than `timeout` (it is
        then cancelled)."""
        loop = self.loop
        if loop is None:  # no socket has connected yet, so no connection id can exist
            return _gone_response(cid)
        if loop.is_closed() or not loop.is_running():
            raise BridgeUnavailableError("the local gateway's event loop is not running")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:  # a handler run on the loop (`inline_methods`): answered now, written in order
            return self._manage_now(method, cid, data, headers)
        try:
            future = asyncio.run_coroutine_threadsafe(self._manage(method, cid, data, headers), loop)
        except RuntimeError as exc:  # the loop closed in between
            raise BridgeUnavailableError(str(exc)) from exc
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"management call for {cid} took longer than {timeout}s") from None

    async def _manage(self, method: str, cid: str, data: bytes, headers: dict[str, str]) -> _Answer:
        sock = self._open_socket(method, cid, data)
        if not isinstance(sock, _Socket):
            return sock
        if method == "DELETE":
            sock.closed = True
            await self._send(sock, _close_of(headers))
            await self._gone(cid, sock)
            return _CLOSED
        return _POSTED if await self._send(sock, _payload(data)) else _gone_response(cid)

    def _manage_now(self, method: str, cid: str, data: bytes, headers: dict[str, str]) -> _Answer:
        """`_manage` for a caller on the loop's thread: nothing is waited for. A post is accepted once the socket
        is known and open (as API Gateway accepts it), and written in turn; a close runs `$disconnect` in a task."""
        sock = self._open_socket(method, cid, data)
        if not isinstance(sock, _Socket):
            return sock
        if method == "DELETE":
            sock.closed = True
            self._send_soon(sock, _close_of(headers))
            self._start(self._gone(cid, sock))
            return _CLOSED
        self._send_soon(sock, _payload(data))
        return _POSTED

    def _open_socket(self, method: str, cid: str, data: bytes) -> _Socket | _Answer:
        """The open socket a POST or DELETE is for, or the whole answer: 410 for a socket unknown or closed, a
        GET's information, 413 for a text message over 128 KB."""
        sock = self.sockets.get(cid)
        if sock is None or sock.closed:
            return _gone_response(cid)
        if method == "GET":
            return _info(sock)
        if method == "POST" and len(data) > MAX_MESSAGE_BYTES and _is_text(data):
            message = f"Message of {len(data)} bytes exceeds the 128 KB limit of a WebSocket message"
            body = json.dumps({"message": message}).encode()
            return 413, {"content-type": "application/json", "x-amzn-ErrorType": "PayloadTooLargeException"}, body
        return sock

    # --- writing ----------------------------------------------------------------------------------------------

    async def _send(self, sock: _Socket, item: str | bytes | _Close) -> bool:
        """Write a frame (or the close) after everything sent to this socket before it. If another write is under
        way it is queued and written by that writer; False if the write failed (the socket is then closed)."""
        if sock.sending:
            sock.outbox.append(item)
            return True
        sock.sending = True
        try:
            written = await self._write(sock, item)
            await self._write_queued(sock)
        finally:
            sock.sending = False
        return written

    def _send_soon(self, sock: _Socket, item: str | bytes | _Close) -> None:
        """`_send` without waiting, from the loop's thread: queued at once, so whatever is sent to the socket after
        this call (the reply of the frame being handled, say) is written after it."""
        sock.outbox.append(item)
        if not sock.sending:
            sock.sending = True
            self._start(self._drain(sock))

    async def _drain(self, sock: _Socket) -> None:
        try:
            await self._write_queued(sock)
        finally:
            sock.sending = False

    async def _write_queued(self, sock: _Socket) -> None:
        while sock.outbox:
            if not await self._write(sock, sock.outbox.popleft()):
                sock.outbox.clear()

    async def _write(self, sock: _Socket, item: str | bytes | _Close) -> bool:
        try:
            if isinstance(item, _Close):
                await sock.ws.close(code=item.code, reason=item.reason)
            elif isinstance(item, str):
                await sock.ws.send_text(item)
            else:
                await sock.ws.send_bytes(item)
        except Exception:
            sock.closed = True
            return False
        return True

    def _start(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run `coro` as a task from the loop's thread, at once as far as it goes without waiting where the
        interpreter can (an eager task, Python 3.12+): a frame is then written before the handler that sent it
        goes on. The loop holds tasks only weakly: this one is kept until it is done."""
        loop = asyncio.get_running_loop()
        eager = self.eager_tasks
        task = asyncio.Task(coro, loop=loop, eager_start=True) if eager else loop.create_task(coro)  # type: ignore[call-arg,unused-ignore]
        if not task.done():
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)


async def _refuse(ws: WebSocket, status: int, text: str) -> None:
    """Refuse an upgrade with `status` (an HTTP response instead of the upgrade, where the server can send one)."""
    if "websocket.http.response" in (ws.scope.get("extensions") or {}):
        await ws.send_denial_response(Response((text or "Forbidden") + "\n", status_code=status))
    else:
        await ws.close(code=1008)


def websocket_protocol() -> type[asyncio.Protocol]:
    """uvicorn's WebSocket protocol, holding text frames to API Gateway's 32 KB: a bigger one (a whole message or a
    fragment of one) closes the socket with 1009 before anything of its message reaches a handler."""
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
    from websockets.frames import Frame

    class ApiGatewayFrames(WebSocketsSansIOProtocol):
        def _too_big(self, event: Frame) -> bool:
            if len(event.data) <= MAX_FRAME_BYTES or self.close_sent or self.transport.is_closing():
                return False
            self.frames = []
            self.conn.send_close(1009, "Frame too big")
            self.queue.put_nowait({"type": "websocket.disconnect", "code": 1009, "reason": "Frame too big"})
            self.transport.write(b"".join(self.conn.data_to_send()))
            self.close_sent = True
            self.transport.close()
            return True

        def handle_text(self, event: Frame) -> None:
            if not self._too_big(event):
                super().handle_text(event)

        def handle_cont(self, event: Frame) -> None:
            if self.curr_msg_data_type == "bytes" or not self._too_big(event):
                super().handle_cont(event)

    return ApiGatewayFrames


def _identity(sock: _Socket | None) -> dict[str, Any]:
    if sock is None:
        return {"sourceIp": "127.0.0.1"}
    if sock.peer_uid is None:
        return {"sourceIp": sock.source_ip}
    return {"sourceIp": sock.source_ip, PEER_UID: sock.peer_uid}


def _info(sock: _Socket) -> _Answer:
    fmt = "%Y-%m-%dT%H:%M:%S.%fZ"
    info = {
        "connectedAt": datetime.fromtimestamp(sock.connected_at, UTC).strftime(fmt),
        "lastActiveAt": datetime.fromtimestamp(sock.last_active, UTC).strftime(fmt),
        "identity": {"sourceIp": sock.source_ip, "userAgent": sock.ws.headers.get("user-agent", "")},
    }
    return 200, {"content-type": "application/json"}, json.dumps(info).encode()


def _close_of(headers: dict[str, str]) -> _Close:
    return _Close(int(headers.get(CLOSE_CODE_HEADER) or 1000), headers.get(CLOSE_REASON_HEADER) or "")


def _payload(data: bytes) -> str | bytes:
    """What to write for a posted message: its text (a text frame) if `_is_text`, else the bytes themselves."""
    if not _text_like(data):
        return data
    try:
        return data.decode("utf-8")  # decoded once: the check and the text are the same work
    except UnicodeDecodeError:
        return data


def _gone_response(cid: str) -> _Answer:
    body = json.dumps({"message": f"Connection {cid} is gone"}).encode()
    return 410, {"content-type": "application/json", "x-amzn-ErrorType": "GoneException"}, body


def _text_like(data: bytes) -> bool:
    return bool(data) and data[:1] in (b"{", b"[") and b"\x00" not in data[:4]


def _is_text(data: bytes) -> bool:
    """JSON frames go out as text, transfer chunks (4-byte little-endian id first) as binary."""
    if not _text_like(data):
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
