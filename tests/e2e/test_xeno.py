"""xeno's clients against Orbital, unchanged: dialects.md §1.9, checks 1-15, over real sockets.

Each check runs against a real `orbital dev` subprocess and the scripted model over HTTP (`rules.respond`: "reply
with exactly: X" answers X), through xeno's Unix socket at `<xeno home>/.xeno/gateway.sock` (one JSON-RPC message per
line) and through `ws://…/ws` (one per text frame); on a gateway with a token, over `/ws` with a bearer at the
upgrade and with the frames of a socket handled concurrently (`--concurrent-frames`, as API Gateway does). Around
them: GSV clients see the xeno conversation in the main session and the run's `chat` events as before, while a xeno
socket gets only xeno messages and only for its own requests; the socket file's modes, the stale-socket probe, the
socket's removal at stop, `--xeno-home` and `--no-xeno`; attachments read from the client's disk and partial
streams (`xeno.partials`).

Data directories are made under /tmp with short names: an AF_UNIX path holds about 108 bytes.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import socket
import stat
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.client import GatewayClient
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect as ws_connect

from tests.conftest import wait_for
from tests.e2e.conftest import GatewayProcess
from tests.support import rules
from tests.support.agent import configure_fake_model
from tests.support.fake_llm import FakeLLM, Item, Request, error, hang, reply

TOKEN = "xeno-e2e-token-0123456789"
MAIN = "agent:main:main"
EXOCLAW_HELLO = {"ok": True, "version": "0.1.0"}
"""What a loopback gateway without a token says to a socket silent for a moment after its upgrade (dialects.md)."""
IN_USE = "Gateway RPC socket already in use at {path}. Is another serve process running?"
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000005a1b1c3c50000000049454e44ae426082"
)
"""A PNG of one pixel."""


# --- clients ------------------------------------------------------------------------------------------------------


class Xeno:
    """What a xeno client does: send JSON-RPC messages, read the ones that come back."""

    def send(self, message: Any) -> None:
        self.send_raw(json.dumps(message))

    def send_raw(self, text: str) -> None:
        raise NotImplementedError

    def recv(self, timeout: float = 30.0) -> dict[str, Any]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def call(self, rpc_id: Any, method: str, params: Any = None, *, timeout: float = 30.0) -> dict[str, Any]:
        """Send a request and return the next message, which must be its answer (nothing else comes first)."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rpc_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        answer = self.recv(timeout)
        assert answer.get("id") == rpc_id and "method" not in answer, answer
        return answer

    def answer_to(self, rpc_id: Any, timeout: float = 30.0) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The answer to `rpc_id`, and the notifications that came before it."""
        before: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while True:
            message = self.recv(max(0.1, deadline - time.monotonic()))
            if "method" not in message and message.get("id") == rpc_id:
                return message, before
            before.append(message)

    def until_done(self, *request_ids: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Every message received until each of `request_ids` has had its `gateway.done`."""
        waiting = set(request_ids)
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while waiting:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no gateway.done for {sorted(waiting)} within {timeout}s; saw {seen}")
            message = self.recv(remaining)
            seen.append(message)
            if message.get("method") == "gateway.done":
                waiting.discard(message["params"]["requestId"])
        return seen

    def initialize(self, rpc_id: Any = "init") -> dict[str, Any]:
        return self.call(rpc_id, "gateway.initialize")["result"]

    def query(self, rpc_id: Any, request_id: str, content: str, **extra: Any) -> None:
        params = {"requestId": request_id, "content": content, "context": {"type": "rpc"}, **extra}
        self.send({"jsonrpc": "2.0", "id": rpc_id, "method": "gateway.query", "params": params})


