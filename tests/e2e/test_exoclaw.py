"""Exoclaw's clients against a real `orbital dev` (dialects.md §2.8): raw WebSockets speaking Exoclaw's protocol,
the scripted model over HTTP answering by rule (`tests.support.rules`), a real `orbital node` for node tools.

Two gateways for the module: `loopback` (no token: the unprompted hello) and `guarded` (a token, and the text frames
of a socket handled concurrently, as API Gateway does: `--concurrent-frames`). The protocol and stream checks run
against both.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.client import GatewayClient
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

from tests.e2e.conftest import GatewayProcess, NodeProcess
from tests.support import rules
from tests.support.agent import configure_fake_model
from tests.support.fake_llm import FakeLLM, Item, Request, error, reply

TOKEN = "exoclaw-e2e-token-0123456789abcdef"
AUTH_FAILED = {"error": "auth_failed", "code": 4001}
FAIL = "FAIL_WITH_500"
"""A message the model answers with a 500 every time (its retries too)."""
BIG = "SPEND_120_TOKENS"
"""A message the model answers reporting 120 tokens of usage."""
HEX32 = re.compile(r"^[0-9a-f]{32}$")


def respond(request: Request) -> Item:
    """`rules.respond`, and a 500 for a message that asks for one (retried at once: `Retry-After: 0`)."""
    messages = request.body.get("messages") if isinstance(request.body, dict) else None
    users = [m for m in messages or [] if isinstance(m, dict) and m.get("role") == "user"]
    if users and messages and messages[-1] is users[-1] and FAIL in json.dumps(users[-1].get("content")):
        return error(500, "the model is down", retry_after=0)
    if users and BIG in json.dumps(users[-1].get("content")):
        return reply("SPENT", usage={"input": 80, "output": 40, "totalTokens": 120})
    return rules.respond(request)


# --- the gateways -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        server.responder = respond
        yield server


def _admin(gw: GatewayProcess) -> GatewayClient:
    client = GatewayClient(gw.url, timeout=20)
    client.connect("client", f"exo-admin-{uuid.uuid4().hex[:6]}", token=gw.token)
    return client


def _started(gw: GatewayProcess, llm: FakeLLM) -> GatewayProcess:
    gw.start()
    try:
        with _admin(gw) as admin:
            configure_fake_model(admin, llm.base_url)
    except Exception:
        gw.stop()
        raise
    return gw


@pytest.fixture(scope="module")
def loopback(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM) -> Iterator[GatewayProcess]:
    """A gateway without a token (on loopback): Exoclaw clients are greeted unprompted."""
    gw = _started(GatewayProcess(tmp_path_factory.mktemp("exo-loopback") / "data"), llm)
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM) -> Iterator[GatewayProcess]:
    """A gateway with a token, handling each socket's frames concurrently (API Gateway's way)."""
    data = tmp_path_factory.mktemp("exo-guarded") / "data"
    gw = _started(GatewayProcess(data, token=TOKEN, extra_args=["--concurrent-frames"]), llm)
    yield gw
    gw.stop()


@pytest.fixture(params=["loopback", "guarded"])
def gw(request: pytest.FixtureRequest) -> GatewayProcess:
    found: GatewayProcess = request.getfixturevalue(request.param)
    return found


# --- an Exoclaw client --------------------------------------------------------------------------------------------


def is_hello(frame: Any) -> bool:
    return (
        isinstance(frame, dict)
        and set(frame) == {"ok", "version"}
        and frame["ok"] is True
        and isinstance(frame["version"], str)
    )


class Exo:
    """What an Exoclaw client does on the wire: one WebSocket, one JSON object per text frame."""

    def __init__(self, gw: GatewayProcess, *, hello: bool = True) -> None:
        self.ws: ClientConnection = ws_connect(gw.url, open_timeout=10, close_timeout=2, max_size=None)
        self.received: list[Any] = []
        """Every frame, in arrival order."""
        self._unread: list[Any] = []
        if hello:
            if gw.token:
                self.send({"token": gw.token})
            first = self.recv()
            assert is_hello(first), first

    def __enter__(self) -> Exo:
        return self

    def __exit__(self, *_: Any) -> None:
        self.ws.close()

    def send(self, frame: Any) -> None:
        self.ws.send(frame if isinstance(frame, str) else json.dumps(frame))

    def recv(self, timeout: float = 30.0) -> Any:
        """The next frame not taken by `take`."""
        if self._unread:
            return self._unread.pop(0)
        return self._read(timeout)

    def _read(self, timeout: float) -> Any:
        frame = json.loads(self.ws.recv(timeout=timeout))
        self.received.append(frame)
        return frame

    def take(self, wanted: Callable[[Any], bool], timeout: float = 60.0) -> Any:
        """The first frame (read or unread) for which `wanted` holds; the others stay unread, in order."""
        deadline = time.monotonic() + timeout
        for i, frame in enumerate(self._unread):
            if wanted(frame):
                return self._unread.pop(i)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no wanted frame within {timeout}s; unread: {self._unread}")
            frame = self._read(remaining)
            if wanted(frame):
                return frame
            self._unread.append(frame)

    def answer(self, rpc_id: str, method: str, params: Any = None, *, timeout: float = 30.0) -> dict[str, Any]:
        """Send a request and return its (non-stream) answer."""
        frame: dict[str, Any] = {"id": rpc_id, "method": method}
        if params is not None:
            frame["params"] = params
        self.send(frame)
        return self.answer_to(rpc_id, timeout=timeout)

    def answer_to(self, rpc_id: str, *, timeout: float = 30.0) -> dict[str, Any]:
        found: dict[str, Any] = self.take(
            lambda f: isinstance(f, dict) and f.get("id") == rpc_id and "event" not in f, timeout
        )
        return found

    def stream(self, rpc_id: str, *, timeout: float = 90.0) -> list[dict[str, Any]]:
        """Every frame of one request, up to its `done` (or a plain answer, which ends it too)."""
        frames: list[dict[str, Any]] = []
        while True:
            frame = self.take(lambda f: isinstance(f, dict) and f.get("id") == rpc_id, timeout)
            frames.append(frame)
            if frame.get("event") == "done" or "event" not in frame:
                return frames

    def chat(self, rpc_id: str, params: dict[str, Any], *, timeout: float = 90.0) -> list[dict[str, Any]]:
        self.send({"id": rpc_id, "method": "chat.send", "params": params})
        return self.stream(rpc_id, timeout=timeout)

    def quiet_after(self, *rpc_ids: str) -> list[Any]:
        """Ping, and return the frames for `rpc_ids` that arrived before the pong (what came after their end)."""
        probe = f"probe-{uuid.uuid4().hex[:6]}"
        self.send({"id": probe, "method": "ping"})
        assert self.answer_to(probe) == {"id": probe, "result": "pong"}
        late = [f for f in self._unread if isinstance(f, dict) and f.get("id") in rpc_ids]
        return late


def account() -> str:
    return f"acct-{uuid.uuid4().hex[:8]}"


def texts(frames: list[dict[str, Any]]) -> str:
    return "".join(f["data"] for f in frames if f.get("event") == "text")


def events(frames: list[dict[str, Any]]) -> list[str]:
    return [f.get("event", "answer") for f in frames]


def assert_well_formed(rpc_id: str, frames: list[dict[str, Any]]) -> None:
    """Every frame carries the request's id; the stream ends with a bare `done`."""
    assert all(f["id"] == rpc_id for f in frames), frames
    assert frames[-1] == {"id": rpc_id, "event": "done"}, frames
    assert [f for f in frames[:-1] if f.get("event") == "done"] == []
    for frame in frames:
        assert not ("result" in frame and "error" in frame), frame
        if frame.get("event") == "text":
            assert isinstance(frame["data"], str)
        if frame.get("event") == "usage":
            assert set(frame["data"]) == {"input_tokens", "output_tokens"}
            assert all(type(v) is int for v in frame["data"].values()), frame


