"""The node agent: one WebSocket to the gateway in node mode, serving tools, logs, probes and transfers.

Reconnects with exponential backoff and full jitter, re-sending `connect` (which re-registers the tools) each time.
Results that cannot be delivered while the socket is down wait in a bounded outbox and go out after reconnecting.

Nothing is sent that the gateway would refuse: a message stays within the limit the gateway advertises in `hello-ok`
(`features.limits.maxMessageBytes`; API Gateway's 128 KB for a gateway that does not say), sent in fragments of at
most its frame limit. A tool result over it is saved whole in the agent workspace and answered with a preview and a
pointer (`orbital.domain.tool_results`); anything else that still would not fit is dropped with a log line, never
sent (the gateway would close the socket, and the message would be sent again after every reconnect).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import logging
import os
import struct
import tempfile
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from orbital import __version__
from orbital.domain.tool_results import FullOutput, Saved, fit_logs_result, fit_tool_result, full_output, too_large
from orbital.domain.workspace_paths import tool_result_path
from orbital.node.errors import ConnectionLostError, FatalConnectError, HandshakeFailedError, MessageTooLargeError
from orbital.node.logs import clamp_lines, tail_lines
from orbital.node.mcp import McpCallError, McpHost
from orbital.node.options import NodeOptions
from orbital.node.probe import probe_bins
from orbital.node.process import ProcessManager
from orbital.node.runtime import host_os, node_runtime
from orbital.node.tools import TOOL_NAMES, NodeToolError, NodeTools
from orbital.node.transfer import BINARY_CHUNK_SIZE, CHUNK_SIZE, TransferManager
from orbital.protocol.frames import FRAGMENT_BYTES, fragments
from orbital.protocol.local_token import redact_url
from orbital.protocol.reconnect import Backoff, Ended, keep_connected

log = logging.getLogger("orbital.node")

FATAL_CODES = frozenset({401, 403, 103})
"""`connect`'s answers a retry cannot change: a wrong token, a device token of another role or bound to another node id
(403), an invalid registration."""
CLOSE_UNAUTHORIZED = 4001
EXEC_EVENT_MAX_ATTEMPTS = 60
REANNOUNCE_INTERVAL_S = 5.0
"""The least time between two reconnects that announce a changed tool list of the node's MCP servers."""


@dataclass
class OutboxItem:
    method: str
    params: dict[str, Any]
    retry_server_errors: bool = False
    attempts: int = 0