class UnixXeno(Xeno):
    """xeno's console on the Unix socket: one message per `\\n`-terminated line."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(path))
        self.buffer = b""

    def send_raw(self, text: str) -> None:
        self.sock.sendall(text.encode() + (b"" if text.endswith("\n") else b"\n"))

    def line(self, timeout: float = 30.0) -> bytes:
        """The next line as received, its `\\n` included."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no line within {timeout}s (have {self.buffer!r})")
            self.sock.settimeout(remaining)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"the socket closed (have {self.buffer!r})")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line + b"\n"

    def recv(self, timeout: float = 30.0) -> dict[str, Any]:
        message = json.loads(self.line(timeout))
        assert isinstance(message, dict), message
        return message

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class WsXeno(Xeno):
    """The same messages over `/ws`: one per text frame (what `orbital xeno-bridge` sends)."""

    def __init__(self, url: str, token: str | None = None, *, forced: bool = False) -> None:
        """`forced`: say `?dialect=xeno` at the upgrade, as a bridge to a loopback gateway without a token should (a
        socket that stays silent there for a moment is greeted the Exoclaw way), instead of letting the first
        frame decide."""
        headers = {"Authorization": f"Bearer {token}"} if token else None
        url = f"{url}?dialect=xeno" if forced else url
        self.ws = ws_connect(url, additional_headers=headers, open_timeout=10, max_size=None)

    def send_raw(self, text: str) -> None:
        self.ws.send(text)

    def recv(self, timeout: float = 30.0) -> dict[str, Any]:
        data = self.ws.recv(timeout=timeout)
        assert isinstance(data, str), data  # text frames only
        message = json.loads(data)
        assert isinstance(message, dict), message
        return message

    def close(self) -> None:
        self.ws.close()


# --- gateways and the model ---------------------------------------------------------------------------------------


def short_dir() -> Path:
    return Path(tempfile.mkdtemp(dir="/tmp", prefix="xeno-"))


def socket_of(home: Path) -> Path:
    return home / ".xeno" / "gateway.sock"


def configure(gw: GatewayProcess, llm: FakeLLM) -> None:
    with GatewayClient(gw.url, timeout=15) as admin:
        admin.connect("client", "xeno-admin", token=gw.token)
        configure_fake_model(admin, llm.base_url)


@contextlib.contextmanager
def started(gw: GatewayProcess, root: Path, llm: FakeLLM) -> Iterator[GatewayProcess]:
    """`gw` started and pointed at the scripted model; stopped, and its directory removed, at the end."""
    try:
        gw.start()
        configure(gw, llm)
        yield gw
    finally:
        gw.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@pytest.fixture(scope="module")
def local(llm: FakeLLM) -> Iterator[GatewayProcess]:
    """A gateway without a token, serving xeno's socket in its data directory (the default)."""
    root = short_dir()
    with started(GatewayProcess(root / "d"), root, llm) as gw:
        yield gw


@pytest.fixture(scope="module")
def guarded(llm: FakeLLM) -> Iterator[GatewayProcess]:
    """A gateway with a token whose frames are handled concurrently, without xeno's socket."""
    root = short_dir()
    options = ["--concurrent-frames", "--no-xeno"]
    with started(GatewayProcess(root / "d", token=TOKEN, extra_args=options), root, llm) as gw:
        yield gw


@pytest.fixture
def fake(llm: FakeLLM) -> Iterator[FakeLLM]:
    llm.reset()
    llm.responder = rules.respond
    yield llm
    llm.reset()


def respond_with(special: dict[str, Callable[[], Item]]) -> Callable[[Request], Item]:
    """`rules.respond`, except for a request whose last user message contains one of `special`'s markers."""

    def respond(request: Request) -> Item:
        for message in reversed(request.body.get("messages") or []):
            if message.get("role") == "user":
                text = json.dumps(message.get("content"))
                for marker, item in special.items():
                    if marker in text:
                        return item()
                break
        return rules.respond(request)

    return respond


def requested(llm: FakeLLM, marker: str) -> Request:
    """The model request whose user message carries `marker`, once it has come in."""

    def found() -> Request | None:
        for request in llm.requests:
            if marker in json.dumps(request.body.get("messages") or []):
                return request
        return None

    return wait_for(found, timeout=30)


@pytest.fixture(params=["unix", "ws"])
def xeno(request: pytest.FixtureRequest, local: GatewayProcess, fake: FakeLLM) -> Iterator[Xeno]:
    client: Xeno = UnixXeno(socket_of(local.data_dir)) if request.param == "unix" else WsXeno(local.url, forced=True)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def gsv(local: GatewayProcess) -> Iterator[GatewayClient]:
    with GatewayClient(local.url, timeout=30) as client:
        client.connect("client", f"gsv-{uuid.uuid4().hex[:6]}")
        yield client


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text")


def notifications(messages: list[dict[str, Any]], method: str | None = None) -> list[dict[str, Any]]:
    return [m for m in messages if "method" in m and (method is None or m["method"] == method)]


