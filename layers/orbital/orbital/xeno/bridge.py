"""`orbital xeno-bridge`: xeno's Unix socket on this machine, relayed to an Orbital gateway's WebSocket API (a
deployed stack behind API Gateway, or any gateway, local ones included).

The socket is `<home>/.xeno/gateway.sock` with the local gateway's rules (`orbital.xeno.unix_socket`). Each line a
client writes is one text frame to the gateway, each frame the gateway sends back one line to that client.

- **One upstream WebSocket per Unix client.** The gateway answers a socket's requests with that socket's own JSON-RPC
  ids and sends a run's notifications (and the deferred answers of `gateway.heartbeat`/`gateway.new_session`) to the
  socket that started it, so with a socket of its own each client gets exactly its frames and nothing needs routing:
  two clients may both use id 1 or the same `requestId`. One shared socket would need the bridge to rewrite ids and
  route by `requestId`, which clients choose. The cost is one gateway connection per client (xeno has one, its
  console).
- The upgrade carries `?dialect=xeno` and the token as `Authorization: Bearer` (read again at every connection
  attempt, so a corrected token file needs no restart; never logged).
- A message over `FRAGMENT_BYTES` goes out as fragments (API Gateway's 32 KB frame cap); one over 128 KB (its message
  cap) is refused here with xeno's error, never sent: the gateway would close the socket for it.
- The upstream reconnects with backoff (full jitter) while the Unix socket stays up. A request that arrives while it
  is down asks for an attempt at once; if that fails, the request is answered with a JSON-RPC error (-32000).
  Nothing is left without an answer: requests in flight when the upstream closes get an error, runs already
  accepted get `gateway.error` + `gateway.done`, a request the gateway does not answer in time gets an error
  (API Gateway answers a failed integration with a frame of its own, which is not JSON-RPC and is not relayed).
- Keepalive: every `keepalive` seconds a request of an unknown method (`orbital.keepalive`: the gateway answers
  "Method not found"), a real round trip well inside API Gateway's 10-minute idle timeout; no answer in time →
  reconnect. Its answers are not relayed.
- Attachments: before a `gateway.query` is relayed, each `attachments[].path` is uploaded to the gateway's
  `POST /api/artifacts/` and rewritten to `artifact:{id}` (`orbital.xeno.uploads`), so a gateway that cannot read
  this machine's disk still gets the file. The HTTP API's address is `http_url`, or the WebSocket URL's host when
  it serves both; without one the paths are relayed as they are (and the gateway refuses them: it reads a path only
  for a client of its own Unix socket).
- The socket is its user's: a connection whose peer (`SO_PEERCRED`) is another user is closed at once, since the
  bridge reads and uploads the files its clients name.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from orbital import __version__
from orbital.protocol.frames import FRAGMENT_BYTES, MAX_MESSAGE_BYTES, fragments
from orbital.protocol.reconnect import Backoff, Ended, keep_connected
from orbital.xeno.unix_socket import listener, remove, same_user, socket_path
from orbital.xeno.uploads import Uploader, http_base

log = logging.getLogger("orbital.xeno.bridge")

ERROR_CODE = -32000
TOO_LARGE = "Message too large for cloud gateway (max 128 KB)"
KEEPALIVE_METHOD = "orbital.keepalive"
MAX_LINE_BYTES = 8 * 1024 * 1024
"""The longest line read whole (to answer it with its id); a longer one is skipped and answered with id null."""
TASK_METHODS = frozenset({"gateway.heartbeat", "gateway.new_session"})
"""Requests the gateway answers only when the run they start has ended."""
_EXPIRED_KEPT = 256


class TokenUnavailableError(ValueError):
    """The token cannot be read (its file is missing, unreadable or empty)."""


def _no_token() -> str | None:
    return None


@dataclass
class BridgeOptions:
    home: Path
    """The xeno home: the socket is `<home>/.xeno/gateway.sock`."""
    url: str
    """The gateway's WebSocket URL, `ws://` or `wss://` (`?dialect=xeno` is added)."""
    token: Callable[[], str | None] = _no_token
    """The gateway token, asked for at each connection attempt (may raise TokenUnavailableError)."""
    display_url: str = ""
    """The URL as logs and errors show it (no query string, no credentials)."""
    http_url: str | None = None
    """The gateway's HTTP API (`http(s)://HOST`), where attachments are uploaded; None: told from `url` if it can be."""
    keepalive: float = 240.0
    keepalive_timeout: float = 30.0
    open_timeout: float = 10.0
    request_timeout: float = 60.0
    """How long a request may wait for its answer (API Gateway's integrations end after 29 s)."""
    task_timeout: float = 1800.0
    """The same for `gateway.heartbeat` and `gateway.new_session`, answered when their run ends."""
    backoff_base: float = 0.5
    backoff_cap: float = 30.0
    stable_after: float = 30.0
    max_message_bytes: int = MAX_MESSAGE_BYTES
    fragment_bytes: int = FRAGMENT_BYTES


