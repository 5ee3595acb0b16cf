"""Real MCP servers for tests, built with the official SDK and served by uvicorn on free loopback ports in a thread.

    with mcp_server() as server:               # streamable HTTP at server.url (…/mcp)
        ...
    with mcp_server(transport="sse") as server:   # HTTP+SSE at server.url (…/sse)
        ...
    with mcp_servers() as (http, sse):          # both

Tools (every server has them):

- `echo {text}`: the text back (`echo: {text}`);
- `picture {}`: a 1x1 PNG image (`PNG_BASE64`) and a caption;
- `weather {city}`: structured content `{city, temperatureC: 21, conditions: "sunny"}` (an output schema);
- `fail {message?}`: an `isError` result with the message (default "it broke");
- `slow {seconds}`: sleeps, then answers `slept {seconds}`;
- `drop {}`: the server closes the connection in the middle of the call (no answer);
- `mixed {}`: audio, an embedded text resource, an embedded binary resource and a resource link;
- `together {count}`: answers `together` once `count` calls of it are in progress at once (`alone` after 20 s).

`server.add_tool(name, reply)` adds a tool answering `reply` (text), `server.remove_tool(name)` removes one; the
next call of any tool on any connection then carries `notifications/tools/list_changed` before its answer
(`server.notified` counts those sent). `server.requests` counts HTTP requests, `server.calls` the tool calls by
name, `server.headers` the headers of the last request (to check what the client sent). `server.stop()` /
`server.start()` stop and restart it on the same port (a server that went away and came back). With
`required_headers={"X-Api-Key": "k"}` a request without them is answered 401.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

PNG_BASE64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
WAV_BASE64 = base64.b64encode(b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(28)).decode()
BASE_TOOLS = ("echo", "picture", "weather", "fail", "slow", "drop", "mixed", "together")


class Weather(BaseModel):
    city: str
    temperatureC: int
    conditions: str


class _Dropped(Exception):
    """Raised in the ASGI app to make uvicorn close a connection whose response has started."""


class McpTestServer:
    """One SDK server on its own loopback port (see the module)."""

    def __init__(
        self,
        transport: str = "streamable-http",
        *,
        name: str = "test-server",
        required_headers: dict[str, str] | None = None,
    ) -> None:
        if transport not in ("streamable-http", "sse"):
            raise ValueError(transport)
        self.transport = transport
        self.name = name
        self.required_headers = {k.lower(): v for k, v in (required_headers or {}).items()}
        self.requests = 0
        self.calls: Counter[str] = Counter()
        self.headers: dict[str, str] = {}
        self.notified = 0
        self._pending_notice = False
        self._together = 0
        self._met = False
        self._lock = threading.Lock()
        self._drops: list[asyncio.Event] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self.port = 0
        self.mcp = self._build()

    # --- the SDK server ------------------------------------------------------------------------------------

    def _build(self) -> Any:
        mcp = MCPServer(self.name, log_level="WARNING")
        harness = self

        async def notice(ctx: Context) -> None:
            with harness._lock:
                due, harness._pending_notice = harness._pending_notice, False
            if due:
                await ctx.session.send_notification(
                    types.ToolListChangedNotification(), related_request_id=ctx.request_id
                )
                harness.notified += 1

        @mcp.tool(description="Echo the text back.", structured_output=False)
        async def echo(text: str, ctx: Context) -> str:
            harness.calls["echo"] += 1
            await notice(ctx)
            return f"echo: {text}"

        @mcp.tool(description="A tiny picture.")
        async def picture(ctx: Context) -> list[types.ContentBlock]:
            harness.calls["picture"] += 1
            await notice(ctx)
            return [
                types.TextContent(type="text", text="a red dot"),
                types.ImageContent(type="image", data=PNG_BASE64, mime_type="image/png"),
            ]

        @mcp.tool(description="The weather in a city.")
        async def weather(city: str, ctx: Context) -> Weather:
            harness.calls["weather"] += 1
            await notice(ctx)
            return Weather(city=city, temperatureC=21, conditions="sunny")

        @mcp.tool(description="Always fails.")
        async def fail(ctx: Context, message: str = "it broke") -> types.CallToolResult:
            harness.calls["fail"] += 1
            await notice(ctx)
            return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)

        @mcp.tool(description="Sleeps, then answers.", structured_output=False)
        async def slow(seconds: float, ctx: Context) -> str:
            harness.calls["slow"] += 1
            await notice(ctx)
            await asyncio.sleep(seconds)
            return f"slept {seconds}"

        @mcp.tool(description="Drops the connection mid-call.", structured_output=False)
        async def drop(ctx: Context) -> str:
            harness.calls["drop"] += 1
            await notice(ctx)
            with harness._lock:
                events, harness._drops = harness._drops, []
            for event in events:
                event.set()
            await asyncio.sleep(60)
            return "not reached"

        @mcp.tool(description="Waits until `count` calls of it are in progress at once.", structured_output=False)
        async def together(count: int, ctx: Context) -> str:
            harness.calls["together"] += 1
            harness._together += 1
            try:
                deadline = time.monotonic() + 20
                while not harness._met and time.monotonic() < deadline:
                    harness._met = harness._together >= count
                    await asyncio.sleep(0.02)
                return "together" if harness._met else "alone"
            finally:
                harness._together -= 1
                if harness._together == 0:
                    harness._met = False

        @mcp.tool(description="Content of every other kind.")
        async def mixed(ctx: Context) -> list[types.ContentBlock]:
            harness.calls["mixed"] += 1
            await notice(ctx)
            return [
                types.AudioContent(type="audio", data=WAV_BASE64, mime_type="audio/wav"),
                types.EmbeddedResource(
                    type="resource",
                    resource=types.TextResourceContents(uri="file:///notes.txt", mime_type="text/plain", text="notes"),
                ),
                types.EmbeddedResource(
                    type="resource",
                    resource=types.BlobResourceContents(
                        uri="file:///dot.png", mime_type="image/png", blob=PNG_BASE64
                    ),
                ),
                types.ResourceLink(type="resource_link", name="report", uri="https://example.test/report.pdf",
                                   mime_type="application/pdf"),
            ]  # fmt: skip

        return mcp

    def add_tool(self, name: str, reply: str = "added", description: str = "An added tool.") -> None:
        """A tool answering `reply`; the next call on any connection sends `tools/list_changed`."""

        async def added() -> str:
            self.calls[name] += 1
            return reply

        self.mcp.add_tool(added, name=name, description=description, structured_output=False)
        with self._lock:
            self._pending_notice = True

    def remove_tool(self, name: str) -> None:
        self.mcp.remove_tool(name)
        with self._lock:
            self._pending_notice = True

    # --- the ASGI app around it ----------------------------------------------------------------------------

    def _app(self) -> Any:
        from mcp.server.transport_security import TransportSecuritySettings

        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        if self.transport == "sse":
            inner = self.mcp.sse_app(transport_security=security)
        else:
            inner = self.mcp.streamable_http_app(transport_security=security)
        harness = self

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await inner(scope, receive, send)
                return
            harness.requests += 1
            harness._loop = asyncio.get_running_loop()
            harness.headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            if any(harness.headers.get(k) != v for k, v in harness.required_headers.items()):
                await send(
                    {"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]}
                )
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
            dropped = asyncio.Event()
            with harness._lock:
                harness._drops.append(dropped)
            started = False

            async def tracked_send(message: dict[str, Any]) -> None:
                nonlocal started
                if message["type"] == "http.response.start":
                    started = True
                await send(message)

            task = asyncio.ensure_future(inner(scope, receive, tracked_send))
            waiter = asyncio.ensure_future(dropped.wait())
            try:
                done, _ = await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
                if task in done:
                    task.result()
                    return
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
                if not started:
                    await send(
                        {
                            "type": "http.response.start",
                            "status": 200,
                            "headers": [(b"content-type", b"text/event-stream")],
                        }
                    )
                    await send({"type": "http.response.body", "body": b": partial\n\n", "more_body": True})
                raise _Dropped("the test server drops this connection")
            finally:
                waiter.cancel()
                with harness._lock:
                    if dropped in harness._drops:
                        harness._drops.remove(dropped)

        return app

    # --- serving -------------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base_url}/sse" if self.transport == "sse" else f"{self.base_url}/mcp"

    def start(self) -> McpTestServer:
        import uvicorn

        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        self._sock = sock
        config = uvicorn.Config(self._app(), log_level="critical", lifespan="on", access_log=False)
        server = uvicorn.Server(config)
        self._server = server
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="mcp-test-server")
        self._thread = thread
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the MCP test server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            with self._lock:
                events, self._drops = self._drops, []
            loop = self._loop
            for event in events:  # end the streams still open, so uvicorn stops at once
                if loop is not None:
                    with contextlib.suppress(RuntimeError):
                        loop.call_soon_threadsafe(event.set)
            self._server.should_exit = True
            self._server.force_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
            if self._thread.is_alive():
                raise RuntimeError("the MCP test server did not stop")
        if self._sock is not None:
            self._sock.close()
        self._server = self._thread = self._sock = None

    def __enter__(self) -> McpTestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def mcp_server(
    transport: str = "streamable-http", *, name: str = "test-server", required_headers: dict[str, str] | None = None
) -> Iterator[McpTestServer]:
    """A started test server (`transport`: `streamable-http` or `sse`), stopped afterwards; with `required_headers`
    it answers 401 to a request without them."""
    server = McpTestServer(transport, name=name, required_headers=required_headers)
    with server:
        yield server


@contextlib.contextmanager
def mcp_servers() -> Iterator[tuple[McpTestServer, McpTestServer]]:
    """A streamable-HTTP server and an SSE one, both started."""
    with mcp_server("streamable-http", name="http-server") as http, mcp_server("sse", name="sse-server") as sse:
        yield http, sse


def server_config(server: McpTestServer, **extra: Any) -> dict[str, Any]:
    """The `mcp.servers.{name}` entry for `server`."""
    return {"url": server.url, "transport": server.transport, **extra}