def assert_one_reply(messages: list[dict[str, Any]], request_id: str, content: str) -> None:
    """Check 2's shape for `request_id`: ≥0 stats, exactly one final stream with `content`, done last."""
    assert all("id" not in m and m.get("jsonrpc") == "2.0" for m in messages), messages
    mine = [m for m in messages if m["params"]["requestId"] == request_id]
    assert mine[-1] == {"jsonrpc": "2.0", "method": "gateway.done", "params": {"requestId": request_id}}
    finals = [m for m in mine if m["method"] == "gateway.stream" and not m["params"]["isPartial"]]
    assert [f["params"] for f in finals] == [{"requestId": request_id, "content": content, "isPartial": False}]
    assert {m["method"] for m in mine} <= {"gateway.stats", "gateway.stream", "gateway.done"}
    assert len(notifications(mine, "gateway.done")) == 1
    for stats in notifications(mine, "gateway.stats"):
        assert isinstance(stats["params"]["stats"], str) and stats["params"]["stats"]


def query_and_reply(client: Xeno, rpc_id: Any, request_id: str, text: str) -> list[dict[str, Any]]:
    """Check 2: the query is accepted (the id echoed with its JSON type) and answered with `text`."""
    client.query(rpc_id, request_id, f"reply with exactly: {text}")
    ack = client.recv()
    assert ack == {"jsonrpc": "2.0", "id": rpc_id, "result": {"accepted": True}} and type(ack["id"]) is type(rpc_id)
    messages = client.until_done(request_id)
    assert [m["params"]["requestId"] for m in messages] == [request_id] * len(messages)  # nothing for others
    assert_one_reply(messages, request_id, text)
    return messages


# --- the Unix socket and its file -----------------------------------------------------------------------------------