def upstream_url(url: str) -> str:
    """`url` with `dialect=xeno` in its query (replacing any `dialect` given); a ValueError unless ws:// or wss://."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname
    except ValueError:
        host = None
        parts = None
    if parts is None or parts.scheme not in ("ws", "wss") or not host:
        raise ValueError("the gateway URL must be ws://HOST/… or wss://HOST/… (the gateway's WebSocket API)")
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True) if k != "dialect"]
    query.append(("dialect", "xeno"))
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path or "/", urllib.parse.urlencode(query), ""))


def _error(rpc_id: Any, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": ERROR_CODE, "message": message}}


def _notification(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def _encode(message: dict[str, Any]) -> str:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))


def _key(rpc_id: Any) -> str:
    """An id as a dictionary key that keeps its JSON type (1 and "1" are different requests)."""
    return json.dumps(rpc_id)


@dataclass
class _RelayedRequest:
    """A client's request relayed to the gateway, until it is answered."""

    rpc_id: Any
    method: str
    request_id: str | None
    """A `gateway.query`'s `requestId`: once accepted, its run is followed until `gateway.done`."""
    timer: asyncio.TimerHandle | None = None


def _request_of(message: Any) -> _RelayedRequest | None:
    """The request `message` is, if the gateway answers it (xeno answers JSON-RPC 2.0 objects with a string or
    number id, and nothing else)."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return None
    rpc_id = message.get("id")
    if rpc_id is None or isinstance(rpc_id, bool | dict | list):
        return None
    method = message.get("method")
    params = message.get("params")
    request_id = params.get("requestId") if method == "gateway.query" and isinstance(params, dict) else None
    return _RelayedRequest(
        rpc_id, method if isinstance(method, str) else "", request_id if isinstance(request_id, str) else None
    )


async def read_line(reader: asyncio.StreamReader) -> tuple[bytes, bool] | None:
    """The next line without its newline, and whether it was longer than the reader's limit (then its bytes are
    skipped and b"" is returned); None at the end of the stream."""
    too_long = False
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:  # the end: a last line without a newline, or nothing
            if too_long:
                return b"", True
            return (exc.partial, False) if exc.partial else None
        except asyncio.LimitOverrunError as exc:
            too_long = True
            await reader.readexactly(exc.consumed)  # drop what is buffered of the line, then look again
            continue
        return (b"", True) if too_long else (line[:-1], False)


class _Relay:
    """One Unix client and its own WebSocket to the gateway."""

    def __init__(self, bridge: XenoBridge, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        self.bridge = bridge
        self.options = bridge.options
        self.name = f"client {n}"
        self.reader = reader
        self.writer = writer
        self.ws: ClientConnection | None = None
        self.problem = "not connected yet"
        self._logged_problem: str | None = None
        self._write_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._attempted = asyncio.Event()
        """Set when the connection attempt under way (or the next one) has ended, then replaced."""
        self._pending: dict[str, _RelayedRequest] = {}
        self._expired: dict[str, None] = {}
        self._runs: dict[str, int] = {}
        """`requestId` → runs accepted and not done yet."""
        self._keepalives: dict[str, asyncio.Future[None]] = {}
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._gone = False

    # -- the Unix side ----------------------------------------------------------------------------------------
    async def run(self) -> None:
        upstream = asyncio.create_task(self._upstream_loop())
        try:
            while not self._gone:
                read = await read_line(self.reader)
                if read is None:
                    break
                await self._from_client(*read)
        except ConnectionError:
            pass
        finally:
            self._gone = True
            upstream.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await upstream
            for task in list(self._tasks):
                task.cancel()
            for request in self._pending.values():
                if request.timer is not None:
                    request.timer.cancel()
            self._pending.clear()
            with contextlib.suppress(Exception):
                self.writer.close()
            log.debug("%s: gone", self.name)

    async def close(self, why: str) -> None:
        """End this client's connection (the bridge stops): what waits for an answer gets `why` first (unless
        the client does not read it within a moment)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._fail_all(why, why), 2)
        self._gone = True
        with contextlib.suppress(Exception):
            self.writer.close()

    async def _from_client(self, raw: bytes, too_long: bool) -> None:
        if too_long:
            log.warning("%s: a line over %d bytes, not relayed", self.name, MAX_LINE_BYTES)
            await self._to_client(_error(None, TOO_LARGE))
            return
        text = raw.decode("utf-8", "replace").strip()
        if not text:
            return
        try:
            message = json.loads(text)
        except ValueError:
            message = None
        request = _request_of(message)
        size = len(text.encode("utf-8"))
        uploader = self.bridge.uploader
        if request is not None and request.method == "gateway.query" and uploader is not None:
            assert isinstance(message, dict)
            params = message.get("params")
            if isinstance(params, dict) and params.get("attachments"):
                await uploader.rewrite(message)
                text = _encode(message)
                size = len(text.encode("utf-8"))
        if size > self.options.max_message_bytes:
            limit = self.options.max_message_bytes
            log.warning("%s: a message of %d bytes refused (the gateway takes %d)", self.name, size, limit)
            if request is not None:
                await self._to_client(_error(request.rpc_id, TOO_LARGE))
            return
        ws = await self._upstream()
        if ws is None:
            if request is not None:
                message_text = f"Orbital gateway unavailable ({self.problem}); the bridge keeps retrying: try again."
                await self._to_client(_error(request.rpc_id, message_text))
            else:
                log.debug("%s: the gateway is unavailable; a line that needs no answer dropped", self.name)
            return
        key = None
        if request is not None:
            key = _key(request.rpc_id)
            self._track(key, request)
        try:
            await ws.send(fragments(text, self.options.fragment_bytes))
        except ConnectionClosed:
            if key is not None and (lost := self._untrack(key)) is not None:
                why = f"Connection to the Orbital gateway {_closed(ws)} while sending; the bridge is reconnecting."
                await self._to_client(_error(lost.rpc_id, why))

    async def _to_client(self, message: dict[str, Any]) -> None:
        await self._write_line(_encode(message))

    async def _write_line(self, text: str) -> None:
        if self._gone and self.writer.is_closing():
            return
        async with self._write_lock:
            try:
                self.writer.write(text.encode("utf-8") + b"\n")
                await self.writer.drain()
            except (ConnectionError, RuntimeError):
                self._gone = True

    # -- requests in flight -----------------------------------------------------------------------------------
    def _track(self, key: str, request: _RelayedRequest) -> None:
        self._untrack(key)  # a client reusing the id of a request still in flight: the newer one is followed
        timeout = self.options.task_timeout if request.method in TASK_METHODS else self.options.request_timeout
        if timeout > 0:
            request.timer = asyncio.get_running_loop().call_later(timeout, self._expire, key, timeout)
        self._pending[key] = request

    def _untrack(self, key: str) -> _RelayedRequest | None:
        request = self._pending.pop(key, None)
        if request is not None and request.timer is not None:
            request.timer.cancel()
        return request

    def _expire(self, key: str, timeout: float) -> None:
        request = self._untrack(key)
        if request is None:
            return
        self._expired[key] = None  # its late answer is dropped
        while len(self._expired) > _EXPIRED_KEPT:
            del self._expired[next(iter(self._expired))]
        log.warning("%s: no answer to %s in %g s", self.name, request.method or "a request", timeout)
        why = f"The Orbital gateway did not answer {request.method or 'the request'} within {timeout:g} s."
        self._spawn(self._to_client(_error(request.rpc_id, why)))

    async def _fail_all(self, request_error: str, run_error: str) -> None:
        """Answer every request still waiting with `request_error`, and end every accepted run with `run_error`."""
        pending, self._pending = self._pending, {}
        runs, self._runs = self._runs, {}
        for request in pending.values():
            if request.timer is not None:
                request.timer.cancel()
            await self._to_client(_error(request.rpc_id, request_error))
        for request_id, count in runs.items():
            for _ in range(count):
                await self._to_client(_notification("gateway.error", {"requestId": request_id, "error": run_error}))
                await self._to_client(_notification("gateway.done", {"requestId": request_id}))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- the gateway side -------------------------------------------------------------------------------------
    async def _upstream(self) -> ClientConnection | None:
        """The connection to relay a request on: the open one, or the result of an attempt made now."""
        if self.ws is not None:
            return self.ws
        attempt = self._attempted
        self._wake.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(attempt.wait(), self.options.open_timeout + 5)
        return self.ws

    async def _upstream_loop(self) -> None:
        backoff = Backoff(self.options.backoff_base, self.options.backoff_cap, self.options.stable_after)
        await keep_connected(
            self._one_connection, backoff, self._wake, running=lambda: not self._gone, waiting=self._log_wait
        )

    async def _one_connection(self) -> Ended | None:
        """One connection to the gateway, relayed until it ends (the requests it leaves unanswered answered with an
        error); None when the bridge is gone."""
        ws = await self._connect()
        if ws is None:
            return Ended()
        established = time.monotonic()
        reason = await self._serve(ws)
        if self._gone:
            return None
        self._set_problem(f"the connection {reason}")
        await self._fail_all(
            f"Connection to the Orbital gateway lost before it answered ({reason}); the request may or may "
            "not have been carried out. The bridge is reconnecting.",
            f"Connection to the Orbital gateway lost before the reply arrived ({reason}); the reply, if "
            "there is one, will be in the session's history (gateway.initialize).",
        )
        return Ended(established, reason)

    def _log_wait(self, ended: Ended, delay: float) -> None:
        log.debug("%s: next connection attempt in %.1f s", self.name, delay)

    async def _connect(self) -> ClientConnection | None:
        """One connection attempt; those waiting for it are told when it has ended."""
        self._wake.clear()
        try:
            ws = await self._open()
            if ws is not None:
                self.ws = ws
                self.problem = ""
                self._logged_problem = None
                log.info("%s: connected to %s", self.name, self.options.display_url or "the gateway")
            return ws
        finally:
            ended, self._attempted = self._attempted, asyncio.Event()
            ended.set()

    async def _open(self) -> ClientConnection | None:
        display = self.options.display_url or "the gateway"
        try:
            token = self.options.token()
        except Exception as exc:
            self._set_problem(str(exc) or type(exc).__name__)
            return None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            return await connect(
                self.bridge.url,
                additional_headers=headers,
                open_timeout=self.options.open_timeout,
                max_size=None,
                ping_interval=None,
                close_timeout=2,
                compression=None,
                user_agent_header=f"orbital-xeno-bridge/{__version__}",
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            if status == 401 and token:
                problem = "the gateway refused the token (HTTP 401 Unauthorized): check --token-file or ORBITAL_TOKEN"
            elif status == 401:
                problem = (
                    "the gateway needs a token (HTTP 401 Unauthorized): give it with --token-file or ORBITAL_TOKEN"
                )
            elif status == 403:  # API Gateway's answer to a wrong stage or path too
                problem = "the gateway refused the connection (HTTP 403 Forbidden): check the URL and the token"
            else:
                problem = f"the gateway refused the connection (HTTP {status})"
            self._set_problem(problem)
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
            self._set_problem(f"cannot connect to {display}: {exc or 'timed out'}")
        except Exception as exc:  # never let one attempt end the relay
            log.exception("%s: connecting failed unexpectedly", self.name)
            self._set_problem(f"cannot connect to {display}: {type(exc).__name__}")
        return None

    def _set_problem(self, problem: str) -> None:
        self.problem = problem
        if problem != self._logged_problem and not self._gone:
            self._logged_problem = problem
            log.warning("%s: %s; retrying with backoff", self.name, problem)

    async def _serve(self, ws: ClientConnection) -> str:
        """Relay the gateway's frames to the client until the connection ends; why it ended."""
        keepalive = asyncio.create_task(self._keepalive(ws)) if self.options.keepalive > 0 else None
        try:
            async for message in ws:
                if isinstance(message, str):
                    await self._from_gateway(message)
        except ConnectionClosed:
            pass
        finally:
            self.ws = None
            if keepalive is not None:
                keepalive.cancel()
            with contextlib.suppress(Exception):
                await ws.close()
        return _closed(ws)

    async def _from_gateway(self, text: str) -> None:
        try:
            message = json.loads(text)
        except ValueError:
            message = None
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            # API Gateway's own `{"message": "Internal server error", ...}`: the request's timeout answers it
            log.warning("%s: not relayed, not JSON-RPC 2.0 from the gateway: %.200s", self.name, text)
            return
        if "method" not in message:
            key = _key(message.get("id"))
            answered = self._keepalives.get(key)
            if answered is not None:
                if not answered.done():
                    answered.set_result(None)
                return
            request = self._untrack(key)
            if request is None and key in self._expired:
                del self._expired[key]
                log.info("%s: a late answer to a request already answered with a timeout, dropped", self.name)
                return
            result = message.get("result")
            accepted = isinstance(result, dict) and result.get("accepted") is True
            if request is not None and request.request_id is not None and accepted:
                self._runs[request.request_id] = self._runs.get(request.request_id, 0) + 1
        elif message.get("method") == "gateway.done":
            params = message.get("params")
            request_id = params.get("requestId") if isinstance(params, dict) else None
            if isinstance(request_id, str) and request_id in self._runs:
                self._runs[request_id] -= 1
                if self._runs[request_id] <= 0:
                    del self._runs[request_id]
        await self._write_line(text if "\n" not in text else _encode(message))

    async def _keepalive(self, ws: ClientConnection) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.options.keepalive)
            rpc_id = f"orbital-xeno-bridge-keepalive-{next(self._ids)}"
            key = _key(rpc_id)
            answered: asyncio.Future[None] = loop.create_future()
            self._keepalives[key] = answered
            try:
                await ws.send(_encode({"jsonrpc": "2.0", "id": rpc_id, "method": KEEPALIVE_METHOD}))
                await asyncio.wait_for(answered, self.options.keepalive_timeout)
                log.debug("%s: keepalive answered", self.name)
            except ConnectionClosed:
                return
            except TimeoutError:
                log.warning(
                    "%s: no answer to the keepalive in %g s; reconnecting", self.name, self.options.keepalive_timeout
                )
                self._spawn(ws.close(1001, "keepalive failed"))
                return
            finally:
                self._keepalives.pop(key, None)