def expected_key(agent: str, channel: str, acct: str, peer: str) -> str:
    """`agent:{agent}:exoclaw:group:{h}`, h the first 32 hex digits of the SHA-256 of the conversation's ids."""
    digest = hashlib.sha256("\x00".join((channel, acct, peer)).encode()).hexdigest()[:32]
    return f"agent:{agent}:exoclaw:group:{digest}"


# --- checks 1-3: token first --------------------------------------------------------------------------------------


def test_the_right_token_gets_exactly_the_hello(guarded: GatewayProcess) -> None:
    with Exo(guarded, hello=False) as exo:
        exo.send({"token": TOKEN})
        hello = exo.recv()
        assert is_hello(hello) and hello == {"ok": True, "version": hello["version"]}
        assert exo.answer("after", "ping") == {"id": "after", "result": "pong"}


@pytest.mark.parametrize(
    "first",
    [
        pytest.param({"token": "wrong"}, id="a-wrong-token"),
        pytest.param({"token": TOKEN[:-1]}, id="a-shorter-token"),
        pytest.param({"id": "1", "method": "ping"}, id="an-rpc-first"),
        pytest.param({"id": "1", "method": "chat.send", "params": {"token": TOKEN}}, id="a-token-in-params"),
    ],
)
def test_anything_but_the_token_is_refused_and_closed(guarded: GatewayProcess, first: dict[str, Any]) -> None:
    with Exo(guarded, hello=False) as exo:
        exo.send(first)
        assert exo.recv() == AUTH_FAILED
        with pytest.raises(ConnectionClosed):
            exo.recv()
        assert not any(is_hello(f) for f in exo.received)


