"""The real node agent against a scripted gateway (a small WebSocket server written here that plays the gateway).

Covers the connect handshake, tool round trips, probes, logs.get, transfers in both roles and framings (and via
presigned URLs), transfer.abort, reconnects, the outbox, exec events, keepalive, fatal refusals and the CLI process.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import http.server
import json
import os
import random
import re
import signal
import struct
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from orbital.domain.capabilities import validate_node_runtime
from orbital.node.agent import NodeAgent
from orbital.node.options import NodeOptions
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from tests.conftest import wait_for_async

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX shell semantics")

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 10.0
GATED = "while [ ! -f gate ]; do sleep 0.02; done; echo "  # a command that runs until the test creates `gate`
TOOL_NAMES = ["Bash", "Process", "Read", "Write", "Edit", "Glob", "Grep"]


@pytest.fixture(autouse=True)
def _plain_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHELL", "/bin/sh")  # no login-profile start-up cost per command


# -- the scripted gateway ------------------------------------------------------------------------------------------


class GatewaySocket:
    """One node connection as the gateway sees it: everything the node sent, and ways to answer."""

    def __init__(self, ws: ServerConnection) -> None:
        self.ws = ws
        self.inbox: list[Any] = []
        self.changed = asyncio.Event()
        self.closed = asyncio.Event()
        self._ids = 0

    async def pump(self) -> None:
        try:
            async for message in self.ws:
                self.inbox.append(message if isinstance(message, bytes) else json.loads(message))
                self.changed.set()
        except ConnectionClosed:
            pass
        finally:
            self.closed.set()
            self.changed.set()

    async def take(self, match: Callable[[Any], bool], what: str, timeout: float = WAIT_S) -> Any:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            for i, item in enumerate(self.inbox):
                if match(item):
                    return self.inbox.pop(i)
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise AssertionError(f"node did not send {what}; got {self.inbox!r}"[:2000])
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), remaining)

    async def req(self, method: str, timeout: float = WAIT_S) -> dict[str, Any]:
        def match(item: Any) -> bool:
            return isinstance(item, dict) and item.get("type") == "req" and item.get("method") == method

        frame: dict[str, Any] = await self.take(match, f"a {method} request", timeout)
        return frame

    async def next_req(self) -> dict[str, Any]:
        frame: dict[str, Any] = await self.take(lambda i: isinstance(i, dict) and i.get("type") == "req", "any request")
        return frame

    async def reply(self, req: dict[str, Any], payload: Any = None, *, error: tuple[int, str] | None = None) -> None:
        frame: dict[str, Any] = {"type": "res", "id": req["id"], "ok": error is None}
        if error is None:
            frame["payload"] = payload if payload is not None else {"ok": True}
        else:
            frame["error"] = {"code": error[0], "message": error[1]}
        await self.ws.send(json.dumps(frame))

    async def call_and_ok(self, method: str) -> dict[str, Any]:
        frame = await self.req(method)
        await self.reply(frame)
        params: dict[str, Any] = frame.get("params") or {}
        return params

    async def event(self, name: str, payload: dict[str, Any]) -> None:
        await self.ws.send(json.dumps({"type": "evt", "event": name, "payload": payload}))

    async def accept_connect(self, **features: Any) -> dict[str, Any]:
        req = await self.req("connect")
        await self.reply(
            req,
            {
                "type": "hello-ok",
                "protocol": 1,
                "server": {"version": "test", "connectionId": f"conn-{id(self)}"},
                "features": {"methods": [], "events": [], **features},
            },
        )
        params: dict[str, Any] = req["params"]
        return params

    async def invoke(self, call_id: str, tool: str, args: dict[str, Any] | None) -> dict[str, Any]:
        await self.event("tool.invoke", {"callId": call_id, "tool": tool, "args": args})
        return await self.result(call_id)

    async def result(self, call_id: str) -> dict[str, Any]:
        frame = await self.take(
            lambda i: isinstance(i, dict) and i.get("method") == "tool.result" and i["params"]["callId"] == call_id,
            f"tool.result for {call_id}",
        )
        await self.reply(frame)
        params: dict[str, Any] = frame.get("params") or {}
        return params


class ScriptedGateway:
    def __init__(self) -> None:
        self.sockets: asyncio.Queue[GatewaySocket] = asyncio.Queue()
        self.url = ""
        self._server: Any = None

    async def __aenter__(self) -> ScriptedGateway:
        self._server = await serve(self._handler, "127.0.0.1", 0, max_size=None, compression=None)
        port = next(iter(self._server.sockets)).getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}/ws"
        return self

    async def __aexit__(self, *_: Any) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def _handler(self, ws: ServerConnection) -> None:
        sock = GatewaySocket(ws)
        await self.sockets.put(sock)
        await sock.pump()

    async def next_socket(self, timeout: float = WAIT_S) -> GatewaySocket:
        return await asyncio.wait_for(self.sockets.get(), timeout)


Scenario = Callable[[ScriptedGateway, NodeAgent], Awaitable[None]]


def run_node(tmp_path: Path, scenario: Scenario, *, expect_exit: int = 0, **options: Any) -> NodeAgent:
    """Start a gateway and a real node agent, play the scenario, then stop the node (Ctrl-C path)."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    holder: dict[str, NodeAgent] = {}

    async def main() -> None:
        async with ScriptedGateway() as gateway:
            settings: dict[str, Any] = {
                "node_id": "node-test",
                "workspace": workspace,
                "log_file": tmp_path / "node.log",
                "keepalive": 0,
                "backoff_base": 0.05,
                "flush_interval": 0.05,
            }
            settings.update(options)
            agent = NodeAgent(NodeOptions(url=gateway.url, **settings))
            holder["agent"] = agent
            task = asyncio.create_task(agent.run())
            try:
                await scenario(gateway, agent)
            finally:
                agent.request_stop()
                code = await asyncio.wait_for(task, WAIT_S)
            assert code == expect_exit

    asyncio.run(main())
    return holder["agent"]


