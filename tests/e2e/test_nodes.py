"""Real `orbital node` processes behind the local gateway: tools, timeouts, node loss, logs, transfers."""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid

import pytest
from orbital.client import GatewayClient
from orbital.store import keys

from tests.conftest import NODE_RUNTIME, NODE_TOOLS, wait_for
from tests.e2e.conftest import NodeProcess, store_for

FIVE_MB = 5 * 1024 * 1024
BIG_TEXT_BYTES = 200 * 1024
SPILLED = re.compile(r"gsv:tool-results/[0-9a-f-]{36}\.txt")


def _uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_bash_echo_through_the_gateway(client, node_factory):
    node = node_factory(_uid("n"))
    result = client.call("tool.invoke", {"tool": f"{node.node_id}__Bash", "args": {"command": "echo hello"}})["result"]
    assert result["status"] == "completed"
    assert result["exitCode"] == 0
    assert "hello" in result["output"]
    # the canonical name and the documented `node:Tool` spelling reach the same tool (F1)
    again = client.call("tool.invoke", {"tool": f"{node.node_id}:Bash", "args": {"command": "echo again"}})
    assert "again" in again["result"]["output"]


def test_file_tools_through_the_gateway(client, node_factory):
    node = node_factory(_uid("n"))
    tool = lambda name: f"{node.node_id}__{name}"  # noqa: E731
    wrote = client.call(
        "tool.invoke", {"tool": tool("Write"), "args": {"path": "notes/a.txt", "content": "alpha\nbeta\ngamma\n"}}
    )
    assert wrote["result"]["bytes"] == len("alpha\nbeta\ngamma\n")
    read = client.call("tool.invoke", {"tool": tool("Read"), "args": {"path": "notes/a.txt", "offset": 1, "limit": 1}})
    assert read["result"]["content"] == "     2\tbeta"
    edited = client.call(
        "tool.invoke", {"tool": tool("Edit"), "args": {"path": "notes/a.txt", "oldString": "beta", "newString": "BETA"}}
    )
    assert edited["result"]["replacements"] == 1
    assert (node.workspace / "notes/a.txt").read_text() == "alpha\nBETA\ngamma\n"
    globbed = client.call("tool.invoke", {"tool": tool("Glob"), "args": {"pattern": "**/*.txt"}})
    assert globbed["result"]["count"] == 1
    grep = client.call("tool.invoke", {"tool": tool("Grep"), "args": {"pattern": "BETA"}})
    assert grep["result"]["matches"][0]["line"] == 2
    failed = client.request(
        "tool.invoke", {"tool": tool("Edit"), "args": {"path": "notes/a.txt", "oldString": "zeta", "newString": "x"}}
    )
    assert failed["error"]["code"] == 500
    assert "oldString not found" in failed["error"]["message"]


def test_unnamespaced_and_unknown_names(client, node_factory):
    node_factory(_uid("n"))
    assert client.request("tool.invoke", {"tool": "Bash"})["error"] == {
        "code": 404,
        "message": "No node provides tool: Bash",
    }


def test_silent_node_times_out_and_late_result_is_dropped(gateway, client):
    client.call("config.set", {"path": "timeouts.toolMs", "value": 1000})
    try:
        with GatewayClient(gateway.url) as silent:
            node_id = _uid("silent")
            silent.connect("node", node_id, tools=NODE_TOOLS, nodeRuntime=NODE_RUNTIME)
            res = client.request("tool.invoke", {"tool": f"{node_id}__Bash", "args": {}}, timeout=30)
            assert res["error"] == {
                "code": 504,
                "message": f"Tool request timed out after 1000ms: {node_id}__Bash",
                "retryable": True,
            }
            call_id = silent.next_event("tool.invoke")["payload"]["callId"]
            assert silent.call("tool.result", {"callId": call_id, "result": "late"}) == {"ok": True, "dropped": True}
            assert silent.request("tool.result", {"callId": str(uuid.uuid4())})["error"] == {
                "code": 404,
                "message": "Unknown callId",
            }
    finally:
        client.call("config.set", {"path": "timeouts.toolMs"})