# --- check 4 and the loopback rule: the unprompted hello ----------------------------------------------------------


def test_loopback_without_a_token_greets_unprompted(loopback: GatewayProcess) -> None:
    with Exo(loopback, hello=False) as exo:
        upgraded = time.monotonic()
        hello = exo.recv(timeout=5)
        assert is_hello(hello)
        assert time.monotonic() - upgraded < 0.8  # what Exoclaw's web UI waits before asking for a token
        assert exo.answer("p", "ping") == {"id": "p", "result": "pong"}
        # greeted already: a token frame is then just a malformed request
        exo.send({"token": "anything"})
        refused = exo.answer_to("0")
        assert set(refused) == {"id", "error"} and refused["error"].startswith("parse error: ")
        assert exo.answer("p2", "ping") == {"id": "p2", "result": "pong"}


def test_loopback_answers_a_token_sent_at_once_with_the_one_hello(loopback: GatewayProcess) -> None:
    """A client that sends a token without waiting (a stored token) gets the hello once, and then speaks."""
    ws = ws_connect(loopback.url, open_timeout=10, close_timeout=2)
    try:
        ws.send(json.dumps({"token": "whatever-it-had"}))
        ws.send(json.dumps({"id": "p", "method": "ping"}))
        frames = [json.loads(ws.recv(timeout=30)) for _ in range(2)]
    finally:
        ws.close()
    assert is_hello(frames[0]) and frames[1] == {"id": "p", "result": "pong"}


def _silent_socket_greeted(gw: GatewayProcess) -> None:
    """Open a socket that says nothing and wait for its hello: every socket opened before it has had its chance to
    be greeted (its silence window ended earlier)."""
    with Exo(gw, hello=False) as silent:
        assert is_hello(silent.recv(timeout=10))


def test_clients_that_speak_at_once_never_see_the_hello(loopback: GatewayProcess) -> None:
    gsv = ws_connect(loopback.url, open_timeout=10, close_timeout=2)
    xeno = ws_connect(loopback.url, open_timeout=10, close_timeout=2)
    try:
        client = {"id": f"gsv-{uuid.uuid4().hex[:6]}", "version": "0.1.0", "platform": "test", "mode": "client"}
        gsv.send(
            json.dumps({"type": "req", "id": "c", "method": "connect", "params": {"minProtocol": 1, "client": client}})
        )
        xeno.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "gateway.initialize", "params": {}}))
        _silent_socket_greeted(loopback)  # both windows are over
        gsv.send(json.dumps({"type": "req", "id": "after", "method": "tools.list"}))
        xeno.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "gateway.initialize", "params": {}}))
        seen_gsv = _frames_until(gsv, lambda f: f.get("type") == "res" and f.get("id") == "after")
        seen_xeno = _frames_until(xeno, lambda f: f.get("id") == 2)
    finally:
        gsv.close()
        xeno.close()
    assert seen_gsv[0]["type"] == "res" and seen_gsv[0]["ok"] and seen_gsv[0]["payload"]["type"] == "hello-ok"
    assert all(f.get("type") in ("res", "evt") for f in seen_gsv), seen_gsv
    assert seen_xeno[0]["jsonrpc"] == "2.0" and seen_xeno[0]["id"] == 1 and "result" in seen_xeno[0]
    assert all(f.get("jsonrpc") == "2.0" for f in seen_xeno), seen_xeno
    assert not any(is_hello(f) for f in seen_gsv + seen_xeno)


