"""A small synchronous GSV client: connect, call methods, collect events. Used by `orbital call`, tests and tools."""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from collections import deque
from typing import Any

from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

from orbital.protocol.frames import fragments


class RpcFailedError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class GatewayClient:
    def __init__(self, url: str, *, timeout: float = 30.0, open_timeout: float = 10.0) -> None:
        self.url = url
        self.timeout = timeout
        self.ws: ClientConnection = ws_connect(url, open_timeout=open_timeout, max_size=None)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.events: deque[dict[str, Any]] = deque()
        self._responses: dict[Any, dict[str, Any]] = {}
        self.hello: dict[str, Any] | None = None

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def close(self) -> None:
        self.ws.close()

    def send_raw(self, data: str | bytes) -> None:
        # API Gateway refuses a WebSocket frame over 32 KB: longer text goes out as fragments of one message
        self.ws.send(fragments(data) if isinstance(data, str) else data)

    def request(self, method: str, params: Any = None, *, timeout: float | None = None) -> dict[str, Any]:
        """Send a request and return its response frame (ok or not)."""
        frame_id = f"{uuid.uuid4().hex[:8]}-{next(self._ids)}"
        frame: dict[str, Any] = {"type": "req", "id": frame_id, "method": method}
        if params is not None:
            frame["params"] = params
        self.send_raw(json.dumps(frame))
        return self.wait_response(frame_id, timeout=timeout)

    def wait_response(self, frame_id: Any, *, timeout: float | None = None) -> dict[str, Any]:
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        while True:
            if frame_id in self._responses:
                return self._responses.pop(frame_id)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no response to {frame_id} within the timeout")
            self._receive(remaining)

    def _receive(self, timeout: float) -> Any:
        message = self.ws.recv(timeout=timeout)
        if isinstance(message, bytes):
            self.events.append({"type": "binary", "data": message})
            return message
        try:
            frame = json.loads(message)
        except ValueError:
            return None
        if isinstance(frame, dict) and frame.get("type") == "res":
            self._responses[frame.get("id")] = frame
        elif isinstance(frame, dict):
            self.events.append(frame)
        return frame

    def call(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any:
        res = self.request(method, params, timeout=timeout)
        if not res.get("ok"):
            err = res.get("error") or {}
            raise RpcFailedError(int(err.get("code", 0)), str(err.get("message", "")))
        return res.get("payload")

    def connect(
        self,
        mode: str = "client",
        client_id: str | None = None,
        *,
        token: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        client: dict[str, Any] = {
            "id": client_id or f"{mode}-{uuid.uuid4().hex[:8]}",
            "version": "0.1.0",
            "platform": "python",
            "mode": mode,
        }
        client.update(extra.pop("client", {}))
        params: dict[str, Any] = {"minProtocol": 1, "maxProtocol": 1, "client": client, **extra}
        if token:
            params["auth"] = {"token": token}
        self.hello = self.call("connect", params)
        return self.hello

    def next_event(self, event: str | None = None, *, timeout: float | None = None) -> dict[str, Any]:
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        while True:
            for i, frame in enumerate(self.events):
                if event is None or frame.get("event") == event:
                    del self.events[i]
                    return frame
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {event or 'event'} within the timeout")
            self._receive(remaining)