def test_killed_node_fails_pending_call_at_once(gateway, client, node_factory):
    node = node_factory(_uid("doomed"))
    frame_id = "kill-me"
    client.send_raw(
        f'{{"type":"req","id":"{frame_id}","method":"tool.invoke",'
        f'"params":{{"tool":"{node.node_id}__Bash","args":{{"command":"touch started; sleep 30"}}}}}}'
    )
    wait_for((node.workspace / "started").exists, 15, what="the node starting the command")
    node.kill()
    res = client.wait_response(frame_id, timeout=20)  # the tool timeout is 60 s: only node loss answers this fast
    assert res["error"] == {"code": 503, "message": f"Node disconnected: {node.node_id}"}


def test_two_nodes_and_logs(client, node_factory):
    a, b = node_factory(_uid("a")), node_factory(_uid("b"))
    for node in (a, b):
        out = client.call("tool.invoke", {"tool": f"{node.node_id}__Bash", "args": {"command": "pwd"}})
        assert out["result"]["output"].strip() == str(node.workspace.resolve())
    assert client.request("logs.get", {})["error"] == {
        "code": 400,
        "message": "nodeId required when multiple nodes are connected",
    }
    logs = client.call("logs.get", {"nodeId": a.node_id, "lines": 5})
    assert logs["nodeId"] == a.node_id
    assert 0 < logs["count"] <= 5 and len(logs["lines"]) == logs["count"]


@pytest.mark.parametrize("framing", ["--binary-frames", "--no-binary-frames"])
def test_five_megabytes_between_nodes_and_the_workspace(client, node_factory, framing):
    src, dst = node_factory(_uid("src"), framing), node_factory(_uid("dst"), framing)
    data = os.urandom(FIVE_MB)
    (src.workspace / "big.bin").write_bytes(data)
    out = client.call(
        "transfer.request",
        {"source": f"{src.node_id}:big.bin", "destination": f"{dst.node_id}:in/big.bin"},
        timeout=120,
    )
    assert out["bytesTransferred"] == FIVE_MB
    assert _sha((dst.workspace / "in/big.bin").read_bytes()) == _sha(data)
    key = f"up-{framing.strip('-')}.bin"
    out = client.call(
        "transfer.request", {"source": f"{src.node_id}:big.bin", "destination": f"gsv:{key}"}, timeout=120
    )
    assert out["bytesTransferred"] == FIVE_MB
    out = client.call(
        "transfer.request", {"source": f"gsv:{key}", "destination": f"{dst.node_id}:back.bin"}, timeout=120
    )
    assert out["bytesTransferred"] == FIVE_MB
    assert _sha((dst.workspace / "back.bin").read_bytes()) == _sha(data)
    assert not [p for p in dst.workspace.rglob("*") if "orbital-part" in p.name]


def test_presigned_transfers(client, node_factory):
    src, dst = node_factory(_uid("src")), node_factory(_uid("dst"))
    data = os.urandom(FIVE_MB)
    (src.workspace / "p.bin").write_bytes(data)
    for source, destination in (
        (f"{src.node_id}:p.bin", f"{dst.node_id}:p.bin"),
        (f"{src.node_id}:p.bin", "gsv:presigned/p.bin"),
        ("gsv:presigned/p.bin", f"{dst.node_id}:p2.bin"),
    ):
        out = client.call(
            "transfer.request", {"source": source, "destination": destination, "mode": "presigned"}, timeout=120
        )
        assert out["bytesTransferred"] == FIVE_MB
    assert _sha((dst.workspace / "p.bin").read_bytes()) == _sha(data)
    assert _sha((dst.workspace / "p2.bin").read_bytes()) == _sha(data)