def test_1_socket_file_modes_and_initialize_as_one_line(local: GatewayProcess, fake: FakeLLM) -> None:
    path = socket_of(local.data_dir)
    assert stat.S_ISSOCK(path.lstat().st_mode)
    assert stat.S_IMODE(path.lstat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    client = UnixXeno(path)
    try:
        client.send_raw('{"jsonrpc":"2.0","id":1,"method":"gateway.initialize"}\n')
        line = client.line()
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        answer = json.loads(line)
        assert set(answer) == {"jsonrpc", "id", "result"} and answer["jsonrpc"] == "2.0" and answer["id"] == 1
        assert type(answer["id"]) is int
        assert set(answer["result"]) == {"sessionId", "history"}
        assert answer["result"]["sessionId"] is None or isinstance(answer["result"]["sessionId"], str)
        assert isinstance(answer["result"]["history"], list)
        for turn in answer["result"]["history"]:
            assert turn["role"] in ("user", "assistant") and isinstance(turn["content"], str)
        assert client.buffer == b""  # one line, nothing after it
        assert client.call(2, "gateway.initialize")["id"] == 2  # and the socket goes on
    finally:
        client.close()


# --- checks 2-14 over the Unix socket and over /ws ------------------------------------------------------------------


def test_2_8_9_a_query_its_reply_and_the_main_session(xeno: Xeno, gsv: GatewayClient) -> None:
    query_and_reply(xeno, 2, "r1", "PONG_X")
    # check 8: initialize shows the conversation
    snapshot = xeno.initialize(3)
    assert isinstance(snapshot["sessionId"], str) and snapshot["sessionId"]
    assert snapshot["history"][-2:] == [
        {"role": "user", "content": "reply with exactly: PONG_X"},
        {"role": "assistant", "content": "PONG_X"},
    ]
    # check 9: and so does GSV's view of the main session
    preview = gsv.call("session.preview", {"sessionKey": "main"})
    assert preview["sessionKey"] == MAIN and preview["sessionId"] == snapshot["sessionId"]
    assert [(m["role"], text_of(m)) for m in preview["messages"][-2:]] == [
        ("user", "reply with exactly: PONG_X"),
        ("assistant", "PONG_X"),
    ]


def test_gsv_clients_see_the_run_and_xeno_sockets_only_their_own_requests(
    local: GatewayProcess, fake: FakeLLM, gsv: GatewayClient
) -> None:
    first, second = UnixXeno(socket_of(local.data_dir)), WsXeno(local.url, forced=True)
    try:
        first.query(1, "mine", "reply with exactly: FOR_FIRST")
        assert first.recv() == {"jsonrpc": "2.0", "id": 1, "result": {"accepted": True}}
        assert_one_reply(first.until_done("mine"), "mine", "FOR_FIRST")
        second.query(1, "yours", "reply with exactly: FOR_SECOND")
        assert second.recv() == {"jsonrpc": "2.0", "id": 1, "result": {"accepted": True}}
        assert_one_reply(second.until_done("yours"), "yours", "FOR_SECOND")
        # neither got anything of the other's run, nor any GSV frame: the next thing each reads is its answer
        assert first.call(2, "gateway.initialize")["result"]["history"][-1]["content"] == "FOR_SECOND"
        assert second.call(2, "gateway.initialize")["id"] == 2
    finally:
        first.close()
        second.close()
    # the GSV client got both runs' chat events, as for any run of the main session
    finals: dict[str, str] = {}
    deadline = time.monotonic() + 30
    while set(finals.values()) != {"FOR_FIRST", "FOR_SECOND"}:
        event = gsv.next_event("chat", timeout=max(0.1, deadline - time.monotonic()))["payload"]
        if event["state"] == "final" and text_of(event["message"]).startswith("FOR_"):
            assert event["sessionKey"] == MAIN
            finals[event["runId"]] = text_of(event["message"])
    assert len(finals) == 2


def test_3_a_string_id_is_echoed_as_a_string(xeno: Xeno) -> None:
    assert xeno.call("a", "gateway.initialize")["id"] == "a"
    query_and_reply(xeno, "b", "r-string", "PONG_S")


def test_4_5_6_invalid_requests_get_xenos_errors_and_nothing_else(xeno: Xeno) -> None:
    rpc = {"type": "rpc"}

    def refused(params: Any, method: str = "gateway.query") -> dict[str, Any]:
        answer = xeno.call(7, method, params)
        assert set(answer) == {"jsonrpc", "id", "error"}, answer
        assert answer["error"]["code"] == -32000
        return answer["error"]

    good = {"requestId": "r-bad", "content": "hello", "context": rpc}
    assert refused({**good, "context": {"type": "console"}})["message"] == "Invalid query context type."
    assert refused({**good, "requestId": ""})["message"] == "Invalid query requestId."
    assert refused({**good, "content": "  "})["message"] == "Invalid query content."
    assert refused(5)["message"] == "Invalid query params."
    assert refused({**good, "attachments": "x"})["message"] == "Invalid query attachments payload."
    assert refused({**good, "attachments": [{"type": "image"}]})["message"] == "Invalid query attachment payload."
    assert refused({**good, "attachments": [7]})["message"] == "Invalid query attachment."
    assert refused({**good, "context": "rpc"})["message"] == "Invalid query context."
    assert refused(None, "gateway.nope") == {"code": -32000, "message": "Method not found: gateway.nope"}
    assert refused(5, "gateway.abort")["message"] == "Invalid abort params."
    assert refused([], "gateway.heartbeat")["message"] == "Invalid heartbeat params."
    assert refused("x", "gateway.new_session")["message"] == "Invalid new_session params."
    # no notifications came from any of them: the next message is the next answer
    assert xeno.call(8, "gateway.initialize")["id"] == 8


def test_7_what_gets_no_reply(xeno: Xeno) -> None:
    xeno.send_raw("this is not json")
    xeno.send({"jsonrpc": "1.0", "id": 1, "method": "gateway.initialize"})
    xeno.send({"jsonrpc": "2.0", "method": "gateway.initialize"})  # a client notification
    xeno.send({"jsonrpc": "2.0", "id": None, "method": "gateway.initialize"})
    xeno.send([{"jsonrpc": "2.0", "id": 2, "method": "gateway.initialize"}])  # a batch
    assert xeno.call(3, "gateway.initialize")["id"] == 3


def test_7_no_reply_while_the_first_frames_claim_no_dialect(local: GatewayProcess, fake: FakeLLM) -> None:
    """Without `?dialect=`: frames no dialect claims are dropped (GSV's rules) and the socket stays undecided,
    until its first xeno message makes it a xeno socket."""
    client = WsXeno(local.url)
    try:
        client.send_raw("this is not json")
        client.send({"jsonrpc": "1.0", "id": 1, "method": "gateway.initialize"})
        client.send([{"jsonrpc": "2.0", "id": 2, "method": "gateway.initialize"}])
        client.send({"jsonrpc": "2.0", "method": "gateway.initialize"})
        client.send({"jsonrpc": "2.0", "id": 3, "method": "gateway.initialize"})
        answer = client.recv()
        if answer == EXOCLAW_HELLO:  # the socket was silent a moment after its upgrade (a loaded machine)
            answer = client.recv()
        assert answer["id"] == 3 and set(answer["result"]) == {"sessionId", "history"}
        assert client.call(4, "gateway.nope")["error"]["message"] == "Method not found: gateway.nope"
    finally:
        client.close()


def test_10_two_queries_back_to_back(xeno: Xeno, fake: FakeLLM) -> None:
    fake.responder = respond_with({"HOLD_10": lambda: hang(30, then=reply("FIRST"))})
    xeno.query(1, "q1", "HOLD_10")
    xeno.query(2, "q2", "reply with exactly: SECOND")
    # frames of a socket are handled in order: once this is answered, both queries are in the session
    xeno.send({"jsonrpc": "2.0", "id": 3, "method": "gateway.ping"})
    answer, before = xeno.answer_to(3)
    assert answer["error"]["message"] == "Method not found: gateway.ping"
    assert before == [
        {"jsonrpc": "2.0", "id": 1, "result": {"accepted": True}},
        {"jsonrpc": "2.0", "id": 2, "result": {"accepted": True}},
    ]
    requested(fake, "HOLD_10")
    fake.release()
    messages = xeno.until_done("q1", "q2")
    order = [m["params"]["requestId"] for m in messages]
    assert order.index("q2") > max(i for i, r in enumerate(order) if r == "q1")  # after the first's done
    assert_one_reply([m for m in messages if m["params"]["requestId"] == "q1"], "q1", "FIRST")
    assert_one_reply([m for m in messages if m["params"]["requestId"] == "q2"], "q2", "SECOND")
    assert xeno.call(4, "gateway.initialize")["id"] == 4  # no second done came for either


def test_11_abort_ends_the_query_with_done(xeno: Xeno, fake: FakeLLM) -> None:
    fake.responder = respond_with({"SLOW_11": lambda: hang(30)})
    xeno.query(1, "slow", "SLOW_11")
    assert xeno.recv() == {"jsonrpc": "2.0", "id": 1, "result": {"accepted": True}}
    requested(fake, "SLOW_11")
    xeno.send({"jsonrpc": "2.0", "id": 2, "method": "gateway.abort"})
    answer, before = xeno.answer_to(2)
    assert answer == {"jsonrpc": "2.0", "id": 2, "result": {"ok": True}} and before == []
    messages = xeno.until_done("slow", timeout=10)
    assert messages[-1] == {"jsonrpc": "2.0", "method": "gateway.done", "params": {"requestId": "slow"}}
    for failure in notifications(messages, "gateway.error"):
        assert "abort" in failure["params"]["error"].lower()
    assert not notifications(messages, "gateway.stream")
    # the session is free again
    query_and_reply(xeno, 3, "after-abort", "AFTER_ABORT")


def test_12_a_model_failure_is_a_gateway_error_then_done(xeno: Xeno, fake: FakeLLM) -> None:
    fake.responder = respond_with({"FAIL_12": lambda: error(500, "scripted failure", retry_after=0)})
    xeno.query(1, "failing", "FAIL_12")
    assert xeno.recv() == {"jsonrpc": "2.0", "id": 1, "result": {"accepted": True}}
    messages = xeno.until_done("failing")
    assert [m["method"] for m in messages] == ["gateway.error", "gateway.done"]
    assert messages[0]["params"]["requestId"] == "failing"
    assert isinstance(messages[0]["params"]["error"], str) and messages[0]["params"]["error"].strip()


def test_13_heartbeat_is_answered_when_its_run_ends(xeno: Xeno, gsv: GatewayClient) -> None:
    answer = xeno.call(1, "gateway.heartbeat", {})["result"]
    assert isinstance(answer["ok"], bool) and isinstance(answer["message"], str)
    assert answer["ok"] is True  # heartbeats are on by default
    assert answer["message"] == "Heartbeat completed."
    assert isinstance(answer["result"], str) and answer["result"]
    assert isinstance(answer["durationMs"], int | float) and answer["durationMs"] >= 0
    # turned off: xeno's "disabled" answer, at once
    gsv.call("config.set", {"path": "agents.defaultHeartbeat.every", "value": "0m"})
    try:
        off = xeno.call(2, "gateway.heartbeat")["result"]
    finally:
        gsv.call("config.set", {"path": "agents.defaultHeartbeat.every"})
    assert off == {"ok": False, "message": "Heartbeat task is unavailable or disabled."}


def test_14_new_session_starts_a_new_main_session(xeno: Xeno, gsv: GatewayClient) -> None:
    query_and_reply(xeno, 1, "before-new", "BEFORE_NEW")
    old = xeno.initialize(2)["sessionId"]
    assert isinstance(old, str)
    answer = xeno.call(3, "gateway.new_session")["result"]
    assert answer["ok"] is True and answer["message"] == "New session task completed."
    assert isinstance(answer["result"], str) and answer["durationMs"] >= 0
    new = xeno.initialize(4)
    assert isinstance(new["sessionId"], str) and new["sessionId"] != old
    assert {"role": "assistant", "content": "BEFORE_NEW"} not in new["history"]
    history = gsv.call("session.history", {"sessionKey": "main"})
    assert history["currentSessionId"] == new["sessionId"] and old in history["previousSessionIds"]


# --- what xeno's protocol leaves to the gateway: attachments, partial streams -------------------------------------


@pytest.fixture
def unix_xeno(local: GatewayProcess, fake: FakeLLM) -> Iterator[UnixXeno]:
    """A client of the gateway's Unix socket (its peer is the gateway's own user: this test's)."""
    client = UnixXeno(socket_of(local.data_dir))
    try:
        yield client
    finally:
        client.close()


def refused_query(client: Xeno, rpc_id: Any, attachments: list[dict[str, Any]]) -> str:
    """Send a query with `attachments` that must be refused: its `gateway.error` text (then `gateway.done`)."""
    request_id = f"refused-{uuid.uuid4().hex[:6]}"
    client.query(rpc_id, request_id, "look", attachments=attachments)
    assert client.recv()["result"] == {"accepted": True}
    messages = client.until_done(request_id)
    assert [m["method"] for m in messages] == ["gateway.error", "gateway.done"], messages
    return str(messages[0]["params"]["error"])


def test_attachments_are_read_from_the_clients_disk(unix_xeno: UnixXeno, fake: FakeLLM, gsv: GatewayClient) -> None:
    xeno = unix_xeno
    files = short_dir()
    try:
        picture = files / "dot.png"
        picture.write_bytes(PNG)
        xeno.query(
            1,
            "with-image",
            "reply with exactly: SAW_IT",
            attachments=[{"type": "image", "path": str(picture), "caption": "a dot"}],
        )
        assert xeno.recv()["result"] == {"accepted": True}
        assert_one_reply(xeno.until_done("with-image"), "with-image", "SAW_IT")
        seen = requested(fake, "SAW_IT").body["messages"]
        user = [m for m in seen if m["role"] == "user"][-1]["content"]
        images = [part["image_url"]["url"] for part in user if part.get("type") == "image_url"]
        assert images == ["data:image/png;base64," + base64.b64encode(PNG).decode()]
        stored = gsv.call("session.preview", {"sessionKey": "main", "limit": 2})["messages"][0]["content"]
        assert [b["type"] for b in stored] == ["text", "image"] and stored[1]["mimeType"] == "image/png"

        # a path that cannot be read: a clear error for that request, and the socket goes on
        for rpc_id, path, why in (
            (2, files / "missing.png", "No such file or directory"),
            (3, files, "not a regular file"),
            (4, "relative/dot.png", "not absolute"),
        ):
            request_id = f"bad-{rpc_id}"
            xeno.query(rpc_id, request_id, "look", attachments=[{"type": "document", "path": str(path)}])
            assert xeno.recv()["result"] == {"accepted": True}
            messages = xeno.until_done(request_id)
            assert [m["method"] for m in messages] == ["gateway.error", "gateway.done"]
            assert str(path) in messages[0]["params"]["error"] and why in messages[0]["params"]["error"]
        assert xeno.call(5, "gateway.initialize")["id"] == 5
    finally:
        shutil.rmtree(files, ignore_errors=True)


def test_a_path_over_ws_is_refused_with_a_clear_error(local: GatewayProcess, fake: FakeLLM) -> None:
    """A loopback TCP socket may be any user of the machine: over /ws no path is read, whatever it names."""
    files = short_dir()
    client = WsXeno(local.url, forced=True)
    try:
        picture = files / "dot.png"
        picture.write_bytes(PNG)
        for rpc_id, path in ((1, str(picture)), (2, "/etc/shadow")):
            error = refused_query(client, rpc_id, [{"type": "image", "path": path, "mimeType": "image/png"}])
            assert path in error and "Unix socket" in error and "artifact:" in error, error
        assert not fake.requests  # no run started
        assert client.call(3, "gateway.initialize")["id"] == 3  # and the socket goes on
    finally:
        client.close()
        shutil.rmtree(files, ignore_errors=True)


def test_a_file_in_the_data_directory_is_never_read(local: GatewayProcess, unix_xeno: UnixXeno, fake: FakeLLM) -> None:
    files = short_dir()
    try:
        data = local.data_dir.resolve()
        inside = next(p for p in sorted(data.iterdir()) if p.is_file())  # the database, the token, …
        link = files / "innocent.png"
        link.symlink_to(inside)
        linked_dir = files / "elsewhere"
        linked_dir.symlink_to(data)
        for rpc_id, path in (
            (1, str(inside)),
            (2, str(link)),  # a link to a file in it
            (3, str(linked_dir / inside.name)),  # a path through a link to it
            (4, str(files) + "/.." * (len(files.parts) - 1) + f"{data}/{inside.name}"),  # with `..` in it
        ):
            error = refused_query(unix_xeno, rpc_id, [{"type": "document", "path": path}])
            assert path in error and "data directory" in error, error
        assert not fake.requests
    finally:
        shutil.rmtree(files, ignore_errors=True)


def test_bytes_declared_an_image_that_are_none_are_never_served_as_one(
    local: GatewayProcess, unix_xeno: UnixXeno, fake: FakeLLM, gsv: GatewayClient
) -> None:
    files = short_dir()
    try:
        secret = files / "shadow"
        secret.write_bytes(b"root:$6$not-a-picture:19000:0:99999:7:::\n")
        unix_xeno.query(
            1,
            "fake-image",
            "reply with exactly: NOT_A_PICTURE",
            attachments=[{"type": "image", "path": str(secret), "mimeType": "image/png"}],
        )
        assert unix_xeno.recv()["result"] == {"accepted": True}
        assert unix_xeno.until_done("fake-image")[-1]["method"] == "gateway.done"
        seen = requested(fake, "NOT_A_PICTURE").body["messages"]
        user = [m for m in seen if m["role"] == "user"][-1]["content"]
        assert "image_url" not in json.dumps(user)  # the model is not shown it as a picture
        stored = gsv.call("session.preview", {"sessionKey": "main", "limit": 2})["messages"][0]["content"]
        assert not [b for b in stored if isinstance(b, dict) and b.get("type") == "image"], stored
        assert "[Document attached: shadow (0KB), type: application/octet-stream]" in json.dumps(stored)
    finally:
        shutil.rmtree(files, ignore_errors=True)


def test_partials_when_configured(xeno: Xeno, fake: FakeLLM, gsv: GatewayClient) -> None:
    words = "one two three four five six seven eight"
    fake.responder = respond_with({"PARTIALS": lambda: reply(words, chunks=8, delay_per_chunk=0.05)})
    gsv.call("config.set", {"path": "xeno.partials", "value": True})
    try:
        xeno.query(1, "streamed", "PARTIALS")
        assert xeno.recv()["result"] == {"accepted": True}
        messages = xeno.until_done("streamed")
    finally:
        gsv.call("config.set", {"path": "xeno.partials"})
    streams = [m["params"] for m in notifications(messages, "gateway.stream")]
    partials = [s["content"] for s in streams if s["isPartial"]]
    assert partials and streams[-1] == {"requestId": "streamed", "content": words, "isPartial": False}
    for shorter, longer in zip(partials, [*partials[1:], words], strict=True):
        assert longer.startswith(shorter) and shorter  # cumulative
    assert messages[-1]["method"] == "gateway.done"
    # off again: the next reply comes whole only
    fake.responder = respond_with({"PARTIALS": lambda: reply(words, chunks=8, delay_per_chunk=0.05)})
    xeno.query(2, "whole", "PARTIALS again")
    assert xeno.recv()["result"] == {"accepted": True}
    assert_one_reply(xeno.until_done("whole"), "whole", words)


# --- a gateway with a token, frames handled concurrently (API Gateway's way) ----------------------------------------


def test_15_a_bearer_at_the_upgrade_passes(guarded: GatewayProcess, fake: FakeLLM) -> None:
    client = WsXeno(guarded.url, token=TOKEN)
    try:
        assert isinstance(client.initialize(1)["history"], list)
        query_and_reply(client, 2, "r1", "PONG_X")
        query_and_reply(client, "s", "r2", "PONG_Y")
    finally:
        client.close()


def test_15_no_bearer_is_unauthorized_then_closed(guarded: GatewayProcess) -> None:
    with ws_connect(guarded.url, open_timeout=10) as ws:
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "gateway.initialize"}))
        answer = json.loads(ws.recv(timeout=15))
        assert answer == {"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "Unauthorized"}}
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=15)