def test_a_dialect_chosen_at_the_upgrade_decides_the_greeting(loopback: GatewayProcess) -> None:
    """`?dialect=exoclaw` is greeted like any silent socket; `?dialect=xeno` never is."""
    forced = ws_connect(f"{loopback.url}?dialect=exoclaw", open_timeout=10, close_timeout=2)
    xeno = ws_connect(f"{loopback.url}?dialect=xeno", open_timeout=10, close_timeout=2)
    try:
        assert is_hello(json.loads(forced.recv(timeout=10)))
        forced.send(json.dumps({"id": "p", "method": "ping"}))
        assert json.loads(forced.recv(timeout=10)) == {"id": "p", "result": "pong"}
        _silent_socket_greeted(loopback)  # the xeno socket's window is over too
        xeno.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "gateway.initialize", "params": {}}))
        first = json.loads(xeno.recv(timeout=10))
    finally:
        forced.close()
        xeno.close()
    assert first["jsonrpc"] == "2.0" and first["id"] == 1 and "result" in first


def _frames_until(ws: ClientConnection, last: Callable[[dict[str, Any]], bool], timeout: float = 30.0) -> list[Any]:
    deadline = time.monotonic() + timeout
    seen = []
    while True:
        frame = json.loads(ws.recv(timeout=max(0.01, deadline - time.monotonic())))
        seen.append(frame)
        if isinstance(frame, dict) and last(frame):
            return seen


# --- checks 5-9: requests and their answers -----------------------------------------------------------------------


def test_ping_answers_with_a_string_id_and_no_error_key(gw: GatewayProcess) -> None:
    with Exo(gw) as exo:
        assert exo.answer("p1", "ping") == {"id": "p1", "result": "pong"}
        exo.send({"id": 7, "method": "ping", "jsonrpc": "2.0"})
        assert exo.answer_to("7") == {"id": "7", "result": "pong"}
        exo.send({"id": "x", "method": "ping", "params": None})
        assert exo.answer_to("x") == {"id": "x", "result": "pong"}
        assert not any("error" in f for f in exo.received)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("not json", id="not-json"),
        pytest.param('{"id": "1", "method": "ping"', id="cut-short"),
        pytest.param('{"method": "ping"}', id="no-id"),
        pytest.param('{"id": "1"}', id="no-method"),
        pytest.param('{"id": ["1"], "method": "ping"}', id="an-id-of-another-type"),
        pytest.param("[1, 2]", id="not-an-object"),
    ],
)
def test_a_parse_error_is_answered_under_id_0_and_keeps_the_socket(gw: GatewayProcess, bad: str) -> None:
    with Exo(gw) as exo:
        exo.send(bad)
        answer = exo.answer_to("0")
        assert set(answer) == {"id", "error"} and answer["error"].startswith("parse error: "), answer
        assert exo.answer("next", "ping") == {"id": "next", "result": "pong"}


def test_an_unknown_method(gw: GatewayProcess) -> None:
    with Exo(gw) as exo:
        assert exo.answer("4", "nope.method") == {"id": "4", "error": "unknown method: nope.method"}
        for future in ("chat.history", "session.list", "budget.status", "memory.search"):
            assert exo.answer(future, future) == {"id": future, "error": f"unknown method: {future}"}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        pytest.param({"channel": "ws"}, "invalid chat.send params: missing field `account`", id="no-account"),
        pytest.param({}, "invalid chat.send params: missing field `channel`", id="nothing"),
        pytest.param(
            {"channel": "ws", "account": "me"}, "invalid chat.send params: missing field `content`", id="no-content"
        ),
        pytest.param(
            {"channel": "ws", "account": "me", "content": "  "},
            "invalid chat.send params: content must not be empty",
            id="empty-content",
        ),
        pytest.param(
            {"channel": "ws", "account": 5, "content": "hi"},
            "invalid chat.send params: invalid type: integer `5`, expected a string",
            id="a-number-for-a-string",
        ),
    ],
)
def test_invalid_chat_send_params(gw: GatewayProcess, params: dict[str, Any], message: str) -> None:
    with Exo(gw) as exo:
        frames = exo.chat("9", params)
        assert frames == [{"id": "9", "error": message}]
        assert exo.quiet_after("9") == []  # no stream follows


# --- checks 10, 11, 14, 15: the stream ----------------------------------------------------------------------------


