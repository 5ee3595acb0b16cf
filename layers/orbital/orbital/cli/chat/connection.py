"""The client-mode socket `orbital chat` talks over, and the failures it reports in one line."""

from __future__ import annotations

import contextlib
import itertools
import json
import queue
import threading
import time
import uuid
from typing import Any

from orbital import __version__
from orbital.protocol.frames import fragments
from orbital.protocol.local_token import redact_url

RPC_TIMEOUT = 30.0
KEEPALIVE_S = 240.0
"""Send a cheap request after this long without any outgoing frame (API Gateway drops idle sockets at 10 min)."""


class ChatError(Exception):
    """A failure this command reports in one line: unreachable gateway, lost connection, refused call."""


class UnreachableError(ChatError):
    """The gateway could not be reached or the handshake did not complete: worth another try later."""


class ChatRefusedError(ChatError):
    """The gateway refused the connection (a wrong token, a protocol it does not speak): another try would fail too."""


class NotSentError(ChatError):
    """The socket was gone before the request was written: nothing reached the gateway."""


REFUSING_CLOSE_CODES = frozenset({1008, 4001})
"""A close during the handshake with one of these is a refusal (policy, unauthorized), not a passing failure."""


class CallFailedError(ChatError):
    """The gateway answered a request with an error frame."""

    def __init__(self, method: str, code: int, message: str) -> None:
        super().__init__(f"{method} failed ({code}): {message}")
        self.code = code
        self.message = message


class _Waiter:
    __slots__ = ("done", "frame")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.frame: dict[str, Any] | None = None


LOST = None
"""Put on the event queue (after every event that came before) when the socket is gone."""


class ChatConnection:
    """A connected client-mode socket. `call()` may be used from any thread; `events` receives every event frame
    and, once the socket is gone, `LOST` (`lost` then says why)."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = RPC_TIMEOUT,
        keepalive: float = KEEPALIVE_S,
        client_id: str | None = None,
    ) -> None:
        self.url = url
        self.timeout = timeout
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.lost: str | None = None
        self.hello: dict[str, Any] = {}
        self._ids = itertools.count(1)
        self._pending: dict[str, _Waiter] = {}
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._gone = threading.Event()
        self._last_send = time.monotonic()
        self._closing = False
        self.client_id = client_id or f"chat-{uuid.uuid4().hex[:8]}"
        self._ws = self._open(token, self.client_id)
        self._reader = threading.Thread(target=self._read, name="orbital-chat-reader", daemon=True)
        self._reader.start()
        self._keepalive: threading.Thread | None = None
        if keepalive > 0:
            self._keepalive = threading.Thread(
                target=self._keep_alive, args=(keepalive,), name="orbital-chat-keepalive", daemon=True
            )
            self._keepalive.start()

    def _open(self, token: str | None, client_id: str) -> Any:
        # lazy: only this command needs it (the parser of every `orbital` command imports this module)
        from orbital.client import GatewayClient, RpcFailedError

        where = redact_url(self.url)
        try:
            client = GatewayClient(self.url, timeout=self.timeout, open_timeout=self.timeout)
        except Exception as exc:  # refused, DNS, TLS, HTTP status, bad URL, timeout
            raise UnreachableError(f"cannot reach {where}: {_describe(exc)}") from None
        try:
            client.connect("client", client_id, token=token, client={"version": __version__, "platform": "cli"})
        except RpcFailedError as exc:
            client.close()
            raise ChatRefusedError(f"{where} refused the connection ({exc.code}): {exc.message}") from None
        except Exception as exc:  # closed during the handshake (e.g. a wrong token), timeout
            client.close()
            code = getattr(getattr(exc, "rcvd", None), "code", None)
            failed = ChatRefusedError if code in REFUSING_CLOSE_CODES else UnreachableError
            raise failed(f"connecting to {where} failed: {_describe(exc)}") from None
        self.hello = client.hello or {}
        while client.events:  # anything that arrived during the handshake
            frame = client.events.popleft()
            if frame.get("type") == "evt":
                self.events.put(frame)
        return client.ws

    # reader and keepalive threads

    def _read(self) -> None:
        reason = "the connection closed"
        try:
            while True:
                message = self._ws.recv()
                if isinstance(message, bytes):
                    continue
                try:
                    frame = json.loads(message)
                except ValueError:
                    continue
                if not isinstance(frame, dict):
                    continue
                if frame.get("type") == "res":
                    with self._lock:
                        waiter = self._pending.pop(str(frame.get("id")), None)
                    if waiter is not None:
                        waiter.frame = frame
                        waiter.done.set()
                elif frame.get("type") == "evt":
                    self.events.put(frame)
        except Exception as exc:
            reason = _close_reason(exc)
        finally:
            self.lost = "the connection was closed" if self._closing else reason
            self._gone.set()
            with self._lock:
                waiters = list(self._pending.values())
                self._pending.clear()
            for waiter in waiters:
                waiter.done.set()
            self.events.put(LOST)

    def _keep_alive(self, every: float) -> None:
        while not self._gone.wait(min(every / 4, 30.0)):
            if time.monotonic() - self._last_send >= every:
                with contextlib.suppress(ChatError):
                    self._send({"type": "req", "id": f"keepalive-{next(self._ids)}", "method": "tools.list"})

    # calls

    def _send(self, frame: dict[str, Any]) -> None:
        if self._gone.is_set():
            raise NotSentError(f"connection to {redact_url(self.url)} lost: {self.lost}")
        try:
            text = json.dumps(frame)
            with self._send_lock:
                self._ws.send(fragments(text))  # API Gateway refuses frames over 32 KB: one message, in fragments
                self._last_send = time.monotonic()
        except Exception as exc:
            raise ChatError(f"connection to {redact_url(self.url)} lost: {_close_reason(exc)}") from None

    def call(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any:
        """Send one request and return its payload; `CallFailedError` for an error answer, `ChatError` when the
        socket goes away, `TimeoutError` when no answer comes in time."""
        frame_id = f"c{next(self._ids)}"
        waiter = _Waiter()
        with self._lock:
            self._pending[frame_id] = waiter
        frame: dict[str, Any] = {"type": "req", "id": frame_id, "method": method}
        if params is not None:
            frame["params"] = params
        try:
            self._send(frame)
            if not waiter.done.wait(self.timeout if timeout is None else timeout):
                raise TimeoutError(f"no answer to {method} within {self.timeout if timeout is None else timeout:g} s")
        finally:
            with self._lock:
                self._pending.pop(frame_id, None)
        res = waiter.frame
        if res is None:
            raise ChatError(f"connection to {redact_url(self.url)} lost: {self.lost}")
        if not res.get("ok"):
            err = res.get("error")
            if not isinstance(err, dict):
                err = {}
            raise CallFailedError(method, int(err.get("code") or 0), str(err.get("message") or "unknown error"))
        return res.get("payload")

    @property
    def is_lost(self) -> bool:
        return self._gone.is_set()

    def close(self) -> None:
        self._closing = True
        with contextlib.suppress(Exception):
            self._ws.close()
        self._reader.join(timeout=2.0)


def _close_reason(exc: BaseException) -> str:
    rcvd = getattr(exc, "rcvd", None)
    if rcvd is not None:
        code = getattr(rcvd, "code", None)
        why = getattr(rcvd, "reason", "") or ""
        return f"closed by the gateway (code {code}{': ' + why if why else ''})"
    if type(exc).__name__.startswith("ConnectionClosed"):
        return "the connection dropped"
    return _describe(exc)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
