"""`orbital xeno-bridge` end to end: a real bridge process serving xeno's Unix socket, relaying to a real `orbital dev`
with a token (its own xeno socket off), the scripted model behind it; clients are plain Unix sockets writing lines."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.client import GatewayClient

from tests.conftest import wait_for
from tests.e2e.conftest import ROOT, GatewayProcess, end
from tests.support import rules
from tests.support.agent import configure_fake_model
from tests.support.fake_llm import FakeLLM, Request, hang

TOKEN = f"xb-token-{uuid.uuid4().hex}"
TOO_LARGE = "Message too large for cloud gateway (max 128 KB)"


# --- processes and clients --------------------------------------------------------------------------------------


class BridgeProcess:
    """A real `orbital xeno-bridge` subprocess; its log lines are collected as they come."""

    def __init__(self, home: Path, url: str, token_file: Path | None, *extra: str) -> None:
        self.home = home
        self.url = url
        self.token_file = token_file
        self.extra = list(extra)
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        self._reader: threading.Thread | None = None

    @property
    def socket(self) -> Path:
        return self.home / ".xeno" / "gateway.sock"

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def launch(self) -> BridgeProcess:
        args = [sys.executable, "-m", "orbital.cli.main", "xeno-bridge", "--home", str(self.home), "--url", self.url]
        if self.token_file is not None:
            args += ["--token-file", str(self.token_file)]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ORBITAL_"))}
        # a home of its own: a token in the user's `~/.orbital` (any gateway started there) is not the test's
        env["HOME"] = str(self.home)
        self.proc = subprocess.Popen(
            [*args, *self.extra], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        self._reader = threading.Thread(target=self._collect, args=(self.proc,), daemon=True)
        self._reader.start()
        return self

    def _collect(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.lines.append(line)

    def start(self, timeout: float = 30.0) -> BridgeProcess:
        self.launch()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                self.wait_output()
                raise RuntimeError(f"bridge exited early ({self.proc.returncode}):\n{self.output}")
            if self.socket.exists() and "serving" in self.output:
                return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"bridge did not serve in time:\n{self.output}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_output(self) -> None:
        if self._reader is not None:
            self._reader.join(timeout=10)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            end(self.proc, sig, timeout)
        self.wait_output()
        if self.proc.stderr:
            self.proc.stderr.close()
        code = self.proc.returncode
        self.proc = None
        return code


class XenoClient:
    """A client of xeno's socket: JSON lines out, JSON lines in."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(path))
        self.buffer = b""
        self.unread: deque[dict[str, Any]] = deque()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def send(self, message: dict[str, Any] | str) -> None:
        text = message if isinstance(message, str) else json.dumps(message)
        self.sock.sendall(text.encode() + b"\n")

    def read(self, timeout: float = 20.0) -> dict[str, Any]:
        """The next message (AssertionError when none comes in time, EOFError when the socket closes)."""
        if self.unread:
            return self.unread.popleft()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("no message in time")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                continue
            if not data:
                raise EOFError("the socket closed")
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message

    def eof(self, timeout: float = 10.0) -> bool:
        """Whether the socket is closed by the other side within `timeout` (nothing else may arrive)."""
        try:
            message = self.read(timeout)
        except EOFError:
            return True
        raise AssertionError(f"unexpected message: {message}")

    def request(self, rpc_id: Any, method: str, params: Any = None, timeout: float = 20.0) -> dict[str, Any]:
        """Send a request and return its answer; notifications that arrive first are kept for later reads."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rpc_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self.answer(rpc_id, timeout)

    def answer(self, rpc_id: Any, timeout: float = 20.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        kept: list[dict[str, Any]] = []
        try:
            while True:
                message = self.read(max(0.01, deadline - time.monotonic()))
                if "method" not in message and message.get("id") == rpc_id:
                    return message
                kept.append(message)
        finally:
            self.unread.extendleft(reversed(kept))

    def run(self, request_id: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The notifications of one query, up to its `gateway.done`."""
        deadline = time.monotonic() + timeout
        notes: list[dict[str, Any]] = []
        while True:
            message = self.read(max(0.01, deadline - time.monotonic()))
            notes.append(message)
            if message.get("method") == "gateway.done" and message["params"]["requestId"] == request_id:
                return notes


def query(content: str, request_id: str) -> dict[str, Any]:
    return {"requestId": request_id, "content": content, "context": {"type": "rpc", "channelId": "default"}}