def test_a_reply_streams_text_usage_and_done(gw: GatewayProcess) -> None:
    with Exo(gw) as exo:
        frames = exo.chat("s1", {"channel": "websocket", "account": account(), "content": "reply with exactly: PONG_E"})
        assert_well_formed("s1", frames)
        assert texts(frames) == "PONG_E"
        assert "text" in events(frames) and "usage" in events(frames)
        assert exo.quiet_after("s1") == []  # nothing after `done`


def test_a_tool_call_streams_tool_use_and_its_result(gw: GatewayProcess) -> None:
    with Exo(gw) as exo:
        frames = exo.chat("t1", {"channel": "websocket", "account": account(), "content": "TOOL:gsv__ListFiles {}"})
        assert_well_formed("t1", frames)
        kinds = [e for e in events(frames) if e != "usage"]
        assert kinds[:2] == ["tool_use", "tool_result"] and kinds[-1] == "done" and "text" in kinds[2:-1], kinds
        use = next(f["data"] for f in frames if f["event"] == "tool_use")
        result = next(f["data"] for f in frames if f["event"] == "tool_result")
        assert set(use) == {"id", "name", "input"} and use["name"] == "gsv__ListFiles" and use["input"] == {}
        assert isinstance(use["id"], str) and use["id"]
        assert set(result) == {"tool_use_id", "content", "is_error"} and result["tool_use_id"] == use["id"]
        assert isinstance(result["content"], str) and result["is_error"] is False
        assert texts(frames) == result["content"].strip()  # the scripted model answers with the tool's output
        assert events(frames).count("usage") == 2  # one per model call
        assert exo.quiet_after("t1") == []


def test_an_unknown_tool_is_an_error_result_and_the_loop_goes_on(gw: GatewayProcess) -> None:
    with Exo(gw) as exo:
        frames = exo.chat("u1", {"channel": "websocket", "account": account(), "content": "TOOL:no_such_tool {}"})
        assert_well_formed("u1", frames)
        result = next(f["data"] for f in frames if f["event"] == "tool_result")
        assert result["is_error"] is True and "no_such_tool" in result["content"]
        assert texts(frames)  # the model was called again with the error, and answered


def test_a_model_failure_is_an_error_then_done(gw: GatewayProcess) -> None:
    with Exo(gw) as exo:
        frames = exo.chat("f1", {"channel": "websocket", "account": account(), "content": f"{FAIL} please"})
        assert [f.get("event") for f in frames] == ["error", "done"], frames
        assert isinstance(frames[0]["data"], str) and frames[0]["data"].startswith("provider error: ")
        assert "500" in frames[0]["data"] and "sk-e2e-key" not in frames[0]["data"]
        assert_well_formed("f1", frames)
        assert exo.quiet_after("f1") == []
        # the conversation is usable afterwards
        again = exo.chat("f2", {"channel": "websocket", "account": account(), "content": "reply with exactly: BACK"})
        assert texts(again) == "BACK"


def test_two_sends_on_one_socket_both_complete(gw: GatewayProcess) -> None:
    """Sent without waiting, into the same conversation (the second queued behind the first) and into another."""
    acct = account()
    with Exo(gw) as exo:
        sends = {
            "one": {"channel": "websocket", "account": acct, "content": "reply with exactly: FIRST"},
            "two": {"channel": "websocket", "account": acct, "content": "reply with exactly: SECOND"},
            "three": {"channel": "websocket", "account": account(), "content": "reply with exactly: THIRD"},
        }
        for rpc_id, params in sends.items():
            exo.send({"id": rpc_id, "method": "chat.send", "params": params})
        streams = {rpc_id: exo.stream(rpc_id) for rpc_id in sends}
        for rpc_id, frames in streams.items():
            assert_well_formed(rpc_id, frames)
        assert {rpc_id: texts(frames) for rpc_id, frames in streams.items()} == {
            "one": "FIRST",
            "two": "SECOND",
            "three": "THIRD",
        }
        assert exo.quiet_after(*sends) == []


# --- check 12: status and plugin.list -----------------------------------------------------------------------------