# -- handshake and tools ---------------------------------------------------------------------------------------------


def test_connect_registers_tools_and_runtime(tmp_path: Path) -> None:
    async def scenario(gateway: ScriptedGateway, agent: NodeAgent) -> None:
        sock = await gateway.next_socket()
        params = await sock.accept_connect()
        assert params["minProtocol"] == 1
        assert params["client"]["mode"] == "node"
        assert params["client"]["id"] == "node-test"
        assert params["auth"] == {"token": "tok-123"}
        assert [t["name"] for t in params["tools"]] == TOOL_NAMES
        runtime = params["nodeRuntime"]
        validate_node_runtime("node-test", runtime, TOOL_NAMES)
        assert runtime["hostRole"] == "execution"
        assert "hostBinStatus" not in runtime
        await wait_for_async(lambda: agent.online, WAIT_S, what="the node to be online")

    run_node(tmp_path, scenario, token="tok-123")


def test_tool_round_trip_and_concurrency(tmp_path: Path) -> None:
    async def scenario(gateway: ScriptedGateway, agent: NodeAgent) -> None:
        sock = await gateway.next_socket()
        await sock.accept_connect()
        written = await sock.invoke("c1", "Write", {"path": "hello.txt", "content": "test content\nline 2"})
        assert written == {"callId": "c1", "result": {"path": str(agent.workspace / "hello.txt"), "bytes": 19}}
        read = await sock.invoke("c2", "Read", {"path": "hello.txt"})
        assert read["result"]["content"] == "     1\ttest content\n     2\tline 2"
        missing = await sock.invoke("c3", "Nope", {})
        assert missing == {"callId": "c3", "error": "Tool not found: Nope"}
        failed = await sock.invoke("c4", "Read", {"path": "absent.txt"})
        assert failed["error"].startswith("Failed to read '")
        no_args = await sock.invoke("c5", "Glob", None)
        assert no_args == {"callId": "c5", "error": "pattern is required"}

        # a background command's exec events follow the tool.result that announced its session
        await sock.event(
            "tool.invoke", {"callId": "bg", "tool": "Bash", "args": {"command": "exit 0", "background": True}}
        )
        sequence = []
        for _ in range(3):
            frame = await sock.next_req()
            await sock.reply(frame)
            sequence.append((frame["method"], frame["params"].get("event")))
        assert sequence == [("tool.result", None), ("node.exec.event", "started"), ("node.exec.event", "finished")]

        # a blocking command does not hold up other events: the Write that releases it is served meanwhile
        await sock.event(
            "tool.invoke",
            {"callId": "slow", "tool": "Bash", "args": {"command": GATED + "ok"}},
        )
        opened = await sock.invoke("fast", "Write", {"path": "gate", "content": ""})
        assert opened["result"]["bytes"] == 0
        slow = await sock.result("slow")
        assert slow["result"]["status"] == "completed"
        assert slow["result"]["output"] == "ok\n"

    run_node(tmp_path, scenario)


def test_probe_bins(tmp_path: Path) -> None:
    async def scenario(gateway: ScriptedGateway, agent: NodeAgent) -> None:
        sock = await gateway.next_socket()
        await sock.accept_connect()
        bins = ["sh", "orbital-no-such-binary-xyz", "bad name;rm", "/bin/sh", "/no/such/tool"]
        await sock.event("node.probe", {"probeId": "p1", "kind": "bins", "bins": bins, "timeoutMs": 5000})
        result = await sock.call_and_ok("node.probe.result")
        assert result == {
            "probeId": "p1",
            "ok": True,
            "bins": {
                "sh": True,
                "orbital-no-such-binary-xyz": False,
                "bad name;rm": False,
                "/bin/sh": True,
                "/no/such/tool": False,
            },
        }
        await sock.event("node.probe", {"probeId": "p2", "kind": "env", "bins": []})
        other = await sock.call_and_ok("node.probe.result")
        assert other == {"probeId": "p2", "ok": False, "error": "Unsupported probe kind: env"}

    run_node(tmp_path, scenario)