def test_15_a_wrong_bearer_is_refused_at_the_upgrade(guarded: GatewayProcess) -> None:
    with pytest.raises(InvalidStatus) as refused:
        ws_connect(guarded.url, additional_headers={"Authorization": "Bearer wrong"}, open_timeout=10)
    assert refused.value.response.status_code == 401


def test_several_messages_in_one_frame(guarded: GatewayProcess, fake: FakeLLM) -> None:
    client = WsXeno(guarded.url, token=TOKEN)
    try:
        query = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "gateway.query",
            "params": {"requestId": "lines", "content": "reply with exactly: LINES", "context": {"type": "rpc"}},
        }
        initialize = {"jsonrpc": "2.0", "id": 1, "method": "gateway.initialize"}
        client.send_raw(json.dumps(initialize) + "\n\n" + json.dumps(query) + "\n")  # the first frame, even
        assert client.recv()["id"] == 1
        assert client.recv() == {"jsonrpc": "2.0", "id": 2, "result": {"accepted": True}}
        assert_one_reply(client.until_done("lines"), "lines", "LINES")
        client.send_raw(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "gateway.initialize"}) + "\n")
        assert client.recv()["id"] == 3
    finally:
        client.close()


def test_10_back_to_back_with_concurrent_frames(guarded: GatewayProcess, fake: FakeLLM) -> None:
    """Frames handled in any order: whichever query runs first, the other's notifications follow its done."""
    client = WsXeno(guarded.url, token=TOKEN)
    try:
        client.query(1, "c1", "reply with exactly: ONE")
        client.query(2, "c2", "reply with exactly: TWO")
        messages = client.until_done("c1", "c2")
        acks = [m for m in messages if "id" in m]
        assert sorted(a["id"] for a in acks) == [1, 2] and all(a["result"] == {"accepted": True} for a in acks)
        order = [m["params"]["requestId"] for m in messages if "method" in m]
        first, second = order[0], ("c2" if order[0] == "c1" else "c1")
        assert order.index(second) > max(i for i, r in enumerate(order) if r == first)
        notes = [m for m in messages if "method" in m]
        assert_one_reply([m for m in notes if m["params"]["requestId"] == "c1"], "c1", "ONE")
        assert_one_reply([m for m in notes if m["params"]["requestId"] == "c2"], "c2", "TWO")
    finally:
        client.close()


