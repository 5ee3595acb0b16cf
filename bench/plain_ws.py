"""A WebSocket client connection on one thread: `websockets`' sans-I/O client protocol over a blocking socket.

`websockets.sync` reads every socket on a thread of its own and hands each message to the caller through a
condition: two threads woken per message. Here the caller's thread reads the socket itself, so a benchmark's own
process adds one wake-up per message and no hand-off between its threads."""

from __future__ import annotations

import collections
import itertools
import json
import select
import socket
import time
import uuid
from typing import Any

from websockets.client import ClientProtocol
from websockets.exceptions import InvalidState
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri


class PlainConnection:
    """One client connection. `recv` waits at most `timeout` seconds (TimeoutError, and the connection is still
    usable); a close from the server ends it once the messages that came before the close are taken."""

    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        uri = parse_uri(url)
        self.timeout = timeout
        self.protocol = ClientProtocol(uri, max_size=None)
        self._pending: collections.deque[str | bytes] = collections.deque()
        self._parts: list[bytes] = []
        self._text = False
        self._open = False
        self._closed = False
        self.sock = socket.create_connection((uri.host, uri.port), timeout=timeout)
        try:
            self.sock.settimeout(None)  # reads wait in `select`, writes block until sent
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.protocol.send_request(self.protocol.connect())
            self._flush()
            deadline = time.monotonic() + timeout
            while not self._open and self.protocol.handshake_exc is None:
                self._read(deadline)
            if self.protocol.handshake_exc is not None:
                raise self.protocol.handshake_exc
        except BaseException:
            self.sock.close()
            raise

    def _flush(self) -> None:
        data = self.protocol.data_to_send()
        if data:
            self.sock.sendall(b"".join(data))

    def _read(self, deadline: float) -> None:
        if self._closed:
            raise ConnectionError("the server closed the connection")
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([self.sock], [], [], remaining)[0]:
            raise TimeoutError("nothing received within the timeout")
        data = self.sock.recv(262144)
        if not data:
            self.protocol.receive_eof()
            self._closed = True
        else:
            self.protocol.receive_data(data)
        for event in self.protocol.events_received():  # what was received is taken before anything is sent
            if isinstance(event, Response):
                self._open = True
            elif isinstance(event, Frame):
                self._frame(event)
        self._flush()  # pongs, and the answer to a close

    def _frame(self, frame: Frame) -> None:
        if frame.opcode is Opcode.CLOSE:
            self._closed = True
            return
        if frame.opcode in (Opcode.TEXT, Opcode.BINARY):
            self._text = frame.opcode is Opcode.TEXT
            self._parts = [frame.data]
        elif frame.opcode is Opcode.CONT:
            self._parts.append(frame.data)
        else:
            return  # ping and pong: the protocol answers pings itself
        if frame.fin:
            data = b"".join(self._parts)
            self._pending.append(data.decode() if self._text else data)
            self._parts = []

    def send(self, text: str) -> None:
        self.protocol.send_text(text.encode())
        self._flush()

    def recv(self, timeout: float | None = None) -> str | bytes:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self._pending:
            self._read(deadline)
        return self._pending.popleft()

    def recv_json(self, timeout: float | None = None) -> Any:
        return json.loads(self.recv(timeout))

    def close(self) -> None:
        """Send a close and wait briefly for the server's, so that the server sees a clean close."""
        try:
            if not self._closed:
                self.protocol.send_close()
                self._flush()
                deadline = time.monotonic() + 1.0
                while not self._closed:
                    self._read(deadline)
        except (OSError, InvalidState, ConnectionError, TimeoutError):
            pass  # already closing, or the socket is gone: closed all the same
        finally:
            self.sock.close()


class PlainRpc:
    """Requests and their responses over a `PlainConnection` (what a benchmark's client or node needs: no
    fragments, no pending events kept)."""

    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        self.conn = PlainConnection(url, timeout=timeout)
        self._ids = itertools.count(1)

    def __enter__(self) -> PlainRpc:
        return self

    def __exit__(self, *_: object) -> None:
        self.conn.close()

    def send(self, frame: dict[str, Any]) -> None:
        self.conn.send(json.dumps(frame))

    def call(self, method: str, params: Any = None) -> Any:
        frame_id = str(next(self._ids))
        self.send({"type": "req", "id": frame_id, "method": method, "params": params})
        while True:
            frame = self.conn.recv_json()
            if frame.get("type") == "res" and frame.get("id") == frame_id:
                if not frame.get("ok"):
                    raise RuntimeError(f"{method} failed: {frame.get('error')}")
                return frame.get("payload")

    def connect(self, mode: str, client_id: str | None = None, **extra: Any) -> Any:
        """`connect` as `mode`; a client id of its own unless given (a second client of one id replaces the first)."""
        client_id = client_id or f"bench-{uuid.uuid4().hex[:12]}"
        client = {"id": client_id, "version": "0.1.0", "platform": "python", "mode": mode}
        return self.call("connect", {"minProtocol": 1, "maxProtocol": 1, "client": client, **extra})