def test_status_counts_exoclaw_sessions_and_plugins(gw: GatewayProcess) -> None:
    with Exo(gw) as exo:
        before = exo.answer("st1", "status")
        assert set(before) == {"id", "result"} and set(before["result"]) == {"version", "plugins", "sessions", "budget"}
        assert set(before["result"]["budget"]) == {"daily", "monthly"}  # Orbital's: what is used, day and month
        status = before["result"]
        assert isinstance(status["version"], str)
        assert type(status["plugins"]) is int and type(status["sessions"]) is int
        plugins = exo.answer("pl", "plugin.list")["result"]
        assert isinstance(plugins, list) and plugins and all(set(p) == {"name"} for p in plugins)
        assert all(isinstance(p["name"], str) for p in plugins)
        assert len(plugins) == status["plugins"] and {"name": "gsv__ListFiles"} in plugins
        a, b = account(), account()
        for n, acct in enumerate((a, a, b)):
            frames = exo.chat(f"c{n}", {"channel": "websocket", "account": acct, "content": "reply with exactly: K"})
            assert texts(frames) == "K"
        after = exo.answer("st2", "status")["result"]
        assert after["sessions"] == status["sessions"] + 2
        assert after["plugins"] == status["plugins"]


# --- check 13: token budgets ----------------------------------------------------------------------------------------


def test_a_spent_session_budget_is_one_plain_error_and_no_stream(gw: GatewayProcess) -> None:
    acct = account()
    key = expected_key("main", "websocket", acct, "main")
    with _admin(gw) as gsv, Exo(gw) as exo:
        spend = {"channel": "websocket", "account": acct, "content": BIG}
        assert texts(exo.chat("b0", spend)) == "SPENT"  # 120 tokens used
        gsv.call("session.patch", {"sessionKey": key, "budget": {"maxTokens": 50}})
        frames = exo.chat("b1", {"channel": "websocket", "account": acct, "content": "reply with exactly: NO"})
        assert frames == [frames[0]] and set(frames[0]) == {"id", "error"}, frames
        refused = re.fullmatch(r"token budget exceeded \(session: (\d+)/50\)", frames[0]["error"])
        assert refused is not None and int(refused.group(1)) >= 50, frames[0]
        assert exo.quiet_after("b1") == []  # and no stream after it
        stats = gsv.call("session.stats", {"sessionKey": key})["budget"]["session"]
        assert stats["limit"] == 50 and stats["used"] >= 50


# --- sessions: their keys, their labels, what GSV clients see -----------------------------------------------------


def test_a_conversation_has_a_stable_session_gsv_clients_see(gw: GatewayProcess) -> None:
    acct = f"Mixed-{uuid.uuid4().hex[:6]}"
    key = expected_key("main", "Discord", acct, "Peer-1")
    assert HEX32.match(key.rsplit(":", 1)[1])
    with _admin(gw) as gsv, Exo(gw) as exo:
        params = {"channel": "Discord", "account": acct, "peer": "Peer-1", "content": "reply with exactly: SEEN"}
        frames = exo.chat("k1", params)
        assert texts(frames) == "SEEN"
        # the GSV client saw the run too, under the conversation's key
        chat = gsv.next_event("chat", timeout=30)["payload"]
        while chat["state"] not in ("final", "error"):
            assert chat["sessionKey"] == key
            chat = gsv.next_event("chat", timeout=30)["payload"]
        assert chat["state"] == "final" and chat["sessionKey"] == key
        assert chat["message"]["content"][0]["text"] == "SEEN"
        assert not any(f.get("type") for f in exo.received if isinstance(f, dict))  # no GSV frame on Exoclaw's
        sessions = {s["sessionKey"]: s for s in gsv.call("sessions.list", {"limit": 500})["sessions"]}
        assert sessions[key]["label"] == f"exoclaw:Discord:{acct}:Peer-1"
        # the user's text is stored as sent
        preview = gsv.call("session.preview", {"sessionKey": key})["messages"]
        assert [m["role"] for m in preview] == ["user", "assistant"]
        assert preview[0]["content"] == "reply with exactly: SEEN"
        # the same conversation again: the same session; another peer, case or account: another one
        exo.chat("k2", {**params, "content": "reply with exactly: AGAIN"})
        variants = [
            {**params, "peer": "peer-1"},
            {**params, "peer": "Peer-2"},
            {**params, "channel": "discord"},
            {**params, "account": acct.lower()},
        ]
        for n, variant in enumerate(variants):
            exo.chat(f"v{n}", {**variant, "content": "reply with exactly: V"})
        after = {s["sessionKey"] for s in gsv.call("sessions.list", {"limit": 500})["sessions"]}
        wanted = {expected_key("main", v["channel"], v["account"], v["peer"]) for v in variants}
        assert len(wanted) == 4 and key not in wanted and wanted <= after
        assert len(gsv.call("session.preview", {"sessionKey": key})["messages"]) == 4
        # `peer` defaults to "main"
        alone = {"channel": "Discord", "account": acct, "content": "reply with exactly: MAIN"}
        exo.chat("m1", alone)
        main_key = expected_key("main", "Discord", acct, "main")
        listed = {s["sessionKey"]: s for s in gsv.call("sessions.list", {"limit": 500})["sessions"]}
        assert listed[main_key]["label"] == f"exoclaw:Discord:{acct}:main"