def _closed(ws: ClientConnection) -> str:
    code, reason = ws.close_code, ws.close_reason or ""
    if code is None:
        return "closed without a close frame"
    text = f"closed ({code}{' ' + reason if reason else ''})"
    if code == 4001:
        text += ": the gateway needs the right token (--token-file or ORBITAL_TOKEN)"
    return text


class XenoBridge:
    """Serve xeno's Unix socket at `<home>/.xeno/gateway.sock`, a `_Relay` to the gateway per client."""

    def __init__(self, options: BridgeOptions) -> None:
        self.options = options
        self.path = socket_path(options.home)
        self.url = upstream_url(options.url)
        base = http_base(options.url, options.http_url)
        self.uploader = Uploader(base, options.token) if base else None
        if base is None:
            log.info("attachments are relayed as paths: give the gateway's HTTP API URL to upload them")
        self._server: asyncio.base_events.Server | None = None
        self._relays: dict[_Relay, asyncio.Task[Any]] = {}
        self._numbers = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stop_requested = False

    async def start(self) -> None:
        """Serve the socket (XenoSocketInUseError when another process serves it)."""
        bound = listener(self.path)
        self._server = await asyncio.start_unix_server(self._client, sock=bound, limit=MAX_LINE_BYTES)
        log.info("serving %s for %s", self.path, self.options.display_url or "the gateway")

    async def run(self) -> None:
        """Serve until `request_stop`, then stop (the socket removed)."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self._stop_requested:
            self._stop.set()
        try:
            await self.start()
            await self._stop.wait()
        finally:
            await self.stop()

    def request_stop(self) -> None:
        """Ask `run` to finish (safe from signal handlers and other threads)."""
        self._stop_requested = True
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for relay in list(self._relays):
            await relay.close("The xeno bridge is stopping.")
        tasks = list(self._relays.values())
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=5)
            for task in late:
                task.cancel()
        if self.uploader is not None:
            await self.uploader.close()
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5)
            remove(self.path)
            log.info("stopped; %s removed", self.path)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not same_user(writer.get_extra_info("socket")):  # it reads and uploads the files its clients name
            log.warning("closed a connection from another user")
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            return
        relay = _Relay(self, reader, writer, next(self._numbers))
        task = asyncio.current_task()
        assert task is not None
        self._relays[relay] = task
        log.debug("%s: connected to the socket", relay.name)
        try:
            await relay.run()
        except Exception:
            log.exception("%s: relay failed", relay.name)
        finally:
            self._relays.pop(relay, None)
