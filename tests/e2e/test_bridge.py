"""The bridge on a real server: a socket keeps being read (and its keepalive answered) while its frames wait."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from orbital.local.bridge import Bridge
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect


class SlowHandlers:
    """Route handlers: `{"type": "slow"}` blocks until released; every other frame is answered with its own body."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.seen: list[str] = []
        self.disconnected = threading.Event()

    def __call__(self, function: str, event: dict[str, Any]) -> Any:
        if function == "disconnect":
            self.disconnected.set()
            return {"statusCode": 200}
        if function == "connect":
            return {"statusCode": 200}
        body = json.loads(event["body"])
        if body.get("type") == "slow":
            self.release.wait(30)
        self.seen.append(body["id"])
        return {"statusCode": 200, "body": json.dumps({"type": "res", "id": body["id"]})}


ROUTES = {
    "$connect": {"function": "connect"},
    "$disconnect": {"function": "disconnect"},
    "$default": {"function": "frame", "two_way": True},
}


@contextlib.contextmanager
def serving(bridge: Bridge) -> Iterator[tuple[str, threading.Thread]]:
    """The bridge under uvicorn in a thread (keepalive every 0.2 s, 1 s to answer); its URL and the server thread."""
    sock = socket.create_server(("127.0.0.1", 0))  # bound before uvicorn runs: no other process can take the port
    port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        bridge.app(),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        ws="websockets-sansio",
        ws_ping_interval=0.2,
        ws_ping_timeout=1.0,
        lifespan="off",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"ws://127.0.0.1:{port}/ws", thread
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        sock.close()
        bridge.close()


@pytest.fixture
def served() -> Iterator[tuple[str, SlowHandlers]]:
    handlers = SlowHandlers()
    with serving(Bridge(handlers, ROUTES)) as (url, _):
        try:
            yield url, handlers
        finally:
            handlers.release.set()


def test_pings_are_answered_while_frames_wait_behind_a_slow_one(served: tuple[str, SlowHandlers]) -> None:
    url, handlers = served
    with connect(url, ping_interval=None, open_timeout=10) as ws:
        ws.send(json.dumps({"type": "slow", "id": "slow"}))
        ws.send(json.dumps({"type": "req", "id": "next"}))  # waits behind the slow one
        # the socket is still read while the slow frame holds the next one back: our pings are answered (and the
        # server's own keepalive, every 0.2 s with 1 s to answer, keeps the socket open meanwhile)
        for _ in range(3):
            assert ws.ping().wait(5), "no pong while a frame was being handled"
        assert handlers.seen == []  # still held: nothing was answered out of order
        handlers.release.set()
        answers = [json.loads(ws.recv(timeout=10))["id"] for _ in range(2)]
    assert answers == ["slow", "next"]
    assert handlers.disconnected.wait(10)


def test_frames_read_before_a_close_are_handled_before_disconnect(served: tuple[str, SlowHandlers]) -> None:
    url, handlers = served
    with connect(url, ping_interval=None, open_timeout=10) as ws:
        ws.send(json.dumps({"type": "slow", "id": "slow"}))
        for i in range(5):
            ws.send(json.dumps({"type": "req", "id": str(i)}))
        assert ws.ping().wait(5)
    # the client is gone; its frames still run, in order, and only then the disconnect
    assert not handlers.disconnected.is_set()
    handlers.release.set()
    assert handlers.disconnected.wait(10)
    assert handlers.seen == ["slow", "0", "1", "2", "3", "4"]


def test_inline_methods_run_on_the_event_loop_and_the_rest_in_threads() -> None:
    threads: dict[str, str] = {}

    def handler(function: str, event: dict[str, Any]) -> Any:
        if function != "frame":
            return {"statusCode": 200}
        body = json.loads(event["body"])
        threads[body["method"]] = threading.current_thread().name
        return {"statusCode": 200, "body": json.dumps({"type": "res", "id": body["id"]})}

    routes = {**ROUTES, "req": {"function": "frame", "two_way": True}}
    with serving(Bridge(handler, routes, inline_methods=frozenset({"config.get"}))) as (url, thread):
        with connect(url, open_timeout=10) as ws:
            for i, method in enumerate(("config.get", "config.set")):
                ws.send(json.dumps({"type": "req", "id": str(i), "method": method}))
                assert json.loads(ws.recv(timeout=10))["id"] == str(i)
    assert threads["config.get"] == thread.name  # the server's own thread, where its event loop runs
    assert threads["config.set"].startswith("orbital-handler")