def test_logs_get(tmp_path: Path) -> None:
    log_file = tmp_path / "node.log"
    log_file.write_text("".join(json.dumps({"n": i}) + "\n" for i in range(10)))

    async def scenario(gateway: ScriptedGateway, agent: NodeAgent) -> None:
        sock = await gateway.next_socket()
        await sock.accept_connect()
        await sock.event("logs.get", {"callId": "l1", "lines": 3})
        assert await sock.call_and_ok("logs.result") == {
            "callId": "l1",
            "lines": ['{"n": 7}', '{"n": 8}', '{"n": 9}'],
            "truncated": True,
        }
        await sock.event("logs.get", {"callId": "l2"})
        everything = await sock.call_and_ok("logs.result")
        assert len(everything["lines"]) == 10
        assert everything["truncated"] is False
        await sock.event("logs.get", {"callId": "l3", "lines": 0})
        assert (await sock.call_and_ok("logs.result"))["lines"] == ['{"n": 9}']
        log_file.unlink()
        await sock.event("logs.get", {"callId": "l4", "lines": 5})
        assert await sock.call_and_ok("logs.result") == {
            "callId": "l4",
            "error": f"Failed to open '{log_file}': No such file or directory",
        }

    run_node(tmp_path, scenario, log_file=log_file)


async def play_save(sock: GatewaySocket, transfer_id: int, refuse: tuple[int, str] | None = None) -> tuple[Any, bytes]:
    """Play the gateway's side of a node saving a tool result: its transfer.request, the transfer from the node's
    file, the answer. Returns the request's params and the bytes the node sent."""
    request = await sock.req("transfer.request")
    if refuse is not None:
        await sock.reply(request, error=refuse)
        return request["params"], b""
    source = request["params"]["source"]
    await sock.event("transfer.send", {"transferId": transfer_id, "path": source.split(":", 1)[1], "mode": "chunks"})
    await sock.reply(await sock.req("transfer.meta"))
    await sock.event("transfer.start", {"transferId": transfer_id})
    complete = await sock.req("transfer.complete")
    await sock.reply(complete)
    data = b"".join(sock.inbox.pop(i)[4:] for i in reversed(range(len(sock.inbox))) if isinstance(sock.inbox[i], bytes))
    destination = request["params"]["destination"]
    await sock.reply(request, {"source": source, "destination": destination, "bytesTransferred": len(data)})
    assert complete["params"]["bytesSent"] == len(data)
    return request["params"], data


def test_results_fit_the_limit_the_gateway_advertises(tmp_path: Path) -> None:
    """A gateway that says it takes 5000 bytes a message: a larger result is saved whole through a transfer and
    answered with a preview that points there (or that says why saving failed); logs keep their newest lines."""
    (tmp_path / "ws").mkdir()
    wide = "".join(f"{i:04d} {'w' * 94}\n" for i in range(100))
    (tmp_path / "ws" / "wide.txt").write_text(wide)
    (tmp_path / "node.log").write_text("".join(json.dumps({"n": i, "pad": "p" * 200}) + "\n" for i in range(100)))
    temporary: list[str] = []

    async def scenario(gateway: ScriptedGateway, agent: NodeAgent) -> None:
        sock = await gateway.next_socket()
        await sock.accept_connect(limits={"maxMessageBytes": 5000, "maxFrameBytes": 1000})
        await wait_for_async(lambda: agent.message_limit() == 5000, WAIT_S, what="the advertised limit")
        command = "head -c 20000 /dev/zero | tr '\\0' x; echo END"
        await sock.event("tool.invoke", {"callId": "big", "tool": "Bash", "args": {"command": command}})
        request, saved = await play_save(sock, 1)
        assert request["callId"] == "big" and request["destination"] == "gsv:tool-results/big.txt"
        assert request["source"].startswith("node-test:")
        temporary.append(request["source"].split(":", 1)[1])
        assert saved == b"x" * 20000 + b"END\n"  # the whole output, byte for byte
        frame = await sock.req("tool.result")
        await sock.reply(frame)
        assert len(json.dumps(frame)) <= 5000
        result = frame["params"]["result"]
        assert result["truncated"] is True
        assert result["output"].endswith("xxxxEND\n") and 0 < len(result["output"]) < 20004
        assert result["exitCode"] == 0
        assert result["fullOutput"] == {"path": "gsv:tool-results/big.txt", "bytes": 20004}
        assert "gsv:tool-results/big.txt" in result["note"] and "gsv__ReadFile" in result["note"]

        # saving refused: the preview still comes, with the reason
        await sock.event("tool.invoke", {"callId": "read", "tool": "Read", "args": {"path": "wide.txt"}})
        request, _ = await play_save(sock, 2, refuse=(403, "not here"))
        temporary.append(request["source"].split(":", 1)[1])
        read = await sock.result("read")
        content = read["result"]["content"]
        assert content.startswith("     1\t0000 www") and content.endswith("w")  # whole lines, the first ones
        assert read["result"]["lines"] == content.count("\n") + 1 < 100
        assert "fullOutput" not in read["result"]
        assert read["result"]["note"].endswith(
            "Saving the full output in the agent workspace failed: 403 not here. Read takes offset and limit "
            "(lines) to read on after the last line shown."
        )

        await sock.event("logs.get", {"callId": "logs", "lines": 100})
        logs = await sock.req("logs.result")
        await sock.reply(logs)
        assert len(json.dumps(logs)) <= 5000
        assert logs["params"]["truncated"] is True
        assert json.loads(logs["params"]["lines"][-1])["n"] == 99
        assert 0 < len(logs["params"]["lines"]) < 100

    run_node(tmp_path, scenario)
    assert temporary and not [p for p in temporary if Path(p).exists()]  # the temporary files are gone