def test_a_binding_routes_a_conversation_to_another_agent(loopback: GatewayProcess, llm: FakeLLM) -> None:
    acct = account()
    bindings = [
        {"agentId": "helper", "match": {"channel": "websocket"}},
        {"agentId": "vip", "match": {"channel": "websocket", "accountId": acct, "peer": {"id": "boss"}}},
        {"agentId": "team", "match": {"teamId": "t1"}},
    ]
    with _admin(loopback) as admin, Exo(loopback) as exo:
        admin.call("config.set", {"path": "agents.bindings", "value": bindings})
        try:
            cases = [
                ({"peer": "boss"}, "vip"),
                ({"peer": "someone"}, "helper"),
                ({"peer": "boss", "team": "t1"}, "vip"),
                ({"peer": "x", "team": "t1"}, "team"),
            ]
            for n, (extra, agent) in enumerate(cases):
                params = {"channel": "websocket", "account": acct, **extra, "content": f"reply with exactly: B{n}"}
                assert texts(exo.chat(f"b{n}", params)) == f"B{n}"
                key = expected_key(agent, "websocket", acct, extra["peer"])
                (asked,) = [r for r in llm.requests if r.body["messages"][-1]["content"] == params["content"]]
                assert f"Session key: {key}" in asked.body["messages"][0]["content"], (agent, key)
            listed = {s["sessionKey"] for s in admin.call("sessions.list", {"limit": 500})["sessions"]}
            assert expected_key("vip", "websocket", acct, "boss") in listed
        finally:
            admin.call("config.set", {"path": "agents.bindings", "value": []})


# --- a node's tool, through an Exoclaw chat ------------------------------------------------------------------------


def test_a_node_tool_through_an_exoclaw_chat(loopback: GatewayProcess, tmp_path: Path) -> None:
    node_id = f"exo{uuid.uuid4().hex[:6]}"
    node = NodeProcess(loopback, node_id, tmp_path / node_id / "ws").start()
    try:
        (node.workspace / "note.txt").write_text("written on the node\n")
        with Exo(loopback) as exo:
            content = f'TOOL:{node_id}__Read {{"path": "note.txt"}}'
            frames = exo.chat("n1", {"channel": "websocket", "account": account(), "content": content})
            assert_well_formed("n1", frames)
            use = next(f["data"] for f in frames if f["event"] == "tool_use")
            result = next(f["data"] for f in frames if f["event"] == "tool_result")
            assert use["name"] == f"{node_id}__Read" and use["input"] == {"path": "note.txt"}
            assert result["tool_use_id"] == use["id"] and result["is_error"] is False
            assert "written on the node" in result["content"]
            assert "written on the node" in texts(frames)
            plugins = exo.answer("pl", "plugin.list")["result"]
            assert {"name": f"{node_id}__Read"} in plugins
    finally:
        node.stop()


# --- a reply that was not streamed still comes as text -------------------------------------------------------------


def test_a_reply_of_the_gateway_itself_comes_as_text(loopback: GatewayProcess) -> None:
    """The iteration cap ends a run with a note no model streamed: an Exoclaw client still gets it as text."""
    with _admin(loopback) as admin, Exo(loopback) as exo:
        admin.call("config.set", {"path": "agents.maxIterations", "value": 1})
        try:
            content = "TOOL:gsv__ListFiles {}"
            frames = exo.chat("cap", {"channel": "websocket", "account": account(), "content": content})
        finally:
            admin.call("config.set", {"path": "agents.maxIterations"})
        assert_well_formed("cap", frames)
        assert "agents.maxIterations" in texts(frames)
