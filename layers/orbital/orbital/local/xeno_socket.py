"""xeno's Unix socket, served by the local gateway: `<xeno home>/.xeno/gateway.sock`, one JSON-RPC message per line.

Each connection is one more socket of the bridge (`Bridge.serve_lines`): the same `$connect`, the same xeno
translator over `/ws` frames, posts written back as lines. The socket is its owner's (0600, in a 0700 directory),
and a connection whose peer (`SO_PEERCRED`) is not the gateway's own user is closed at once: what comes in is the
gateway's user, so its connections come in with the gateway's token as their bearer, and they are the only ones whose
attachments may name files on this machine (`sourceIp` "unix", see `orbital.dialects.xeno`). At start
an existing socket file is probed as xeno does (a live one means another gateway serves it: refuse to start; a stale
one is removed); it is removed at stop. Those rules live in `orbital.xeno.unix_socket`, shared with
`orbital xeno-bridge`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orbital.xeno.unix_socket import XenoSocketInUseError, claim, listener, remove, same_user, socket_path

if TYPE_CHECKING:
    from orbital.local.bridge import Bridge

__all__ = ["MAX_LINE_BYTES", "XenoSocket", "XenoSocketInUseError", "lifespan"]

log = logging.getLogger("orbital.local")

MAX_LINE_BYTES = 8 * 1024 * 1024
"""The longest line read (a query with a long paste; there is no API Gateway cap on this socket)."""


class XenoSocket:
    def __init__(self, home: Path, bridge: Bridge, token: str | None) -> None:
        self.path = socket_path(home)
        self.bridge = bridge
        self._headers = {"authorization": f"Bearer {token}"} if token else {}
        self._server: asyncio.base_events.Server | None = None

    def check(self) -> None:
        """Before serving: refuse a socket another process serves; remove a stale one."""
        claim(self.path)

    async def start(self) -> None:
        bound = listener(self.path)
        self._server = await asyncio.start_unix_server(self._client, sock=bound, limit=MAX_LINE_BYTES)
        log.info("xeno socket at %s", self.path)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None
        remove(self.path)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not same_user(writer.get_extra_info("socket")):
            log.warning("xeno socket: closed a connection from another user")
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            return
        try:
            await self.bridge.serve_lines(reader, writer, headers=dict(self._headers), query={"dialect": "xeno"})
        except Exception:
            log.exception("xeno socket connection failed")


def lifespan(app: Any, on_start: list[Any], on_stop: list[Any]) -> Any:
    """`app` with an ASGI lifespan that awaits `on_start` (in order) when the server starts and `on_stop` when it
    stops: servers that must share the gateway's event loop (the xeno socket)."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    for start in on_start:
                        await start()
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                for stop in on_stop:
                    with contextlib.suppress(Exception):
                        await stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    return wrapped
