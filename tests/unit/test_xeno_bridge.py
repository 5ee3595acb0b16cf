"""`orbital.xeno.bridge` against a stand-in gateway (a websockets server in this process) where the real one cannot be
made to misbehave: no answer at all, API Gateway's own error frame, a late answer, a keepalive left unanswered."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.xeno.bridge import BridgeOptions, XenoBridge, read_line, upstream_url
from websockets.asyncio.server import ServerConnection, serve


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="xbu-", dir="/tmp"))  # a Unix socket's path must stay short
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_the_upstream_url_forces_the_xeno_dialect() -> None:
    assert upstream_url("wss://abc.execute-api.eu-west-1.amazonaws.com/ws") == (
        "wss://abc.execute-api.eu-west-1.amazonaws.com/ws?dialect=xeno"
    )
    assert upstream_url("ws://127.0.0.1:8765/ws?dialect=gsv&x=1") == "ws://127.0.0.1:8765/ws?x=1&dialect=xeno"
    assert upstream_url("ws://localhost:1") == "ws://localhost:1/?dialect=xeno"
    for bad in ("https://example.com/ws", "example.com/ws", "ws:///ws", "ws://[::1/ws"):
        with pytest.raises(ValueError):
            upstream_url(bad)


def test_an_overlong_line_is_skipped_whole() -> None:
    async def lines() -> list[Any]:
        reader = asyncio.StreamReader(limit=16)
        reader.feed_data(b"short\n" + b"x" * 100 + b"\nnext\n" + b"y" * 40 + b"\nlast")
        reader.feed_eof()
        return [await read_line(reader) for _ in range(6)]

    assert asyncio.run(lines()) == [
        (b"short", False),
        (b"", True),
        (b"next", False),
        (b"", True),
        (b"last", False),
        None,
    ]


Handler = Callable[[ServerConnection], Awaitable[None]]


@contextlib.asynccontextmanager
async def gateway(handler: Handler) -> AsyncIterator[str]:
    """A stand-in gateway on a free port: its ws:// URL."""
    async with serve(handler, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}/ws"


@contextlib.asynccontextmanager
async def bridged(home: Path, url: str, **options: Any) -> AsyncIterator[tuple[asyncio.StreamReader, Any]]:
    """A bridge serving `home` for `url`, and one client of its socket."""
    bridge = XenoBridge(BridgeOptions(home=home, url=url, token=lambda: "secret-token", **options))
    await bridge.start()
    try:
        reader, writer = await asyncio.open_unix_connection(str(bridge.path))
        try:
            yield reader, writer
        finally:
            writer.close()
    finally:
        await bridge.stop()
    assert not bridge.path.exists()


async def send(writer: Any, message: dict[str, Any]) -> None:
    writer.write(json.dumps(message).encode() + b"\n")
    await writer.drain()


async def receive(reader: asyncio.StreamReader, timeout: float = 5.0) -> dict[str, Any]:
    line = await asyncio.wait_for(reader.readline(), timeout)
    assert line.endswith(b"\n"), line
    message: dict[str, Any] = json.loads(line)
    return message


def test_a_request_the_gateway_never_answers_gets_an_error(home: Path) -> None:
    """API Gateway answers a failed integration with a frame of its own (not JSON-RPC): not relayed, and the request
    gets the bridge's timeout error; the late answer is dropped, the next request answered as usual."""
    seen: dict[str, Any] = {}
    release = asyncio.Event()

    async def handler(ws: ServerConnection) -> None:
        assert ws.request is not None
        seen["path"] = ws.request.path
        seen["authorization"] = ws.request.headers.get("Authorization")
        async for text in ws:
            message = json.loads(text)
            if message["id"] == 1:
                await ws.send(json.dumps({"message": "Internal server error", "connectionId": "c", "requestId": "r"}))
                await release.wait()
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {"n": message["id"]}}))

    async def scenario() -> None:
        async with gateway(handler) as url, bridged(home, url, request_timeout=0.3) as (reader, writer):
            await send(writer, {"jsonrpc": "2.0", "id": 1, "method": "gateway.initialize"})
            answer = await receive(reader)
            assert answer == {
                "jsonrpc": "2.0",
                "id": 1,
                "error": {
                    "code": -32000,
                    "message": "The Orbital gateway did not answer gateway.initialize within 0.3 s.",
                },
            }
            release.set()  # the late answer to id 1 comes now, then the answer to id 2
            await send(writer, {"jsonrpc": "2.0", "id": 2, "method": "gateway.initialize"})
            assert await receive(reader) == {"jsonrpc": "2.0", "id": 2, "result": {"n": 2}}

    asyncio.run(scenario())
    assert seen == {"path": "/ws?dialect=xeno", "authorization": "Bearer secret-token"}