def test_no_xeno_serves_no_socket(guarded: GatewayProcess) -> None:
    assert not socket_of(guarded.data_dir).exists() and not socket_of(guarded.data_dir).is_symlink()


# --- the socket file: --xeno-home, the stale-socket probe, a live socket, removal at stop ---------------------------


def test_xeno_home_stale_socket_live_socket_and_removal_at_stop(llm: FakeLLM) -> None:
    root = short_dir()
    home = root / "h"
    path = socket_of(home)
    path.parent.mkdir(parents=True)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # a socket file nobody listens on: what a crashed server leaves
    assert stat.S_ISSOCK(path.lstat().st_mode)
    gw = GatewayProcess(root / "d", token=TOKEN, extra_args=["--xeno-home", str(home)])
    other = GatewayProcess(root / "e", extra_args=["--xeno-home", str(home)])
    try:
        gw.start()
        assert not socket_of(gw.data_dir).exists()  # served in the home given, not the data directory
        assert stat.S_IMODE(path.lstat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        configure(gw, llm)
        llm.reset()
        llm.responder = rules.respond
        client = UnixXeno(path)  # the file's permissions are the guard: no token on this socket
        try:
            assert client.initialize(1)["sessionId"] is None
            query_and_reply(client, 2, "home", "FROM_HOME")
        finally:
            client.close()

        # a second gateway for the same home finds the socket alive and refuses to start, with xeno's message
        with pytest.raises(RuntimeError) as refused:
            other.start()
        assert IN_USE.format(path=path) in str(refused.value)
        live = UnixXeno(path)  # and the first one still serves it
        try:
            assert live.call(3, "gateway.initialize")["id"] == 3
        finally:
            live.close()
        assert gw.stop() == 0
        assert not path.exists() and not path.is_symlink()  # removed at stop
    finally:
        other.stop()
        gw.stop()
        llm.reset()
        shutil.rmtree(root, ignore_errors=True)