def test_inline_frames_keep_their_place_behind_a_frame_still_handled() -> None:
    """An inline frame is handled by the task that read it only when nothing of its socket's is queued or being
    handled: behind a slow frame on a handler thread it waits its turn, and the answers keep the frames' order."""
    release = threading.Event()
    seen: list[str] = []

    def handler(function: str, event: dict[str, Any]) -> Any:
        if function != "frame":
            return {"statusCode": 200}
        body = json.loads(event["body"])
        if body["method"] == "config.set":
            release.wait(30)
        seen.append(body["id"])
        return {"statusCode": 200, "body": json.dumps({"type": "res", "id": body["id"]})}

    routes = {**ROUTES, "req": {"function": "frame", "two_way": True}}
    with serving(Bridge(handler, routes, inline_methods=frozenset({"config.get"}))) as (url, _):
        with connect(url, open_timeout=10) as ws:
            ws.send(json.dumps({"type": "req", "id": "slow", "method": "config.set"}))
            for i in range(3):
                ws.send(json.dumps({"type": "req", "id": str(i), "method": "config.get"}))
            assert ws.ping().wait(5)  # all four read
            assert seen == []
            release.set()
            assert [json.loads(ws.recv(timeout=10))["id"] for _ in range(4)] == ["slow", "0", "1", "2"]
            for i in range(3, 6):  # alone again: handled as they are read, answered in order
                ws.send(json.dumps({"type": "req", "id": str(i), "method": "config.get"}))
            assert [json.loads(ws.recv(timeout=10))["id"] for _ in range(3)] == ["3", "4", "5"]
    assert seen == ["slow", "0", "1", "2", "3", "4", "5"]


@pytest.mark.parametrize("eager", [True, False], ids=["eager-writes", "queued-writes"])
def test_posts_and_closes_on_the_event_loop_go_out_in_order(eager: bool) -> None:
    """A handler run on the loop posts through the management API: answered at once (410 for a socket unknown or
    closed, 413 for a message over 128 KB), written before the route's reply, and a close after the frames posted
    before it, with its code and reason. A thread's posts to the same socket keep their order too."""
    bridge: Bridge
    answers: dict[str, list[int]] = {}

    def handler(function: str, event: dict[str, Any]) -> Any:
        if function != "frame":
            return {"statusCode": 200}
        cid = event["requestContext"]["connectionId"]
        body = json.loads(event["body"])
        statuses = answers.setdefault(body["id"], [])
        for n in range(3):
            frame = json.dumps({"type": "evt", "event": "posted", "n": n, "on": threading.current_thread().name})
            statuses.append(bridge.manage("POST", cid, frame.encode(), {})[0])
        statuses.append(bridge.manage("POST", "NOSUCHSOCKET", b"{}", {})[0])
        statuses.append(bridge.manage("POST", cid, json.dumps({"x": "y" * 140_000}).encode(), {})[0])
        if body["method"] == "bye":
            headers = {"x-orbital-close-code": "4001", "x-orbital-close-reason": "bye now"}
            statuses.append(bridge.manage("DELETE", cid, b"", headers)[0])
            statuses.append(bridge.manage("POST", cid, b"{}", {})[0])  # closed: refused
        return {"statusCode": 200, "body": json.dumps({"type": "res", "id": body["id"]})}

    routes = {**ROUTES, "req": {"function": "frame", "two_way": True}}
    bridge = Bridge(handler, routes, inline_methods=frozenset({"quick", "bye"}))
    if eager and not bridge.eager_tasks:
        pytest.skip("eager tasks need Python 3.12")
    bridge.eager_tasks = eager
    with serving(bridge) as (url, thread):
        with connect(url, open_timeout=10) as ws:
            for i, method in enumerate(("quick", "threaded")):
                ws.send(json.dumps({"type": "req", "id": str(i), "method": method}))
                got = [json.loads(ws.recv(timeout=10)) for _ in range(4)]
                assert [f.get("n") for f in got] == [0, 1, 2, None] and got[3] == {"type": "res", "id": str(i)}
                on_loop = got[0]["on"] == thread.name
                assert on_loop is (method == "quick"), got[0]
            ws.send(json.dumps({"type": "req", "id": "2", "method": "bye"}))
            assert [json.loads(ws.recv(timeout=10)).get("n") for _ in range(3)] == [0, 1, 2]
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
            assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4001, "bye now")
    assert answers["0"] == answers["1"] == [200, 200, 200, 410, 413]
    assert answers["2"] == [200, 200, 200, 410, 413, 204, 410]