def test_an_unanswered_keepalive_means_a_new_connection(home: Path) -> None:
    connections: list[ServerConnection] = []
    keepalives: list[dict[str, Any]] = []

    async def handler(ws: ServerConnection) -> None:
        connections.append(ws)
        async for text in ws:
            message = json.loads(text)
            if message.get("method") == "orbital.keepalive":
                keepalives.append(message)  # and no answer
            else:
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {}}))

    async def scenario() -> None:
        options = {"keepalive": 0.05, "keepalive_timeout": 0.1, "backoff_base": 0.01}
        async with gateway(handler) as url, bridged(home, url, **options) as (reader, writer):
            await send(writer, {"jsonrpc": "2.0", "id": 1, "method": "gateway.initialize"})
            assert (await receive(reader))["id"] == 1
            async with asyncio.timeout(10):
                while len(connections) < 2:
                    await asyncio.sleep(0.01)
            await send(writer, {"jsonrpc": "2.0", "id": 2, "method": "gateway.initialize"})
            assert await receive(reader) == {"jsonrpc": "2.0", "id": 2, "result": {}}

    asyncio.run(scenario())
    assert keepalives and all(k["id"].startswith("orbital-xeno-bridge-keepalive-") for k in keepalives)


def test_a_query_in_flight_when_the_connection_drops_is_ended(home: Path) -> None:
    """Accepted, then the gateway goes: the client gets gateway.error and gateway.done for it, a waiting request an
    error; none of it hangs."""

    async def handler(ws: ServerConnection) -> None:
        async for text in ws:
            message = json.loads(text)
            if message["method"] == "gateway.query":
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {"accepted": True}}))
            elif message["method"] == "gateway.heartbeat":
                await ws.close(1011, "gone")
                return

    async def scenario() -> None:
        async with gateway(handler) as url, bridged(home, url) as (reader, writer):
            params = {"requestId": "q1", "content": "hi", "context": {"type": "rpc"}}
            await send(writer, {"jsonrpc": "2.0", "id": "a", "method": "gateway.query", "params": params})
            assert await receive(reader) == {"jsonrpc": "2.0", "id": "a", "result": {"accepted": True}}
            await send(writer, {"jsonrpc": "2.0", "id": 9, "method": "gateway.heartbeat", "params": {}})
            got = [await receive(reader) for _ in range(3)]
            errors = [m for m in got if "error" in m]
            assert len(errors) == 1 and errors[0]["id"] == 9 and "1011 gone" in errors[0]["error"]["message"]
            notes = [m for m in got if "method" in m]
            assert [m["method"] for m in notes] == ["gateway.error", "gateway.done"]
            assert all(m["params"]["requestId"] == "q1" for m in notes)
            assert "1011 gone" in notes[0]["params"]["error"]

    asyncio.run(scenario())


def test_where_attachments_are_uploaded() -> None:
    from orbital.xeno.uploads import http_base

    assert http_base("ws://127.0.0.1:8765/ws", None) == "http://127.0.0.1:8765"
    assert http_base("ws://127.0.0.1:8765", None) == "http://127.0.0.1:8765"
    assert http_base("wss://gw.example.com/ws", None) == "https://gw.example.com"  # one domain for both APIs
    assert http_base("wss://gw.example.com/base/ws?x=1", None) == "https://gw.example.com/base"
    # API Gateway's WebSocket API has a host of its own: the HTTP API cannot be told from it
    assert http_base("wss://abc123.execute-api.eu-west-1.amazonaws.com/prod", None) is None
    given = "https://def456.execute-api.eu-west-1.amazonaws.com/"
    assert http_base("wss://abc123.execute-api.eu-west-1.amazonaws.com/prod", given) == given.rstrip("/")
    for bad in ("ftp://x", "https://", "gw.example.com"):
        with pytest.raises(ValueError):
            http_base("ws://127.0.0.1:8765/ws", bad)