def test_transfer_whose_source_dies_fails_on_both_sides(gateway, client, node_factory):
    dst = node_factory(_uid("dst"))
    src_id = _uid("fake-src")
    with GatewayClient(gateway.url) as fake:
        fake.connect("node", src_id, tools=NODE_TOOLS, nodeRuntime=NODE_RUNTIME)
        client.send_raw(
            '{"type":"req","id":"xfer","method":"transfer.request","params":{"source":"'
            + src_id
            + ':a.bin","destination":"'
            + dst.node_id
            + ':got/a.bin"}}'
        )
        tid = fake.next_event("transfer.send")["payload"]["transferId"]
        fake.call("transfer.meta", {"transferId": tid, "size": FIVE_MB})
        fake.next_event("transfer.start")
        from orbital.protocol.frames import pack_chunk

        fake.send_raw(pack_chunk(tid, os.urandom(64 * 1024)))
        fake.call("tools.list")  # the chunk has been handled once this answers
    res = client.wait_response("xfer", timeout=30)
    assert res["error"] == {"code": 500, "message": f"Node disconnected: {src_id}"}
    wait_for(lambda: [p for p in dst.workspace.rglob("*") if p.is_file()] == [], 10, 0.05, what="an empty workspace")


def big_text(size: int = BIG_TEXT_BYTES) -> str:
    """A text file of `size` bytes and more: numbered lines, some of them not ASCII."""
    lines: list[str] = []
    total = 0
    while total < size:
        line = f"line {len(lines):06d} {'é' if len(lines) % 7 == 0 else 'e'} " + "abcdefghij" * 6
        lines.append(line)
        total += len(line.encode()) + 1
    return "\n".join(lines) + "\n"


def as_read(text: str) -> str:
    """What the node's Read returns as `content` for a whole text file (its lines, numbered)."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return "\n".join(f"{i + 1:>6}\t{line}" for i, line in enumerate(lines))


def read_back(client: GatewayClient, path: str) -> bytes:
    """A workspace file read through `workspace.read` in the pieces its limit allows."""
    pieces: list[bytes] = []
    offset = 0
    while True:
        part = client.call("workspace.read", {"path": path, "offset": offset, "limit": 96_000})
        pieces.append(part["content"].encode())
        if not part.get("truncated"):
            return b"".join(pieces)
        offset = part["nextOffset"]


def connects_logged(node: NodeProcess) -> int:
    """How many times a node logged that it connected."""
    lines = node.log_file.read_text().splitlines()
    return sum(1 for line in lines if json.loads(line)["msg"].startswith("connected to "))


def test_a_read_larger_than_a_message_is_saved_and_keeps_the_node_connected(gateway, client, node_factory):
    """A 200 KB Read does not fit API Gateway's 128 KB message (which the local gateway enforces): the node sends a
    preview with a pointer to the whole result, saved in the agent workspace, and keeps its socket."""
    node = node_factory(_uid("big"))
    text = big_text()
    (node.workspace / "big.txt").write_text(text)
    services = store_for(gateway)
    connection = services.connections.node(node.node_id).connection_id

    result = client.call("tool.invoke", {"tool": f"{node.node_id}__Read", "args": {"path": "big.txt"}}, timeout=60)[
        "result"
    ]
    whole = as_read(text)
    assert result["truncated"] is True
    assert 0 < len(result["content"]) < len(whole) and whole.startswith(result["content"])
    pointer = result["fullOutput"]
    assert SPILLED.fullmatch(pointer["path"]), pointer
    assert pointer["bytes"] == len(whole.encode())
    assert pointer["path"] in result["note"] and "gsv__ReadFile" in result["note"]

    # the whole result, byte for byte, at the pointer: as stored, and read back in parts
    path = pointer["path"].removeprefix("gsv:")
    stored = services.workspace.get(keys.workspace_object("main", path))
    assert stored is not None and stored[0] == whole.encode()
    assert read_back(client, path) == whole.encode()

    # the same socket, still registered, still answering
    assert services.connections.node(node.node_id).connection_id == connection
    again = client.call("tool.invoke", {"tool": f"{node.node_id}__Bash", "args": {"command": "echo still-here"}})
    assert "still-here" in again["result"]["output"]
    assert services.connections.node(node.node_id).connection_id == connection
    assert connects_logged(node) == 1
