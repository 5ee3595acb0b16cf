"""The Sender port's contract (`orbital.ports.sender`): the same tests against both backends.

- `boto3`: `ManagementApiSender` on moto's management API (`mock_aws`). moto records what is posted to a connection
  but has no sockets: which connections are open is API Gateway's knowledge, played here at the boto3 level by two
  event hooks on the sender's client (a post or a close for a connection that is not open answers 410
  GoneException, as API Gateway does; a close ends the connection). What a socket received is read back from moto's
  record of the connection after each post.
- `local`: `BridgeSender` on the local gateway's bridge (`orbital.local.bridge.Bridge`) served by uvicorn on a free
  port, each socket a real WebSocket client; what a socket received is what its client read.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import queue
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from orbital.aws.push import closing_notice, post_data
from orbital.ports.sender import Sender
from orbital.protocol.frames import too_large

from tests.conftest import wait_for

LIMIT = 2000
"""The frame limit the senders are given here (a reply over it goes as a 413)."""


class Socket:
    """One open socket of a backend: what it received so far (every message's bytes, joined), and whether it is
    closed (with the close code, where the backend's peer sees one)."""

    def __init__(self, connection_id: str) -> None:
        self.connection_id = connection_id

    def received(self) -> bytes:
        raise NotImplementedError

    def closed(self) -> bool:
        raise NotImplementedError

    close_code: int | None = None


class Backend:
    sender: Sender
    sees_close_codes = False

    def open(self) -> Socket:
        raise NotImplementedError


# --- boto3 on moto ----------------------------------------------------------------------------------------------


class _MotoSocket(Socket):
    def __init__(self, connection_id: str, backend: _MotoBackend) -> None:
        super().__init__(connection_id)
        self._backend = backend

    def received(self) -> bytes:
        return self._backend.received.get(self.connection_id, b"")

    def closed(self) -> bool:
        return self.connection_id not in self._backend.open_ids


class _MotoBackend(Backend):
    ENDPOINT = "https://abc123.execute-api.us-east-1.amazonaws.com/prod"

    def __init__(self) -> None:
        from moto.apigatewaymanagementapi.models import apigatewaymanagementapi_backends
        from moto.core import DEFAULT_ACCOUNT_ID
        from orbital.aws.push import ManagementApiSender

        self.moto = apigatewaymanagementapi_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
        self.open_ids: set[str] = set()
        self.received: dict[str, bytes] = {}
        """What moto recorded for each connection, read after every post (moto forgets a connection once closed)."""
        self._ids = itertools.count(1)
        sender = ManagementApiSender(self.ENDPOINT, max_bytes=LIMIT)
        events = sender.client.meta.events
        for operation in ("PostToConnection", "DeleteConnection"):
            events.register(f"before-parameter-build.apigatewaymanagementapi.{operation}", self._note_connection)
            events.register(f"before-call.apigatewaymanagementapi.{operation}", self._gone_unless_open)
        events.register("after-call.apigatewaymanagementapi.PostToConnection", self._read_back)
        events.register("after-call.apigatewaymanagementapi.DeleteConnection", self._ended)
        self.sender = sender

    def open(self) -> Socket:
        connection_id = f"conn{next(self._ids)}Q"  # (moto keys a connection by its id as the URL quotes it)
        self.open_ids.add(connection_id)
        return _MotoSocket(connection_id, self)

    @staticmethod
    def _note_connection(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["connection_id"] = params["ConnectionId"]

    def _gone_unless_open(self, context: dict[str, Any], **_: Any) -> Any:
        if context.get("connection_id") in self.open_ids:
            return None  # on to moto
        from botocore.awsrequest import AWSResponse

        error = {"Code": "GoneException", "Message": ""}
        return AWSResponse(self.ENDPOINT, 410, {}, None), {"Error": error, "ResponseMetadata": {"HTTPStatusCode": 410}}

    def _read_back(self, context: dict[str, Any], **_: Any) -> None:
        connection_id = str(context.get("connection_id"))
        self.received[connection_id] = bytes(self.moto.connections[connection_id].data)

    def _ended(self, context: dict[str, Any], **_: Any) -> None:
        connection_id = str(context.get("connection_id"))
        self.open_ids.discard(connection_id)


@contextlib.contextmanager
def _boto3_backend() -> Iterator[Backend]:
    from moto import mock_aws
    from orbital.aws import clients

    with mock_aws():
        clients.reset_clients()
        made = _MotoBackend()
        try:
            yield made
        finally:
            clients.reset_clients()


# --- the local bridge -------------------------------------------------------------------------------------------


class _Handlers:
    """The bridge's routes: every socket is let in, and its connection id handed to the test."""

    def __init__(self) -> None:
        self.connected: queue.Queue[str] = queue.Queue()

    def __call__(self, function: str, event: dict[str, Any]) -> Any:
        if function == "connect":
            self.connected.put(str(event["requestContext"]["connectionId"]))
        return {"statusCode": 200}


class _WebSocket(Socket):
    def __init__(self, connection_id: str, client: Any) -> None:
        super().__init__(connection_id)
        self._client = client
        self._messages: list[bytes] = []
        self._done = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            for message in self._client:
                self._messages.append(message.encode() if isinstance(message, str) else bytes(message))
        except ConnectionClosed:
            pass
        finally:
            self.close_code = self._client.close_code
            self._done.set()

    def received(self) -> bytes:
        return b"".join(self._messages)

    def closed(self) -> bool:
        return self._done.is_set()

    def end(self) -> None:
        self._client.close()
        self._reader.join(timeout=10)


class _BridgeBackend(Backend):
    sees_close_codes = True

    def __init__(self, url: str, handlers: _Handlers, sender: Sender) -> None:
        self.url, self.handlers, self.sender = url, handlers, sender
        self.sockets: list[_WebSocket] = []

    def open(self) -> Socket:
        from websockets.sync.client import connect

        client = connect(self.url, open_timeout=10)
        made = _WebSocket(self.handlers.connected.get(timeout=10), client)
        self.sockets.append(made)
        return made


@contextlib.contextmanager
def _local_backend() -> Iterator[Backend]:
    from orbital.local.bridge import Bridge
    from orbital.local.sender import BridgeSender

    from tests.e2e.test_bridge import serving

    handlers = _Handlers()
    routes = {"$connect": {"function": "connect"}, "$disconnect": {"function": "disconnect"}}
    bridge = Bridge(handlers, routes)
    with serving(bridge) as (url, _thread):
        made = _BridgeBackend(url, handlers, BridgeSender(bridge, max_bytes=LIMIT))
        try:
            yield made
        finally:
            for sock in made.sockets:
                sock.end()


@pytest.fixture(params=["boto3", "local"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    make = _boto3_backend if request.param == "boto3" else _local_backend
    with make() as made:
        yield made


# --- the contract -----------------------------------------------------------------------------------------------


def _arrives(sock: Socket, expected: bytes) -> bool:
    wait_for(lambda: sock.received() == expected, timeout=10)
    return True


def test_a_frame_goes_as_its_compact_json(backend: Backend) -> None:
    sock = backend.open()
    frame = {"type": "evt", "event": "hello", "payload": {"text": "héllo \ud800"}}  # a lone surrogate too
    assert backend.sender.post(sock.connection_id, frame) is True
    expected = post_data(frame)
    assert expected.isascii() and json.loads(expected) == frame
    assert _arrives(sock, expected)


def test_bytes_go_as_they_are(backend: Backend) -> None:
    sock = backend.open()
    data = json.dumps({"type": "evt", "event": "raw", "payload": "x" * (LIMIT * 2)}).encode()
    assert backend.sender.post(sock.connection_id, data) is True  # the limit is for replies it encodes
    assert _arrives(sock, data)


def test_a_reply_over_the_limit_goes_as_a_413_for_the_same_request(backend: Backend) -> None:
    sock = backend.open()
    reply = {"type": "res", "id": "r1", "ok": True, "payload": {"content": "x" * (LIMIT * 2)}}
    event = {"type": "evt", "event": "big", "payload": "y" * (LIMIT * 2)}
    assert backend.sender.post(sock.connection_id, reply) is True
    assert backend.sender.post(sock.connection_id, event) is True  # only a reply is replaced
    instead = too_large(reply, len(post_data(reply)), LIMIT)
    assert instead["id"] == "r1" and instead["error"]["code"] == 413
    assert _arrives(sock, post_data(instead) + post_data(event))


def test_a_socket_that_is_gone_is_false(backend: Backend) -> None:
    assert backend.sender.post("never-connected=", {"type": "evt", "event": "x"}) is False


def test_close_tells_the_socket_why_then_closes_it(backend: Backend) -> None:
    sock = backend.open()
    backend.sender.close(sock.connection_id, 4001, "go away")
    assert _arrives(sock, post_data(closing_notice(4001, "go away")))
    wait_for(sock.closed, timeout=10)
    if backend.sees_close_codes:
        assert sock.close_code == 4001
    assert backend.sender.post(sock.connection_id, {"type": "evt", "event": "late"}) is False


def test_close_without_notice_only_closes(backend: Backend) -> None:
    sock = backend.open()
    backend.sender.close(sock.connection_id, 1000, "bye", notify=False)
    wait_for(sock.closed, timeout=10)
    assert sock.received() == b""


def test_closing_a_socket_that_is_gone_is_no_error(backend: Backend) -> None:
    sock = backend.open()
    backend.sender.close(sock.connection_id)
    wait_for(sock.closed, timeout=10)
    backend.sender.close(sock.connection_id)  # again: nothing to close, nothing raised
    backend.sender.close("never-connected=", 4000, "whoever")
    assert sock.closed()