def final_content(notes: list[dict[str, Any]], request_id: str) -> str:
    """The one final `gateway.stream` of a run, after checking that its notifications are its own and end in done."""
    assert all(n.get("params", {}).get("requestId") == request_id for n in notes), notes
    assert notes[-1]["method"] == "gateway.done"
    finals = [n for n in notes if n["method"] == "gateway.stream" and n["params"]["isPartial"] is False]
    assert len(finals) == 1, notes
    content: str = finals[0]["params"]["content"]
    return content


# --- fixtures ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        server.responder = rules.respond
        yield server


def configure(gw: GatewayProcess, llm: FakeLLM) -> None:
    with GatewayClient(gw.url, timeout=15) as admin:
        admin.connect("client", "xbridge-admin", token=TOKEN)
        configure_fake_model(admin, llm.base_url)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory, llm: FakeLLM) -> Iterator[GatewayProcess]:
    """The gateway the bridge relays to: a token, and no xeno socket of its own."""
    gw = GatewayProcess(tmp_path_factory.mktemp("xbridge") / "data", token=TOKEN, extra_args=["--no-xeno"]).start()
    try:
        configure(gw, llm)
        yield gw
    finally:
        gw.stop()


@contextlib.contextmanager
def short_dir() -> Iterator[Path]:
    """A directory with a short path (a Unix socket's path is limited to about 108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="xb-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def home() -> Iterator[Path]:
    with short_dir() as path:
        yield path


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("xbridge-token") / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def bridge(upstream: GatewayProcess, token_file: Path) -> Iterator[BridgeProcess]:
    with short_dir() as directory:
        started = BridgeProcess(directory, upstream.url, token_file).start()
        try:
            yield started
        finally:
            started.stop()


@pytest.fixture
def clients(bridge: BridgeProcess) -> Iterator[Any]:
    opened: list[XenoClient] = []

    def make(path: Path | None = None) -> XenoClient:
        client = XenoClient(path or bridge.socket)
        opened.append(client)
        return client

    yield make
    for client in opened:
        client.close()


def new_id() -> str:
    return f"r-{uuid.uuid4().hex[:8]}"


# --- through the bridge -----------------------------------------------------------------------------------------


def test_the_socket_is_its_owners_alone(bridge: BridgeProcess) -> None:
    assert stat.S_ISSOCK(bridge.socket.lstat().st_mode)
    assert stat.S_IMODE(bridge.socket.stat().st_mode) == 0o600
    assert stat.S_IMODE(bridge.socket.parent.stat().st_mode) == 0o700


def test_initialize_and_a_query_through_the_bridge(clients: Any) -> None:
    client = clients()
    first = client.request(1, "gateway.initialize")
    assert first["jsonrpc"] == "2.0" and first["id"] == 1
    assert set(first["result"]) == {"sessionId", "history"} and isinstance(first["result"]["history"], list)

    request_id = new_id()
    accepted = client.request(2, "gateway.query", query("reply with exactly: PONG_XB", request_id))
    assert accepted == {"jsonrpc": "2.0", "id": 2, "result": {"accepted": True}}
    notes = client.run(request_id)
    assert final_content(notes, request_id) == "PONG_XB"
    assert [n["method"] for n in notes] == ["gateway.stats", "gateway.stream", "gateway.done"]

    later = client.request("a", "gateway.initialize")
    assert later["id"] == "a" and isinstance(later["result"]["sessionId"], str)
    assert later["result"]["history"][-2:] == [
        {"role": "user", "content": "reply with exactly: PONG_XB"},
        {"role": "assistant", "content": "PONG_XB"},
    ]


def test_an_attachment_is_uploaded_and_sent_as_an_artifact(
    clients: Any, upstream: GatewayProcess, llm: FakeLLM, tmp_path: Path
) -> None:
    """The bridge uploads the file to the gateway's HTTP API and sends `artifact:{id}`: the run's media is the
    uploaded artifact (a media object of its own, not a copy in the session's media), shown to the model."""
    picture = tmp_path / "dot.png"
    png = b"\x89PNG\r\n\x1a\n" + os.urandom(48)
    picture.write_bytes(png)
    client = clients()
    request_id = new_id()
    params = query("reply with exactly: GOT_IT", request_id)
    params["attachments"] = [{"type": "image", "path": str(picture), "mimeType": "image/png"}]
    assert client.request(7, "gateway.query", params)["result"] == {"accepted": True}
    assert final_content(client.run(request_id), request_id) == "GOT_IT"
    assert base64.b64encode(png).decode() in json.dumps(llm.requests[-1].body)

    with GatewayClient(upstream.url, timeout=15) as admin:
        admin.connect("client", "xbridge-preview", token=TOKEN)
        preview = admin.call("session.preview", {"sessionKey": "agent:main:main", "limit": 4})
    keys = re.findall(r'"r2Key": ?"([^"]+)"', json.dumps(preview))
    assert keys and re.fullmatch(r"media/[0-9a-f-]{36}\.png", keys[-1]), preview
    artifact_id = keys[-1].removeprefix("media/")
    media = f"http://127.0.0.1:{upstream.port}/media/{artifact_id}"
    with pytest.raises(urllib.error.HTTPError) as private:
        urllib.request.urlopen(media, timeout=10)  # an upload with the gateway token is private: no public link
    assert private.value.code == 404
    with urllib.request.urlopen(urllib.request.Request(media, headers={"Authorization": f"Bearer {TOKEN}"})) as got:
        assert got.read() == png  # the token reads it


def test_several_clients_at_once_each_get_their_own_frames(clients: Any) -> None:
    """Both use id 1: each has a gateway socket of its own, so answers and notifications need no routing."""
    one, two = clients(), clients()
    first, second = new_id(), new_id()
    one.send({"jsonrpc": "2.0", "id": 1, "method": "gateway.query", "params": query("reply with exactly: ONE", first)})
    two.send({"jsonrpc": "2.0", "id": 1, "method": "gateway.query", "params": query("reply with exactly: TWO", second)})
    assert one.answer(1)["result"] == {"accepted": True}
    assert two.answer(1)["result"] == {"accepted": True}
    assert final_content(one.run(first), first) == "ONE"
    assert final_content(two.run(second), second) == "TWO"


def test_a_large_message_goes_in_fragments(clients: Any) -> None:
    """Over 32 KB in one frame the gateway would close the socket (1009), as API Gateway does."""
    client = clients()
    payload = "LARGE:" + "".join(f"{i:06d}-abcdefghij " for i in range(2_600))
    assert 40_000 < len(payload) < 100_000
    request_id = new_id()
    accepted = client.request(3, "gateway.query", query(f"reply with exactly: {payload}", request_id))
    assert accepted["result"] == {"accepted": True}
    assert final_content(client.run(request_id), request_id) == payload.strip()


def test_a_message_over_128_kb_is_refused_locally(clients: Any, llm: FakeLLM) -> None:
    client = clients()
    asked = len(llm.requests)
    request_id = new_id()
    refused = client.request(7, "gateway.query", query("reply with exactly: " + "x" * 132_000, request_id))
    assert refused == {"jsonrpc": "2.0", "id": 7, "error": {"code": -32000, "message": TOO_LARGE}}
    # the socket and its gateway connection go on; nothing of the refused query reached the gateway
    assert client.request(8, "gateway.initialize")["id"] == 8
    assert len(llm.requests) == asked
    assert not client.unread


# --- the token --------------------------------------------------------------------------------------------------


def test_a_wrong_token_gets_a_clear_error_and_the_bridge_keeps_running(
    upstream: GatewayProcess, home: Path, tmp_path: Path
) -> None:
    wrong = f"wrong-{uuid.uuid4().hex}"
    token_path = tmp_path / "token"
    token_path.write_text(wrong)
    token_path.chmod(0o600)
    bridge = BridgeProcess(home, upstream.url, token_path).start()
    try:
        for rpc_id in (1, 2):
            client = XenoClient(bridge.socket)
            try:
                answer = client.request(rpc_id, "gateway.initialize")
            finally:
                client.close()
            assert answer["id"] == rpc_id and answer["error"]["code"] == -32000
            message = answer["error"]["message"]
            assert "refused the token" in message and "401" in message, message
        assert bridge.alive() and bridge.socket.exists()

        # the file is read again at each connection attempt: corrected, it works without a restart
        token_path.write_text(TOKEN)
        client = XenoClient(bridge.socket)
        try:
            assert "result" in client.request(3, "gateway.initialize")
        finally:
            client.close()
    finally:
        assert bridge.stop() == 0
    assert wrong not in bridge.output and TOKEN not in bridge.output
    assert "refused the token" in bridge.output


def test_no_token_for_a_gateway_that_needs_one(upstream: GatewayProcess, home: Path) -> None:
    """The gateway answers the request itself (`Unauthorized`) and closes the socket; the bridge goes on. (A request
    sent while that close is on its way gets the bridge's error for the lost connection, which says why.)"""
    bridge = BridgeProcess(home, upstream.url, None).start()
    try:
        client = XenoClient(bridge.socket)
        try:
            assert client.request(1, "gateway.initialize")["error"] == {"code": -32000, "message": "Unauthorized"}
            for rpc_id in (2, 3):
                answer = client.request(rpc_id, "gateway.initialize")
                assert answer["error"]["code"] == -32000 and "Unauthorized" in answer["error"]["message"], answer
        finally:
            client.close()
        assert bridge.alive()
    finally:
        assert bridge.stop() == 0


# --- the gateway going away -------------------------------------------------------------------------------------


def test_the_gateway_restarting(llm: FakeLLM, tmp_path: Path, home: Path, token_file: Path) -> None:
    """Stopped: a run in flight ends with gateway.error + done, a request gets an error. Started again on its port:
    requests work again, the bridge never restarted."""
    gw = GatewayProcess(tmp_path / "data", token=TOKEN, extra_args=["--no-xeno"]).start()
    bridge: BridgeProcess | None = None

    def held(request: Request) -> Any:
        user = [m for m in request.body.get("messages", []) if m.get("role") == "user"]
        if user and "HOLD_XB" in str(user[-1].get("content")):
            return hang(max_s=20)
        return rules.respond(request)

    try:
        configure(gw, llm)
        bridge = BridgeProcess(home, gw.url, token_file).start()
        client = XenoClient(bridge.socket)
        assert "result" in client.request(1, "gateway.initialize")

        llm.responder = held
        request_id = new_id()
        asked = len(llm.requests)
        assert client.request(2, "gateway.query", query("HOLD_XB", request_id))["result"] == {"accepted": True}
        wait_for(lambda: len(llm.requests) > asked, timeout=20)
        port = gw.port
        gw.stop()
        llm.release()

        notes = client.run(request_id, timeout=30)
        assert [n["method"] for n in notes] == ["gateway.error", "gateway.done"]
        assert "lost" in notes[0]["params"]["error"]

        down = client.request(3, "gateway.initialize")
        assert down["error"]["code"] == -32000 and "unavailable" in down["error"]["message"], down
        other = XenoClient(bridge.socket)  # a client that comes while the gateway is down
        assert other.request(1, "gateway.initialize")["error"]["code"] == -32000
        assert bridge.alive() and bridge.socket.exists()

        gw.start(port=port)
        llm.responder = rules.respond
        ids = iter(range(100, 10_000))

        def answered() -> bool:
            return "result" in client.request(next(ids), "gateway.initialize")

        wait_for(answered, timeout=60, interval=0.2)
        request_id = new_id()
        assert client.request(4, "gateway.query", query("reply with exactly: BACK_XB", request_id))["result"]
        assert final_content(client.run(request_id), request_id) == "BACK_XB"
        assert "result" in other.request(2, "gateway.initialize")
        client.close()
        other.close()
    finally:
        llm.responder = rules.respond
        llm.release()
        if bridge is not None:
            assert bridge.stop() == 0
        gw.stop()


# --- the socket's life ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_removes_the_socket(upstream: GatewayProcess, home: Path, token_file: Path, sig: int) -> None:
    bridge = BridgeProcess(home, upstream.url, token_file).start()
    client = XenoClient(bridge.socket)
    try:
        assert "result" in client.request(1, "gateway.initialize")
        assert bridge.stop(sig) == 0
        assert not bridge.socket.exists()
        assert client.eof()
    finally:
        client.close()
        bridge.stop()


def test_a_stale_socket_is_replaced_and_a_live_one_refused(
    upstream: GatewayProcess, home: Path, token_file: Path
) -> None:
    path = home / ".xeno" / "gateway.sock"
    path.parent.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # a socket file nobody serves, as a killed process leaves it
    bridge = BridgeProcess(home, upstream.url, token_file).start()
    try:
        client = XenoClient(bridge.socket)
        try:
            assert "result" in client.request(1, "gateway.initialize")
        finally:
            client.close()
        second = BridgeProcess(home, upstream.url, token_file).launch()
        assert second.proc is not None
        assert second.proc.wait(timeout=30) == 2
        second.wait_output()
        assert f"Gateway RPC socket already in use at {path}. Is another serve process running?" in second.output
        second.stop()
        assert bridge.alive() and bridge.socket.exists()
    finally:
        assert bridge.stop() == 0


def test_keepalives_flow_and_stay_out_of_the_clients_way(
    upstream: GatewayProcess, home: Path, token_file: Path
) -> None:
    bridge = BridgeProcess(home, upstream.url, token_file, "--keepalive", "0.2", "-v").start()
    try:
        client = XenoClient(bridge.socket)
        try:
            assert "result" in client.request(1, "gateway.initialize")
            wait_for(lambda: bridge.output.count("keepalive answered") >= 3, timeout=20)
            assert "result" in client.request(2, "gateway.initialize")
            assert not client.unread  # nothing but the answers came
        finally:
            client.close()
    finally:
        assert bridge.stop() == 0
    assert TOKEN not in bridge.output  # not even in debug logging