@pytest.mark.atomic_table  # a node answers at once: its answer races the turn's wait registering its token
def test_an_unsendable_message_is_dropped_not_sent_and_not_sent_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A message over the gateway's limit (here a gateway that takes 4000 bytes, and results handed to `deliver`
    unfitted) is dropped with a log line: never sent, whether at once or from the outbox after a reconnect, and
    not sent again after the next one. What follows it in the outbox still goes out."""

    def result(call_id: str, size: int) -> dict[str, Any]:
        return {"callId": call_id, "result": "x" * size}

    async def scenario(gateway: ScriptedGateway, agent: NodeAgent) -> None:
        first = await gateway.next_socket()
        await first.accept_connect(limits={"maxMessageBytes": 4000})
        await wait_for_async(
            lambda: agent.online and agent.message_limit() == 4000, WAIT_S, what="the advertised limit"
        )
        await agent.deliver("tool.result", result("huge-now", 10_000))
        assert not agent.outbox
        await first.ws.close(1012, "restart")
        await wait_for_async(lambda: not agent.online, WAIT_S, what="the node to notice")
        await agent.deliver("tool.result", result("huge-later", 10_000))
        await agent.deliver("tool.result", result("small", 100))
        assert [item.params["callId"] for item in agent.outbox] == ["huge-later", "small"]
        second = await gateway.next_socket()
        await second.accept_connect(limits={"maxMessageBytes": 4000})
        assert (await second.result("small"))["result"] == "x" * 100
        await wait_for_async(lambda: not agent.outbox, WAIT_S, what="an empty outbox")
        await second.ws.close(1012, "restart")
        third = await gateway.next_socket()
        await third.accept_connect(limits={"maxMessageBytes": 4000})
        assert (await third.invoke("after", "Bash", {"command": "echo after"}))["result"]["output"] == "after\n"
        sent = [i for sock in (first, second, third) for i in sock.inbox if isinstance(i, dict)]
        assert not [i for i in sent if i.get("method") == "tool.result"]  # only the ones taken above

    run_node(tmp_path, scenario)
    dropped = [r.getMessage() for r in caplog.records if r.getMessage().startswith("dropping ")]
    pattern = (
        r"dropping tool.result for call (huge-now|huge-later): tool.result of 101\d\d bytes exceeds the gateway's "
        r"limit of 4000 bytes per message; it can never be sent"
    )
    assert [re.fullmatch(pattern, m).group(1) for m in dropped] == ["huge-now", "huge-later"]  # type: ignore[union-attr]


# -- transfers -------------------------------------------------------------------------------------------------------


def payload_bytes(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


@pytest.mark.parametrize("binary_frames", [True, False], ids=["binary-frames", "text-frames"])
def test_transfer_as_source_chunks(tmp_path: Path, binary_frames: bool) -> None:
    data = payload_bytes(200_003, 1)
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "photo.dat").write_bytes(data)

    async def scenario(gateway: ScriptedGateway, agent: NodeAgent) -> None:
        sock = await gateway.next_socket()
        await sock.accept_connect()
        await sock.event("transfer.send", {"transferId": 7, "path": "photo.dat", "mode": "chunks"})
        meta = await sock.req("transfer.meta")
        assert meta["params"] == {"transferId": 7, "size": len(data)}
        # the start signal may overtake the answer to transfer.meta
        await sock.event("transfer.start", {"transferId": 7})
        await sock.reply(meta)
        complete = await sock.req("transfer.complete")
        assert complete["params"] == {"transferId": 7, "bytesSent": len(data)}
        await sock.reply(complete)
        received = bytearray(len(data))
        total = 0
        chunks = [i for i in sock.inbox if isinstance(i, bytes) or (isinstance(i, dict) and i.get("type") == "bin")]
        assert chunks, "no chunks"
        for chunk in chunks:
            if binary_frames:
                assert isinstance(chunk, bytes)
                (tid,) = struct.unpack_from("<I", chunk)
                body, offset = chunk[4:], total
            else:
                assert isinstance(chunk, dict)
                tid, body, offset = chunk["transferId"], base64.b64decode(chunk["data"]), chunk["offset"]
            assert tid == 7
            assert 0 < len(body) <= (256 if binary_frames else 64) * 1024
            received[offset : offset + len(body)] = body
            total += len(body)
        assert total == len(data)
        assert hashlib.sha256(received).hexdigest() == hashlib.sha256(data).hexdigest()

    run_node(tmp_path, scenario, binary_frames=None if binary_frames else False)


def test_transfer_source_missing_file_and_mime(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "pic").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)

    async def scenario(gateway: ScriptedGateway, agent: NodeAgent) -> None:
        sock = await gateway.next_socket()
        await sock.accept_connect()
        await sock.event("transfer.send", {"transferId": 3, "path": "nothing.bin", "mode": "chunks"})
        missing = await sock.call_and_ok("transfer.meta")
        assert missing == {
            "transferId": 3,
            "size": 0,
            "error": f"Failed to read file {agent.workspace / 'nothing.bin'}: No such file or directory",
        }
        await sock.event("transfer.send", {"transferId": 4, "path": "pic", "mode": "chunks"})
        meta = await sock.call_and_ok("transfer.meta")
        assert meta == {"transferId": 4, "size": 48, "mime": "image/png"}
        await sock.event("transfer.abort", {"transferId": 4, "error": "test over"})

    run_node(tmp_path, scenario)


def chunk_frame(tid: int, data: bytes, offset: int) -> str:
    return json.dumps({"type": "bin", "transferId": tid, "offset": offset, "data": base64.b64encode(data).decode()})


@pytest.mark.parametrize("binary_frames", [True, False], ids=["binary-frames", "text-frames"])
def test_transfer_as_destination(tmp_path: Path, binary_frames: bool) -> None:
    data = payload_bytes(150_000, 2)
    pieces = [(off, data[off : off + 20_000]) for off in range(0, len(data), 20_000)]

    async def scenario(gateway: ScriptedGateway, agent: NodeAgent) -> None:
        sock = await gateway.next_socket()
        await sock.accept_connect()
        target = agent.workspace / "inbox" / "sub" / "out.bin"
        await sock.event(
            "transfer.receive", {"transferId": 9, "path": "inbox/sub/out.bin", "size": len(data), "mode": "chunks"}
        )
        assert await sock.call_and_ok("transfer.accept") == {"transferId": 9}
        order = list(pieces)
        if not binary_frames:
            random.Random(5).shuffle(order)  # text frames carry offsets: any order works
        *early, last = order
        for offset, piece in early:
            await sock.ws.send(struct.pack("<I", 9) + piece if binary_frames else chunk_frame(9, piece, offset))
        await sock.ws.send(struct.pack("<I", 99) + b"stray")  # unknown transfer ids are ignored
        # transfer.end may overtake the last chunk: the node waits for the announced size
        await sock.event("transfer.end", {"transferId": 9})
        offset, piece = last
        await sock.ws.send(struct.pack("<I", 9) + piece if binary_frames else chunk_frame(9, piece, offset))
        done = await sock.call_and_ok("transfer.done")
        assert done == {"transferId": 9, "bytesWritten": len(data)}
        assert hashlib.sha256(target.read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()
        assert sorted(p.name for p in target.parent.iterdir()) == ["out.bin"]

    run_node(tmp_path, scenario, binary_frames=binary_frames)


def test_transfer_abort_leaves_no_partial_file(tmp_path: Path) -> None:
    async def scenario(gateway: ScriptedGateway, agent: NodeAgent) -> None:
        sock = await gateway.next_socket()
        await sock.accept_connect()
        target = agent.workspace / "big.bin"
        temp = agent.workspace / ".big.bin.orbital-part-11"
        await sock.event("transfer.receive", {"transferId": 11, "path": "big.bin", "size": 1000, "mode": "chunks"})
        await sock.call_and_ok("transfer.accept")
        await sock.ws.send(chunk_frame(11, b"x" * 400, 0))
        await wait_for_async(lambda: temp.exists() and temp.stat().st_size == 400, WAIT_S, what="the partial temp file")
        await sock.event("transfer.abort", {"transferId": 11, "error": "Source node disconnected"})
        await wait_for_async(lambda: not temp.exists(), WAIT_S, what="the temp file to be removed")
        await sock.ws.send(chunk_frame(11, b"y" * 600, 400))
        await sock.event("transfer.end", {"transferId": 11})
        await sock.event("node.probe", {"probeId": "after", "kind": "none"})
        follow = await sock.next_req()
        assert follow["method"] == "node.probe.result", follow
        assert not target.exists()
        assert not temp.exists()

        # the destination directory cannot be created: accept carries the error and nothing is written
        (agent.workspace / "plain").write_text("a file, not a directory")
        await sock.event("transfer.receive", {"transferId": 12, "path": "plain/x.bin", "size": 1, "mode": "chunks"})
        refused = await sock.call_and_ok("transfer.accept")
        assert refused["transferId"] == 12
        assert refused["error"].startswith(f"Failed to create directory {agent.workspace / 'plain'}: ")

        # fewer bytes than announced: transfer.done reports a write error and the temp file goes away
        await sock.event("transfer.receive", {"transferId": 13, "path": "short.bin", "size": 10, "mode": "chunks"})
        await sock.call_and_ok("transfer.accept")
        await sock.ws.send(chunk_frame(13, b"0123456789abc", 0))
        await sock.event("transfer.end", {"transferId": 13})
        failed = await sock.call_and_ok("transfer.done")
        assert failed["transferId"] == 13
        assert failed["error"].startswith("Write error: ")
        assert sorted(p.name for p in agent.workspace.iterdir()) == ["plain"]

    run_node(tmp_path, scenario)


class BlobHandler(http.server.BaseHTTPRequestHandler):
    store: dict[str, bytes] = {}

    def do_PUT(self) -> None:
        length = int(self.headers["Content-Length"])
        body = self.rfile.read(length)
        if "expired" in self.path:
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.store[self.path] = body
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        body = self.store.get(self.path)
        if body is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_transfer_presigned_both_ways(tmp_path: Path) -> None:
    upload = payload_bytes(300_000, 3)
    download = payload_bytes(123_456, 4)
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "up.bin").write_bytes(upload)
    BlobHandler.store = {"/bucket/down": download}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), BlobHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"

    async def scenario(gateway: ScriptedGateway, agent: NodeAgent) -> None:
        sock = await gateway.next_socket()
        await sock.accept_connect()
        await sock.event("transfer.send", {"transferId": 21, "path": "up.bin", "mode": "presigned"})
        await sock.call_and_ok("transfer.meta")
        await sock.event("transfer.start", {"transferId": 21, "uploadUrl": f"{base}/bucket/up?sig=1"})
        assert await sock.call_and_ok("transfer.complete") == {"transferId": 21}
        assert BlobHandler.store["/bucket/up?sig=1"] == upload
        assert not any(isinstance(i, bytes) or i.get("type") == "bin" for i in sock.inbox)

        await sock.event("transfer.send", {"transferId": 23, "path": "up.bin", "mode": "presigned"})
        await sock.call_and_ok("transfer.meta")
        await sock.event("transfer.start", {"transferId": 23, "uploadUrl": f"{base}/bucket/expired"})
        refused = await sock.call_and_ok("transfer.complete")
        assert refused["transferId"] == 23
        assert refused["error"].startswith("Upload failed: HTTP Error 403")

        await sock.event(
            "transfer.receive",
            {"transferId": 22, "path": "down/copy.bin", "size": len(download), "mode": "presigned"},
        )
        await sock.call_and_ok("transfer.accept")
        await sock.event("transfer.end", {"transferId": 22, "downloadUrl": f"{base}/bucket/down"})
        assert await sock.call_and_ok("transfer.done") == {"transferId": 22, "bytesWritten": len(download)}
        assert (agent.workspace / "down" / "copy.bin").read_bytes() == download

    try:
        run_node(tmp_path, scenario)
    finally:
        server.shutdown()
        server.server_close()


# -- reconnects, outbox, exec events, keepalive -------------------------------------------------------------------


def test_reconnect_resends_connect_and_outbox(tmp_path: Path) -> None:
    async def scenario(gateway: ScriptedGateway, agent: NodeAgent) -> None:
        first = await gateway.next_socket()
        await first.accept_connect()
        gate = agent.workspace / "gate"
        await first.event(
            "tool.invoke",
            {"callId": "slow", "tool": "Bash", "args": {"command": GATED + "hi"}},
        )
        await first.event(
            "tool.invoke",
            {
                "callId": "bg",
                "tool": "Bash",
                "args": {"command": GATED + "bye", "background": True},
            },
        )
        running = await first.result("bg")
        assert running["result"]["status"] == "running"
        session_id = running["result"]["sessionId"]
        started = await first.call_and_ok("node.exec.event")
        assert started["event"] == "started"
        assert started["callId"] == "bg"
        assert started["sessionId"] == session_id

        # the gateway goes away (restart / 2-hour cap); results finish while the node is offline
        await first.ws.close(1012, "restart")
        second = await gateway.next_socket()
        connect = await second.req("connect")
        assert [t["name"] for t in connect["params"]["tools"]] == TOOL_NAMES
        gate.write_text("")
        await wait_for_async(lambda: len(agent.outbox) == 2, WAIT_S, what="both results to wait in the outbox")
        assert {item.method for item in agent.outbox} == {"tool.result", "node.exec.event"}
        await second.reply(connect, {"type": "hello-ok", "protocol": 1, "server": {}, "features": {}})

        # both go out after the handshake (in the order they finished); the gateway is busy the first time it
        # sees the exec event: the event is retried, with the same eventId, until accepted
        delivered: dict[str, dict[str, Any]] = {}
        refused: dict[str, Any] | None = None
        while len(delivered) < 2:
            frame = await second.next_req()
            if frame["method"] == "node.exec.event" and refused is None:
                refused = frame["params"]
                await second.reply(frame, error=(503, "try again"))
                continue
            await second.reply(frame)
            delivered[frame["method"]] = frame["params"]
        assert delivered["tool.result"]["callId"] == "slow"
        assert delivered["tool.result"]["result"]["output"] == "hi\n"
        event = delivered["node.exec.event"]
        assert event == refused
        assert event["event"] == "finished"
        assert event["callId"] == "bg"
        assert event["sessionId"] == session_id
        assert event["exitCode"] == 0
        assert event["outputTail"] == "bye\n"
        assert event["endedAt"] >= event["startedAt"]
        assert event["eventId"] != started["eventId"]
        await wait_for_async(lambda: not agent.outbox, WAIT_S, what="an empty outbox")
        assert agent.connections == 2

    run_node(tmp_path, scenario)


def test_keepalive_failure_reconnects(tmp_path: Path) -> None:
    async def scenario(gateway: ScriptedGateway, agent: NodeAgent) -> None:
        first = await gateway.next_socket()
        await first.accept_connect()
        await first.call_and_ok("tools.list")  # answered: the connection stays
        await first.req("tools.list")  # not answered: the node gives up on this socket
        await asyncio.wait_for(first.closed.wait(), WAIT_S)
        second = await gateway.next_socket()
        await second.accept_connect()
        await second.call_and_ok("tools.list")

    run_node(tmp_path, scenario, keepalive=0.05, keepalive_timeout=1.0)


@pytest.mark.parametrize("refusal", ["401", "103", "close-4001"])
def test_fatal_refusal_exits_2(tmp_path: Path, refusal: str) -> None:
    async def scenario(gateway: ScriptedGateway, agent: NodeAgent) -> None:
        sock = await gateway.next_socket()
        req = await sock.req("connect")
        if refusal == "401":
            await sock.reply(req, error=(401, "Unauthorized: invalid or missing token"))
        elif refusal == "103":
            await sock.reply(req, error=(103, "Invalid nodeRuntime: nodeRuntime for node-test is required"))
        else:
            await sock.ws.close(4001, "Unauthorized")
        await asyncio.wait_for(sock.closed.wait(), WAIT_S)  # the node hangs up and does not come back

    run_node(tmp_path, scenario, expect_exit=2)


@pytest.mark.parametrize("how", ["notice-then-bare-close", "close-with-reason"])
def test_a_node_replaced_by_a_newer_connection_stops(
    tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """API Gateway closes a socket without a reason: the gateway says why in `connection.closing` first. Either way,
    a node whose id was taken by a newer connection stops (exit 3) instead of taking it back."""

    async def scenario(gateway: ScriptedGateway, agent: NodeAgent) -> None:
        sock = await gateway.next_socket()
        await sock.accept_connect()
        reason = "Replaced by newer node connection"
        if how == "notice-then-bare-close":
            await sock.event("connection.closing", {"code": 1000, "reason": reason})
            await sock.ws.close(1000)
        else:
            await sock.ws.close(1000, reason)
        await wait_for_async(lambda: agent.replaced_by_another, WAIT_S, what="the node to see it was replaced")

    run_node(tmp_path, scenario, expect_exit=3)
    stopped = [r.getMessage() for r in caplog.records if "a newer connection took node id" in r.getMessage()]
    assert stopped == [
        "connection closed (1000 Replaced by newer node connection): a newer connection took node id node-test "
        "(another `orbital node` with this id?) - stopping rather than taking it back"
    ]


def test_stop_while_the_handshake_hangs(tmp_path: Path) -> None:
    async def scenario(gateway: ScriptedGateway, agent: NodeAgent) -> None:
        sock = await gateway.next_socket()
        await sock.req("connect")  # never answered; stopping must not wait for the 60 s handshake timeout

    run_node(tmp_path, scenario, handshake_timeout=60.0)


def test_binary_frames_and_message_limit_defaults() -> None:
    def opts(url: str, flag: bool | None = None) -> NodeOptions:
        return NodeOptions(url=url, node_id="n", workspace=Path("."), binary_frames=flag)

    assert opts("ws://127.0.0.1:8765/ws").use_binary_frames() is True
    assert opts("ws://localhost:8765/ws").use_binary_frames() is True
    assert opts("wss://abc.execute-api.us-east-1.amazonaws.com/prod").use_binary_frames() is False
    assert opts("ws://10.0.0.5:8765/ws").use_binary_frames() is False
    assert opts("wss://example.com/ws", True).use_binary_frames() is True
    assert opts("ws://127.0.0.1:8765/ws", False).use_binary_frames() is False
    # the message limit is the gateway's: what it advertises, else API Gateway's 128 KB (loopback or not)
    assert opts("ws://127.0.0.1:8765/ws").message_limit() == 128 * 1024
    assert opts("wss://abc.execute-api.us-east-1.amazonaws.com/prod").message_limit() == 128 * 1024
    assert opts("ws://127.0.0.1:8765/ws").message_limit(64_000) == 64_000
    explicit = NodeOptions(url="ws://127.0.0.1:8765/ws", node_id="n", workspace=Path("."), max_message_bytes=5000)
    assert explicit.message_limit() == explicit.message_limit(64_000) == 5000
    unlimited = NodeOptions(url="ws://127.0.0.1:8765/ws", node_id="n", workspace=Path("."), max_message_bytes=None)
    assert unlimited.message_limit(64_000) is None


# -- the `orbital node` process ------------------------------------------------------------------------------------

CLI = (
    "import argparse, sys\n"
    "from orbital.node.cli import add_parser\n"
    "parser = argparse.ArgumentParser(prog='orbital')\n"
    "add_parser(parser.add_subparsers(dest='command', required=True))\n"
    "args = parser.parse_args(sys.argv[1:])\n"
    "sys.exit(args.func(args))\n"
)


def node_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORBITAL_")}
    env["ORBITAL_DATA_DIR"] = os.devnull  # never a token kept by a real gateway of this user
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "layers" / "orbital"), env.get("PYTHONPATH", "")])
    env["SHELL"] = "/bin/sh"
    env.update(extra)
    return env


def test_cli_process_sigterm_kills_background_and_logs_no_secrets(tmp_path: Path) -> None:
    log_file = tmp_path / "logs" / "node.log"
    secret = "tok-very-secret-4711"

    async def main() -> tuple[int, str]:
        async with ScriptedGateway() as gateway:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                CLI,
                "node",
                "--url",
                gateway.url,
                "--id",
                "cli-node",
                "--workspace",
                str(tmp_path),
                "--log-file",
                str(log_file),
                stderr=asyncio.subprocess.PIPE,
                env=node_env(ORBITAL_TOKEN=secret, ORBITAL_NODE_TEST_VALUE="value-never-logged"),
            )
            try:
                sock = await gateway.next_socket(timeout=30)
                params = await sock.accept_connect()
                assert params["client"]["id"] == "cli-node"
                assert params["auth"] == {"token": secret}
                assert "ORBITAL_NODE_TEST_VALUE" in params["nodeRuntime"]["hostEnv"]
                result = await sock.invoke("bg", "Bash", {"command": "sleep 60", "background": True})
                pid = result["result"]["pid"]
                await sock.call_and_ok("node.exec.event")
                proc.send_signal(signal.SIGTERM)
                code = await asyncio.wait_for(proc.wait(), WAIT_S)
                await wait_for_async(lambda: not _alive(pid), WAIT_S, what="the background command to be killed")
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            stderr = (await proc.stderr.read()).decode() if proc.stderr else ""
            return code, stderr

    code, stderr = asyncio.run(main())
    assert code == 0
    text = log_file.read_text()
    entries = [json.loads(line) for line in text.splitlines()]
    assert any(e["msg"].startswith("connected to ") for e in entries)
    assert any(e["msg"] == "node stopped" for e in entries)
    assert all({"ts", "level", "msg"} <= set(e) for e in entries)
    assert secret not in text and secret not in stderr
    assert "value-never-logged" not in text and "value-never-logged" not in stderr
    assert "connected to" in stderr


def test_cli_process_refused_exits_2(tmp_path: Path) -> None:
    async def main() -> tuple[int, str]:
        async with ScriptedGateway() as gateway:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                CLI,
                "node",
                "--workspace",
                str(tmp_path),
                "--log-file",
                str(tmp_path / "node.log"),
                stderr=asyncio.subprocess.PIPE,
                env=node_env(ORBITAL_URL=gateway.url, ORBITAL_TOKEN="wrong-token-999"),
            )
            try:
                sock = await gateway.next_socket(timeout=30)
                req = await sock.req("connect")
                assert req["params"]["client"]["id"].startswith("node-")
                await sock.reply(req, error=(401, "Unauthorized: invalid or missing token"))
                code = await asyncio.wait_for(proc.wait(), WAIT_S)
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            stderr = (await proc.stderr.read()).decode() if proc.stderr else ""
            return code, stderr

    code, stderr = asyncio.run(main())
    assert code == 2
    assert "refused this node (401)" in stderr
    assert "wrong-token-999" not in stderr
    assert "wrong-token-999" not in (tmp_path / "node.log").read_text()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    if stat.exists():
        with contextlib.suppress(OSError):
            return stat.read_text().split(")")[-1].split()[0] != "Z"
    return True