class NodeAgent:
    def __init__(self, options: NodeOptions) -> None:
        self.options = options
        self.workspace = options.workspace
        self.processes = ProcessManager(self.workspace, on_event=self._exec_event_from_thread)
        self.tools = NodeTools(self.workspace, self.processes)
        self.transfers = TransferManager(self, self.workspace)
        self.outbox: deque[OutboxItem] = deque()
        self.connections = 0
        self.online = False
        self.gateway_limits: dict[str, int] = {}
        """`hello-ok.features.limits` of the current (or last) connection: maxMessageBytes, maxFrameBytes."""
        self._closing: tuple[int | None, str] | None = None
        """The gateway's `connection.closing` notice on the current socket (AWS closes carry no reason)."""
        self.replaced_by_another = False
        self.forgotten = False
        """The gateway's owner removed this node (`node.forget` with `force`): it stops rather than come back."""
        self._ws: ClientConnection | None = None
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._wake: asyncio.Event | None = None
        self._stop_requested = False
        # exec events wait until the tool.result of the call that started them is out (the gateway maps
        # sessionId -> session from that result; an event arriving first would be dropped)
        self._calls_in_flight: set[str] = set()
        self._held_events: dict[str, list[dict[str, Any]]] = {}
        self.mcp = McpHost(
            options.mcp_servers,
            node_id=options.node_id,
            workspace=self.workspace,
            on_tools_changed=self._mcp_tools_changed,
            backoff_base=options.mcp_backoff_base,
        )
        self._announced_mcp: list[dict[str, Any]] = []
        """The MCP tools sent in the last `connect`."""
        self._reannounce: asyncio.Task[None] | None = None
        self._reconnect_now = False
        self._last_reannounce = float("-inf")

    # -- public -----------------------------------------------------------------------------------------------
    def connect_params(self) -> dict[str, Any]:
        mcp_tools = self.mcp.definitions()
        self._announced_mcp = mcp_tools
        params: dict[str, Any] = {
            "minProtocol": 1,
            "maxProtocol": 1,
            "client": {"id": self.options.node_id, "version": __version__, "platform": host_os(), "mode": "node"},
            "tools": self.tools.definitions() + mcp_tools,
            "nodeRuntime": node_runtime(TOOL_NAMES, mcp_tool_names=[tool["name"] for tool in mcp_tools]),
        }
        if self.options.token:
            params["auth"] = {"token": self.options.token}
        return params

    def request_stop(self) -> None:
        """Ask `run` to finish (safe from signal handlers and other threads)."""
        self._stop_requested = True
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)

    async def run(self) -> int:
        """Serve until stopped (0), refused for good (2), or replaced by a newer connection of its id or removed
        from the gateway's registry (3)."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        if self._stop_requested:
            self._stop.set()
        flusher = asyncio.create_task(self._flush_loop())
        backoff = Backoff(self.options.backoff_base, self.options.backoff_cap, self.options.stable_after)
        try:
            await self._start_mcp()
            stopped = self._stop
            outcome = await keep_connected(
                self._one_connection, backoff, stopped, running=lambda: not stopped.is_set(), waiting=_log_wait
            )
            return outcome or 0
        finally:
            flusher.cancel()
            for task in list(self._tasks):
                task.cancel()
            if self._reannounce is not None:
                self._reannounce.cancel()
            await self.mcp.stop()
            self.processes.shutdown()
            self.transfers.abort_all()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            log.info("node stopped", extra={"console": True})

    async def _one_connection(self) -> Ended | int:
        """One connection, served until it ends; an exit code when the node must stop: 0 stopped while connecting,
        2 refused for good, 3 replaced by a newer connection of its id or removed from the gateway's registry."""
        established_at: float | None = None
        problem = ""
        try:
            outcome = await self._connection_or_stop()
            if outcome is None:
                return 0
            established_at, problem = outcome
            if self.replaced_by_another:
                log.error(
                    "%s: a newer connection took node id %s (another `orbital node` with this id?) - stopping "
                    "rather than taking it back",
                    problem,
                    self.options.node_id,
                    extra={"console": True},
                )
                return 3
            if self.forgotten:
                log.error(
                    "%s: the gateway's owner removed node %s from its registry - stopping",
                    problem,
                    self.options.node_id,
                    extra={"console": True},
                )
                return 3
        except FatalConnectError as exc:
            log.error(
                "the gateway refused this node (%s): %s - not retrying",
                exc.code,
                exc.message,
                extra={"fields": {"code": exc.code}},
            )
            return 2
        except (OSError, TimeoutError, InvalidHandshake, HandshakeFailedError, ConnectionClosed) as exc:
            problem = f"cannot connect to {redact_url(self.options.url)}: {exc or type(exc).__name__}"
        except Exception as exc:  # never let one bad connection end the node
            log.exception("connection failed unexpectedly")
            problem = f"connection failed: {type(exc).__name__}: {exc}"
        at_once = self._reconnect_now and not (self._stop is not None and self._stop.is_set())
        if at_once:  # closed by this node to announce a changed tool list
            self._reconnect_now = False
            log.info("reconnecting to announce the changed tool list", extra={"console": True})
        return Ended(established_at, problem, at_once=at_once)

    # -- MCP servers ------------------------------------------------------------------------------------------
    async def _start_mcp(self) -> None:
        """Start the MCP servers and wait for their tools (or a stop request) before the first `connect`."""
        assert self._stop is not None
        if not self.mcp.servers:
            return
        starting = asyncio.create_task(self.mcp.start())
        stopped = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({starting, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if not starting.done():
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting

    def _mcp_tools_changed(self) -> None:
        """A server's tool list changed: announce it (a new `connect`) once no tool call is in flight."""
        if self._reannounce is None or self._reannounce.done():
            self._reannounce = asyncio.create_task(self._reannounce_when_idle())

    async def _reannounce_when_idle(self) -> None:
        wait = self._last_reannounce + REANNOUNCE_INTERVAL_S - time.monotonic()
        if wait > 0:  # a server that keeps changing its list does not keep the node reconnecting
            await asyncio.sleep(wait)
        while self._calls_in_flight:  # a reconnect would fail them (the gateway ends a leaving node's calls)
            await asyncio.sleep(0.1)
        ws = self._ws
        if ws is None or not self.online or self.mcp.definitions() == self._announced_mcp:
            return  # the next connect announces whatever is current
        self._reconnect_now = True
        self._last_reannounce = time.monotonic()
        with contextlib.suppress(Exception):
            await ws.close(1000, "tool list changed")

    # -- connection -------------------------------------------------------------------------------------------
    async def _connection_or_stop(self) -> tuple[float | None, str] | None:
        """Run one connection; a stop request also interrupts connecting and the handshake (then None)."""
        assert self._stop is not None
        conn = asyncio.create_task(self._run_connection())
        stopped = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({conn, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if not conn.done() and self.online:
            # an established connection closes itself politely on stop: give it a moment, then cut it off
            await asyncio.wait({conn}, timeout=3)
        if not conn.done():
            conn.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await conn
            return None
        if self._stop.is_set() and conn.exception() is not None:
            return None
        return conn.result()

    async def _run_connection(self) -> tuple[float | None, str]:
        """One connection: handshake, serve until it closes. Returns when it was established and why it ended."""
        assert self._stop is not None
        self._closing = None
        url = self.options.url
        log.debug("connecting to %s", redact_url(url))
        try:
            ws = await connect(
                url,
                open_timeout=self.options.handshake_timeout,
                max_size=None,
                ping_interval=None,
                close_timeout=2,
                compression=None,
                user_agent_header=f"orbital-node/{__version__}",
            )
        except InvalidStatus as exc:
            if exc.response.status_code == 401:
                raise FatalConnectError(401, "the gateway rejected the WebSocket upgrade (HTTP 401)") from None
            raise
        except InvalidURI as exc:
            raise FatalConnectError(0, f"invalid gateway URL: {exc}") from None
        self._ws = ws
        reader = asyncio.create_task(self._reader(ws))
        stopper = asyncio.create_task(self._stop.wait())
        keepalive: asyncio.Task[None] | None = None
        established_at: float | None = None
        problem = ""
        try:
            hello = await self._handshake()
            self.gateway_limits = _limits(hello)
            established_at = time.monotonic()
            self.connections += 1
            self.online = True
            server = hello.get("server") if isinstance(hello.get("server"), dict) else {}
            log.info(
                "connected to %s as %s",
                redact_url(url),
                self.options.node_id,
                extra={"console": True, "fields": {"connectionId": (server or {}).get("connectionId")}},
            )
            if self._wake is not None:
                self._wake.set()
            if self.options.keepalive > 0:
                keepalive = asyncio.create_task(self._keepalive(ws))
            await asyncio.wait({reader, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if reader.done() and not self._stop.is_set():
                code, why = ws.close_code, ws.close_reason or ""
                if self._closing is not None and not why:  # the reason came ahead of a close without one
                    code, why = self._closing
                reason = f"{code} {why}".strip() if code or why else "no close frame"
                problem = f"connection closed ({reason})"
                if "Replaced" in why:
                    self.replaced_by_another = True
                elif "Forgotten" in why:
                    self.forgotten = True
        finally:
            self.online = False
            self._ws = None
            for task in (keepalive, stopper):
                if task is not None:
                    task.cancel()
            with contextlib.suppress(Exception):
                await ws.close()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            self._fail_pending(ws)
            self.transfers.abort_all()
        return established_at, problem

    async def _handshake(self) -> dict[str, Any]:
        self.gateway_limits = {}  # until this gateway says otherwise
        try:
            response = await self._call("connect", self.connect_params(), timeout=self.options.handshake_timeout)
        except ConnectionLostError as exc:
            if exc.code == CLOSE_UNAUTHORIZED:
                raise FatalConnectError(401, exc.reason or "Unauthorized") from None
            raise HandshakeFailedError(str(exc)) from None
        except MessageTooLargeError as exc:
            raise FatalConnectError(0, f"the connect request is too large to send: {exc}") from None
        if not response.get("ok"):
            error = response.get("error") if isinstance(response.get("error"), dict) else {}
            code = int((error or {}).get("code") or 0)
            message = str((error or {}).get("message") or "connect failed")
            if code in FATAL_CODES:
                raise FatalConnectError(code, message)
            raise HandshakeFailedError(f"Handshake failed: {message} ({code})")
        payload = response.get("payload")
        return payload if isinstance(payload, dict) else {}

    async def _reader(self, ws: ClientConnection) -> None:
        try:
            async for message in ws:
                if isinstance(message, bytes):
                    self.transfers.on_binary(message)
                    continue
                try:
                    frame = json.loads(message)
                except ValueError:
                    log.debug("ignoring a frame that is not JSON")
                    continue
                if isinstance(frame, dict):
                    self._on_frame(frame)
        except ConnectionClosed:
            pass
        finally:
            self._fail_pending(ws)

    def _fail_pending(self, ws: ClientConnection) -> None:
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(ConnectionLostError(ws.close_code, ws.close_reason or ""))
                future.exception()

    def _on_frame(self, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "res":
            future = self._pending.pop(str(frame.get("id")), None)
            if future is not None and not future.done():
                future.set_result(frame)
        elif kind == "evt":
            payload = frame.get("payload")
            self._on_event(str(frame.get("event")), payload if isinstance(payload, dict) else {})
        elif kind == "bin":
            self.transfers.on_text_chunk(frame)

    def _on_event(self, event: str, payload: dict[str, Any]) -> None:
        log.debug("event %s", event)
        if event == "connection.closing":
            code = payload.get("code")
            self._closing = (code if isinstance(code, int) else None, str(payload.get("reason") or ""))
        elif event == "tool.invoke":
            self._spawn(self._handle_tool_invoke(payload))
        elif event == "logs.get":
            self._spawn(self._handle_logs_get(payload))
        elif event == "node.probe":
            self._spawn(self._handle_probe(payload))
        elif event == "transfer.send":
            self._spawn(self.transfers.on_send(payload))
        elif event == "transfer.receive":
            self._spawn(self.transfers.on_receive(payload))
        elif event == "transfer.start":
            self.transfers.on_start(payload)
        elif event == "transfer.end":
            self._spawn(self.transfers.on_end(payload))
        elif event == "transfer.abort":
            self.transfers.on_abort(payload)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("event handler failed", exc_info=task.exception())

    async def _keepalive(self, ws: ClientConnection) -> None:
        while True:
            await asyncio.sleep(self.options.keepalive)
            try:
                await self._call("tools.list", None, timeout=self.options.keepalive_timeout)
            except (ConnectionLostError, TimeoutError) as exc:
                log.warning("keepalive failed (%s); reconnecting", exc or "timeout")
                with contextlib.suppress(Exception):
                    await ws.close(1001, "keepalive failed")
                return

    # -- sending ----------------------------------------------------------------------------------------------
    def message_limit(self) -> int | None:
        """The most one message to the gateway may hold, in bytes (None: no limit)."""
        return self.options.message_limit(self.gateway_limits.get("maxMessageBytes"))

    async def _send_text(self, ws: ClientConnection, text: str) -> None:
        # API Gateway refuses frames over 32 KB: a longer message goes in fragments
        await ws.send(fragments(text, min(FRAGMENT_BYTES, self.gateway_limits.get("maxFrameBytes", FRAGMENT_BYTES))))

    async def _call(self, method: str, params: Any, *, timeout: float | None = None) -> dict[str, Any]:
        """Send a request on the current socket and wait for its response frame (ok or not). A request over the
        gateway's message limit raises MessageTooLarge instead of going out."""
        ws = self._ws
        if ws is None:
            raise ConnectionLostError()
        frame_id = f"{self.options.node_id}-{next(self._ids)}"
        frame: dict[str, Any] = {"type": "req", "id": frame_id, "method": method}
        if params is not None:
            frame["params"] = params
        text = json.dumps(frame)  # every non-ASCII character escaped: its length is its size in bytes
        limit = self.message_limit()
        if limit is not None and len(text) > limit:
            raise MessageTooLargeError(method, len(text), limit)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[frame_id] = future
        try:
            await self._send_text(ws, text)
            return await asyncio.wait_for(future, timeout or self.options.request_timeout)
        except ConnectionClosed as exc:
            raise ConnectionLostError(ws.close_code, ws.close_reason or "") from exc
        finally:
            self._pending.pop(frame_id, None)

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """TransferLink: a request that is not kept for later (the gateway fails transfers on disconnect)."""
        return await self._call(method, params)

    def chunk_size(self) -> int:
        if self.options.use_binary_frames():
            return BINARY_CHUNK_SIZE
        limit = self.message_limit()  # a `bin` text frame carries base64 (4 bytes for 3) in a small envelope
        return CHUNK_SIZE if limit is None else max(1024, min(CHUNK_SIZE, (limit - 1024) * 3 // 4))

    async def send_chunk(self, transfer_id: int, offset: int, data: bytes) -> None:
        ws = self._ws
        if ws is None:
            raise ConnectionLostError()
        try:
            if self.options.use_binary_frames():
                await ws.send(struct.pack("<I", transfer_id) + data)
            else:
                frame = {
                    "type": "bin",
                    "transferId": transfer_id,
                    "offset": offset,
                    "data": _b64(data),
                }
                await self._send_text(ws, json.dumps(frame))
        except ConnectionClosed as exc:
            raise ConnectionLostError(ws.close_code, ws.close_reason or "") from exc

    def run_blocking(self, fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
        """Run a blocking function in a daemon thread (a stuck tool never blocks shutdown)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if future.done():
                return
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

        def worker() -> None:
            try:
                value = fn(*args)
            except BaseException as exc:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(settle, False, exc)
            else:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(settle, True, value)

        threading.Thread(target=worker, name="orbital-node-work", daemon=True).start()
        return future

    async def deliver(self, method: str, params: dict[str, Any], *, retry_server_errors: bool = False) -> None:
        """Send a result now, or keep it in the outbox until the gateway is reachable again."""
        item = OutboxItem(method, params, retry_server_errors)
        if self.online and not self.outbox:
            try:
                response = await self._call(method, params)
            except (ConnectionLostError, TimeoutError):
                self._enqueue(item)
                return
            except MessageTooLargeError as exc:
                self._drop_unsendable(item, exc)
                return
            if not self._accepted(item, response):
                self._enqueue(item)
            return
        self._enqueue(item)

    def _accepted(self, item: OutboxItem, response: dict[str, Any]) -> bool:
        """True when the item is done with (delivered, or refused for good)."""
        if response.get("ok"):
            return True
        error = response.get("error") if isinstance(response.get("error"), dict) else {}
        code = int((error or {}).get("code") or 0)
        message = (error or {}).get("message")
        item.attempts += 1
        if item.retry_server_errors and code >= 500 and item.attempts < EXEC_EVENT_MAX_ATTEMPTS:
            return False
        log.warning("gateway refused %s: %s %s", item.method, code, message)
        return True

    @staticmethod
    def _drop_unsendable(item: OutboxItem, exc: MessageTooLargeError) -> None:
        call_id = item.params.get("callId")
        log.error(
            "dropping %s%s: %s; it can never be sent",
            item.method,
            f" for call {call_id}" if call_id else "",
            exc,
            extra={"fields": {"callId": call_id, "bytes": exc.size, "limit": exc.limit}},
        )

    def _enqueue(self, item: OutboxItem) -> None:
        if len(self.outbox) >= self.options.outbox_size:
            dropped = self.outbox.popleft()
            log.warning("outbox full; dropping an undelivered %s", dropped.method)
        self.outbox.append(item)
        if self.online and self._wake is not None:
            self._wake.set()
        log.debug("queued %s for delivery after reconnect (%d waiting)", item.method, len(self.outbox))

    async def _flush_loop(self) -> None:
        assert self._wake is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.options.flush_interval)
            self._wake.clear()
            while self.outbox and self.online:
                item = self.outbox[0]
                try:
                    response = await self._call(item.method, item.params)
                except (ConnectionLostError, TimeoutError):
                    break
                except MessageTooLargeError as exc:
                    self._drop_unsendable(item, exc)
                    response = {"ok": True}  # done with: off the outbox, never sent again
                if not self._accepted(item, response):
                    break  # retried on the next tick
                if self.outbox and self.outbox[0] is item:
                    self.outbox.popleft()
                else:
                    with contextlib.suppress(ValueError):
                        self.outbox.remove(item)

    def _exec_event_from_thread(self, event: dict[str, Any]) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return

        def schedule() -> None:
            call_id = event.get("callId")
            if isinstance(call_id, str) and call_id in self._calls_in_flight:
                self._held_events.setdefault(call_id, []).append(event)
            else:
                self._spawn(self.deliver("node.exec.event", event, retry_server_errors=True))

        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(schedule)

    # -- handlers ---------------------------------------------------------------------------------------------
    async def _handle_tool_invoke(self, payload: dict[str, Any]) -> None:
        call_id = payload.get("callId")
        if not isinstance(call_id, str) or not call_id:
            return
        tool = payload.get("tool")
        started = time.monotonic()
        self._calls_in_flight.add(call_id)
        try:
            await self._run_tool(call_id, tool, payload.get("args"), started)
        finally:
            self._calls_in_flight.discard(call_id)
            for event in self._held_events.pop(call_id, []):
                await self.deliver("node.exec.event", event, retry_server_errors=True)

    async def _run_tool(self, call_id: str, tool: Any, args: Any, started: float) -> None:
        params: dict[str, Any]
        try:
            if self.mcp.owns(tool):
                result = await self.mcp.call(tool, args)
            else:
                result = await self.run_blocking(self.tools.execute, tool, args, call_id)
            params = {"callId": call_id, "result": result}
        except (NodeToolError, McpCallError) as exc:
            params = {"callId": call_id, "error": str(exc)}
        except Exception as exc:
            log.exception("tool %s crashed", tool)
            params = {"callId": call_id, "error": f"{type(exc).__name__}: {exc}"}
        log.info(
            "tool %s %s in %d ms",
            tool,
            "failed" if "error" in params else "done",
            (time.monotonic() - started) * 1000,
            extra={"fields": {"callId": call_id, "tool": tool}},
        )
        limit = self._params_limit()
        if limit is not None and await self.run_blocking(too_large, params, limit):
            params = await self._fit_oversized(call_id, tool, params, limit)
        await self.deliver("tool.result", params)

    def _params_limit(self) -> int | None:
        """What `params` of a request may take (the message limit, less what a longer node id adds to the frame)."""
        limit = self.message_limit()
        return None if limit is None else limit - len(json.dumps(self.options.node_id))

    async def _fit_oversized(self, call_id: str, tool: Any, params: dict[str, Any], limit: int) -> dict[str, Any]:
        """A result too large for one message: saved whole in the agent workspace (a result, not an error), then
        cut to a preview that points there, or says why it could not be saved."""
        saved: Saved | None = None
        if "result" in params:
            output = await self.run_blocking(full_output, params["result"])
            saved = await self._save(call_id, output)
            if saved.path is not None:
                log.info(
                    "tool result of %d bytes saved at %s",
                    output.size,
                    saved.path,
                    extra={"fields": {"callId": call_id, "tool": tool}},
                )
            else:
                log.warning(
                    "tool result of %d bytes could not be saved: %s",
                    output.size,
                    saved.error,
                    extra={"fields": {"callId": call_id, "tool": tool}},
                )
        fitted: dict[str, Any] = await self.run_blocking(fit_tool_result, params, limit, saved, tool)
        return fitted

    async def _save(self, call_id: str, output: FullOutput) -> Saved:
        """Send `output` to `gsv:tool-results/{callId}.{ext}` with a transfer from a temporary file of this node (the
        gateway allows a node that one transfer.request: for a call it is answering)."""
        destination = f"gsv:{tool_result_path(call_id, output.extension)}"
        try:
            path: Path = await self.run_blocking(_temporary_file, output.data, output.extension)
        except OSError as exc:
            return Saved(output, error=f"could not write a temporary file: {exc.strerror or exc}")
        request = {"source": f"{self.options.node_id}:{path}", "destination": destination, "callId": call_id}
        try:
            response = await self._call("transfer.request", request, timeout=self.options.save_timeout)
        except ConnectionLostError:
            return Saved(output, error="the connection to the gateway was lost")
        except TimeoutError:
            return Saved(output, error="the gateway did not confirm it in time")
        except MessageTooLargeError as exc:  # only a gateway with a tiny limit
            return Saved(output, error=str(exc))
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
        if not response.get("ok"):
            error = response.get("error") if isinstance(response.get("error"), dict) else {}
            return Saved(output, error=f"{(error or {}).get('code')} {(error or {}).get('message')}")
        payload = response.get("payload") if isinstance(response.get("payload"), dict) else {}
        where = (payload or {}).get("destination")
        return Saved(output, path=where if isinstance(where, str) and where else destination)

    async def _handle_logs_get(self, payload: dict[str, Any]) -> None:
        call_id = payload.get("callId")
        if not isinstance(call_id, str) or not call_id:
            return
        count = clamp_lines(payload.get("lines"))
        path = self.options.log_file
        try:
            lines, truncated = await self.run_blocking(tail_lines, path, count)
        except OSError as exc:
            await self.deliver(
                "logs.result", {"callId": call_id, "error": f"Failed to open '{path}': {exc.strerror or exc}"}
            )
            return
        params = fit_logs_result({"callId": call_id, "lines": lines, "truncated": truncated}, self._params_limit())
        await self.deliver("logs.result", params)

    async def _handle_probe(self, payload: dict[str, Any]) -> None:
        probe_id = payload.get("probeId")
        if not isinstance(probe_id, str) or not probe_id:
            return
        kind = payload.get("kind")
        if kind != "bins":
            await self.deliver(
                "node.probe.result", {"probeId": probe_id, "ok": False, "error": f"Unsupported probe kind: {kind}"}
            )
            return
        bins = await self.run_blocking(probe_bins, payload.get("bins"), payload.get("timeoutMs"))
        await self.deliver("node.probe.result", {"probeId": probe_id, "ok": True, "bins": bins})


def _log_wait(ended: Ended, delay: float) -> None:
    log.warning("%s; reconnecting in %.1f s", ended.problem or "disconnected", delay)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _limits(hello: dict[str, Any]) -> dict[str, int]:
    """The limits a gateway advertises in `hello-ok` (positive whole numbers only)."""
    features = hello.get("features")
    given = features.get("limits") if isinstance(features, dict) else None
    if not isinstance(given, dict):
        return {}
    return {
        name: value
        for name, value in given.items()
        if name in ("maxMessageBytes", "maxFrameBytes") and type(value) is int and value > 0
    }


def _temporary_file(data: bytes, extension: str) -> Path:
    """A private temporary file holding `data` (the caller removes it)."""
    fd, name = tempfile.mkstemp(prefix="orbital-result-", suffix=f".{extension}")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    except OSError:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)
