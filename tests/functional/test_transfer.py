"""The transfer engine under moto with scripted node sockets (the real `orbital node` is exercised end to end in
tests/e2e): every direction, both chunk framings, presigned URLs, and failures that must leave nothing behind."""

from __future__ import annotations

import base64
import hashlib
import os
from typing import Any

import boto3
import pytest
import requests
from orbital.methods.transfer import _binary_chunk, _text_chunk
from orbital.ports import lifecycle
from orbital.protocol.frames import pack_chunk, unpack_chunk
from orbital.store import keys

from tests.conftest import BUCKET, wait_for

CHUNK = 64 * 1024


def _events(sender: Any, cid: str, name: str) -> list[dict[str, Any]]:
    return [f["payload"] for f in sender.frames_to(cid) if isinstance(f, dict) and f.get("event") == name]


def _responses(sender: Any, cid: str) -> list[dict[str, Any]]:
    return [f for f in sender.frames_to(cid) if isinstance(f, dict) and f.get("type") == "res"]


def _received_bytes(sender: Any, cid: str, transfer_id: int) -> bytes:
    """Reassemble what a destination socket received, by offset (text frames) or in order (binary)."""
    pieces: dict[int, bytes] = {}
    running = 0
    for frame in sender.frames_to(cid):
        if isinstance(frame, bytes):
            tid, data = unpack_chunk(frame)  # type: ignore[misc]
            if tid == transfer_id:
                pieces[running] = data
                running += len(data)
        elif isinstance(frame, dict) and frame.get("type") == "bin" and frame["transferId"] == transfer_id:
            pieces[frame["offset"]] = base64.b64decode(frame["data"])
    return b"".join(pieces[o] for o in sorted(pieces))


def _s3() -> Any:
    return boto3.client("s3", region_name="us-east-1")


@pytest.fixture
def parties(flows, connect):
    return connect("node", "src"), connect("node", "dst"), connect("client", "caller")


def _request(client: Any, source: str, destination: str, mode: str = "chunks") -> None:
    assert client.frame("transfer.request", {"source": source, "destination": destination, "mode": mode}) is None


def _send_file(services: Any, src: Any, transfer_id: int, data: bytes, framing: str, reverse: bool = False) -> None:
    offsets = list(range(0, len(data), CHUNK))
    if reverse:
        offsets.reverse()
    for off in offsets:
        piece = data[off : off + CHUNK]
        if framing == "binary":
            _binary_chunk(services, src.connection_id, pack_chunk(transfer_id, piece))
        else:
            frame = {"type": "bin", "transferId": transfer_id, "offset": off, "data": base64.b64encode(piece).decode()}
            _text_chunk(services, src.connection_id, frame)


@pytest.mark.parametrize("framing", ["binary", "text"])
def test_node_to_node_chunks(parties, sender, services, framing):
    src, dst, client = parties
    data = os.urandom(300_000)
    _request(client, "src:/tmp/a.bin", "dst:copy/a.bin")
    send = _events(sender, src.connection_id, "transfer.send")[0]
    tid = send["transferId"]
    assert send == {"transferId": tid, "path": "/tmp/a.bin", "mode": "chunks"}
    src.call("transfer.meta", {"transferId": tid, "size": len(data), "mime": "application/octet-stream"})
    receive = _events(sender, dst.connection_id, "transfer.receive")[0]
    assert receive == {
        "transferId": tid,
        "path": "copy/a.bin",
        "size": len(data),
        "mode": "chunks",
        "mime": "application/octet-stream",
    }
    dst.call("transfer.accept", {"transferId": tid})
    assert _events(sender, src.connection_id, "transfer.start") == [{"transferId": tid}]
    _send_file(services, src, tid, data, framing, reverse=(framing == "text"))
    src.call("transfer.complete", {"transferId": tid})
    assert _events(sender, dst.connection_id, "transfer.end") == [{"transferId": tid}]
    assert hashlib.sha256(_received_bytes(sender, dst.connection_id, tid)).digest() == hashlib.sha256(data).digest()
    dst.call("transfer.done", {"transferId": tid, "bytesWritten": len(data)})
    res = _responses(sender, client.connection_id)[0]
    assert res["payload"] == {
        "source": "src:/tmp/a.bin",
        "destination": "dst:copy/a.bin",
        "bytesTransferred": len(data),
        "mime": "application/octet-stream",
    }
    assert services.table.get(keys.transfer(tid)) is None


@pytest.mark.parametrize("framing", ["binary", "text"])
def test_node_to_workspace_chunks(parties, sender, services, framing):
    src, _, client = parties
    data = os.urandom(200_000)
    _request(client, "src:photo.png", "gsv:media/photo.png")
    tid = _events(sender, src.connection_id, "transfer.send")[0]["transferId"]
    src.call("transfer.meta", {"transferId": tid, "size": len(data), "mime": "image/png"})
    assert _events(sender, src.connection_id, "transfer.start") == [{"transferId": tid}]
    _send_file(services, src, tid, data, framing, reverse=(framing == "text"))
    src.call("transfer.complete", {"transferId": tid})
    obj = _s3().get_object(Bucket=BUCKET, Key="agents/main/media/photo.png")
    assert obj["Body"].read() == data
    assert obj["ContentType"] == "image/png"
    assert _responses(sender, client.connection_id)[0]["payload"]["bytesTransferred"] == len(data)
    assert _s3().list_objects_v2(Bucket=BUCKET, Prefix="transfers/").get("KeyCount", 0) == 0


def test_workspace_to_node_chunks(parties, sender, services):
    _, dst, client = parties
    data = os.urandom(150_000)
    services.workspace.put("agents/main/docs/report.pdf", data, content_type="application/pdf")
    _request(client, "gsv:docs/report.pdf", "dst:report.pdf")
    receive = _events(sender, dst.connection_id, "transfer.receive")[0]
    tid = receive["transferId"]
    assert receive["size"] == len(data) and receive["mime"] == "application/pdf"
    dst.call("transfer.accept", {"transferId": tid})
    assert _events(sender, dst.connection_id, "transfer.end") == [{"transferId": tid}]
    assert _received_bytes(sender, dst.connection_id, tid) == data
    dst.call("transfer.done", {"transferId": tid, "bytesWritten": len(data)})
    assert _responses(sender, client.connection_id)[0]["payload"]["bytesTransferred"] == len(data)


def test_presigned_round_trip_through_the_workspace(parties, sender, services):
    src, dst, client = parties
    data = os.urandom(120_000)
    _request(client, "src:big.bin", "gsv:big.bin", mode="presigned")
    tid = _events(sender, src.connection_id, "transfer.send")[0]["transferId"]
    src.call("transfer.meta", {"transferId": tid, "size": len(data)})
    upload = _events(sender, src.connection_id, "transfer.start")[0]["uploadUrl"]
    assert requests.put(upload, data=data, timeout=10).status_code == 200
    assert services.workspace.head("agents/main/big.bin") is None  # nothing visible before the check
    src.call("transfer.complete", {"transferId": tid})
    assert _s3().get_object(Bucket=BUCKET, Key="agents/main/big.bin")["Body"].read() == data
    _request(client, "gsv:big.bin", "dst:big.bin", mode="presigned")
    tid2 = _events(sender, dst.connection_id, "transfer.receive")[0]["transferId"]
    dst.call("transfer.accept", {"transferId": tid2})
    url = _events(sender, dst.connection_id, "transfer.end")[0]["downloadUrl"]
    assert requests.get(url, timeout=10).content == data
    dst.call("transfer.done", {"transferId": tid2, "bytesWritten": len(data)})
    assert [r["ok"] for r in _responses(sender, client.connection_id)] == [True, True]


def test_source_loss_aborts_both_sides_and_answers_caller(parties, sender, services):
    src, dst, client = parties
    _request(client, "src:a", "dst:b")
    tid = _events(sender, src.connection_id, "transfer.send")[0]["transferId"]
    src.call("transfer.meta", {"transferId": tid, "size": 10 * CHUNK})
    dst.call("transfer.accept", {"transferId": tid})
    _send_file(services, src, tid, os.urandom(CHUNK), "binary")
    lifecycle.disconnect(services, src.connection_id)
    assert _events(sender, dst.connection_id, "transfer.abort") == [
        {"transferId": tid, "error": "Node disconnected: src"}
    ]
    assert _responses(sender, client.connection_id)[0]["error"] == {"code": 500, "message": "Node disconnected: src"}
    assert services.table.get(keys.transfer(tid)) is None


def test_partial_upload_is_not_left_in_the_workspace(parties, sender, services):
    src, _, client = parties
    _request(client, "src:a", "gsv:out/a.bin")
    tid = _events(sender, src.connection_id, "transfer.send")[0]["transferId"]
    src.call("transfer.meta", {"transferId": tid, "size": 3 * CHUNK})
    _send_file(services, src, tid, os.urandom(CHUNK), "binary")
    src.call("transfer.complete", {"transferId": tid, "bytesSent": CHUNK})  # the source says it sent less
    err = _responses(sender, client.connection_id)[0]["error"]
    assert err["message"] == f"Upload incomplete: expected {3 * CHUNK} bytes, got {CHUNK}"
    assert services.workspace.head("agents/main/out/a.bin") is None
    assert _s3().list_objects_v2(Bucket=BUCKET, Prefix="transfers/").get("KeyCount", 0) == 0


def test_errors_from_nodes_and_wrong_sockets(parties, sender, services, connect):
    src, dst, client = parties
    _request(client, "src:missing", "dst:b")
    tid = _events(sender, src.connection_id, "transfer.send")[0]["transferId"]
    assert dst.error("transfer.meta", {"transferId": tid, "size": 1}) == {
        "code": 403,
        "message": f"Not the source of transfer {tid}",
    }
    assert src.error("transfer.meta", {"size": 1}) == {"code": 400, "message": "transferId required"}
    assert src.call("transfer.meta", {"transferId": 999999, "size": 1}) == {"ok": True}  # unknown ids are ignored
    src.call("transfer.meta", {"transferId": tid, "size": 0, "error": "Failed to read file missing: not found"})
    assert _responses(sender, client.connection_id)[0]["error"]["message"] == "Failed to read file missing: not found"
    assert _events(sender, dst.connection_id, "transfer.abort")[0]["transferId"] == tid
    # chunks from a socket that is not the source are dropped (F13)
    _request(client, "src:a", "dst:b")
    tid2 = _events(sender, src.connection_id, "transfer.send")[1]["transferId"]
    src.call("transfer.meta", {"transferId": tid2, "size": 4})
    dst.call("transfer.accept", {"transferId": tid2})
    _binary_chunk(services, dst.connection_id, pack_chunk(tid2, b"evil"))
    assert _received_bytes(sender, dst.connection_id, tid2) == b""
    _binary_chunk(services, src.connection_id, pack_chunk(tid2, b"good"))
    assert _received_bytes(sender, dst.connection_id, tid2) == b"good"


def test_request_validation(parties, sender, services):
    _, _, client = parties
    assert client.error("transfer.request", {"source": "gsv:a", "destination": "gsv:b"}) == {
        "code": 400,
        "message": "Workspace file not found: a",
    }
    services.workspace.put("agents/main/a", b"x")
    assert client.error("transfer.request", {"source": "gsv:a", "destination": "gsv:b"}) == {
        "code": 400,
        "message": "Cannot transfer from gsv to gsv",
    }
    assert client.error("transfer.request", {"source": "nope:a", "destination": "gsv:b"}) == {
        "code": 503,
        "message": "Source node not connected: nope",
    }
    assert client.error("transfer.request", {"source": "src:a", "destination": "zz:b"}) == {
        "code": 503,
        "message": "Destination node not connected: zz",
    }
    assert client.error("transfer.request", {"source": "src:a", "destination": "gsv:../etc"}) == {
        "code": 400,
        "message": "Path traversal not allowed",
    }
    assert client.error("transfer.request", {"source": "a", "destination": "gsv:b"})["message"].startswith(
        'Invalid transfer endpoint "a"'
    )


def test_timeout_aborts_transfer(parties, sender, services):
    src, _, client = parties
    client.call("config.set", {"path": "timeouts.transferMs", "value": 1000})
    _request(client, "src:a", "dst:b")
    tid = _events(sender, src.connection_id, "transfer.send")[0]["transferId"]
    res = wait_for(lambda: _responses(sender, client.connection_id), timeout=15)[0]
    assert res["error"] == {"code": 504, "message": "Transfer timed out after 1000ms"}
    assert _events(sender, src.connection_id, "transfer.abort") == [
        {"transferId": tid, "error": "Transfer timed out after 1000ms"}
    ]


def _text_frame(tid: int, data: bytes, off: int) -> dict[str, Any]:
    return {"type": "bin", "transferId": tid, "offset": off, "data": base64.b64encode(data[off : off + CHUNK]).decode()}


def test_a_complete_that_overtakes_chunks_waits_for_them(parties, sender, services):
    """On AWS the frames of one socket run in parallel Lambdas: `transfer.complete` may be handled before chunks
    sent ahead of it. The upload finishes when the last of them lands, not before, and nothing is lost."""
    src, _, client = parties
    data = os.urandom(5 * CHUNK + 123)
    _request(client, "src:big.bin", "gsv:in/big.bin")
    tid = _events(sender, src.connection_id, "transfer.send")[0]["transferId"]
    src.call("transfer.meta", {"transferId": tid, "size": len(data)})
    offsets = list(range(0, len(data), CHUNK))
    late = [offsets.pop(3), offsets.pop(0)]
    for off in offsets:
        _text_chunk(services, src.connection_id, _text_frame(tid, data, off))
    src.call("transfer.complete", {"transferId": tid, "bytesSent": len(data)})
    assert _responses(sender, client.connection_id) == []  # two chunks still on their way
    for off in late:
        _text_chunk(services, src.connection_id, _text_frame(tid, data, off))
    [res] = _responses(sender, client.connection_id)
    assert res["payload"]["bytesTransferred"] == len(data)
    assert _s3().get_object(Bucket=BUCKET, Key="agents/main/in/big.bin")["Body"].read() == data


def test_a_relay_tells_the_destination_the_end_only_after_the_last_chunk(parties, sender, services):
    src, dst, client = parties
    data = os.urandom(3 * CHUNK)
    _request(client, "src:/a", "dst:b")
    tid = _events(sender, src.connection_id, "transfer.send")[0]["transferId"]
    src.call("transfer.meta", {"transferId": tid, "size": len(data)})
    dst.call("transfer.accept", {"transferId": tid})
    _text_chunk(services, src.connection_id, _text_frame(tid, data, CHUNK))
    _text_chunk(services, src.connection_id, _text_frame(tid, data, 0))
    src.call("transfer.complete", {"transferId": tid})  # a GSV node: no bytesSent, the announced size counts
    assert _events(sender, dst.connection_id, "transfer.end") == []
    _text_chunk(services, src.connection_id, _text_frame(tid, data, 2 * CHUNK))
    frames = [f for f in sender.frames_to(dst.connection_id) if isinstance(f, dict)]
    assert frames[-1] == {"type": "evt", "event": "transfer.end", "payload": {"transferId": tid}}
    assert _received_bytes(sender, dst.connection_id, tid) == data


@pytest.mark.atomic_table
def test_chunks_and_complete_handled_at_once_finish_exactly_once(parties, sender, services):
    import random
    import threading

    src, _, client = parties
    data = os.urandom(12 * CHUNK)
    _request(client, "src:c.bin", "gsv:in/c.bin")
    tid = _events(sender, src.connection_id, "transfer.send")[0]["transferId"]
    src.call("transfer.meta", {"transferId": tid, "size": len(data)})
    work: list[Any] = [
        (lambda off=off: _text_chunk(services, src.connection_id, _text_frame(tid, data, off)))
        for off in range(0, len(data), CHUNK)
    ]
    work.append(lambda: src.call("transfer.complete", {"transferId": tid, "bytesSent": len(data)}))
    random.Random(7).shuffle(work)
    barrier = threading.Barrier(len(work))

    def run(job: Any) -> None:
        barrier.wait(timeout=30)
        job()

    threads = [threading.Thread(target=run, args=(job,)) for job in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    [res] = wait_for(lambda: _responses(sender, client.connection_id))
    assert res["ok"] and res["payload"]["bytesTransferred"] == len(data)
    assert _s3().get_object(Bucket=BUCKET, Key="agents/main/in/c.bin")["Body"].read() == data
    assert len(_responses(sender, client.connection_id)) == 1


def test_a_node_saves_the_result_of_a_call_it_is_answering(parties, sender, services):
    """A node's one use of transfer.request: a tool result too large for a message, from its own file to
    `gsv:tool-results/{callId}.txt` of the call's agent, answered before the call's own timeout."""
    from orbital.domain.workspace_paths import tool_result_path
    from orbital.engines import deferred, transfer

    src, _, client = parties
    client.call("config.set", {"path": "timeouts.toolMs", "value": 20_000})
    assert client.frame("tool.invoke", {"tool": "src__Bash", "args": {"command": "yes | head -c 300000"}}) is None
    call_id = _events(sender, src.connection_id, "tool.invoke")[0]["callId"]
    saved = f"gsv:{tool_result_path(call_id)}"
    assert saved == f"gsv:tool-results/{call_id}.txt"
    request = {"source": "src:/tmp/r.txt", "destination": saved, "callId": call_id, "mode": "chunks"}
    assert src.frame("transfer.request", request) is None
    tid = _events(sender, src.connection_id, "transfer.send")[0]["transferId"]
    xfer = transfer.load(services, tid)
    assert xfer is not None
    lookup = deferred.get(services, xfer.call_id)
    assert lookup is not None and 1_000 <= lookup.call.timeout_ms <= 15_000  # ends 5 s before the tool call's
    data = b"y\n" * 150_000
    src.call("transfer.meta", {"transferId": tid, "size": len(data)})
    _send_file(services, src, tid, data, "binary")
    src.call("transfer.complete", {"transferId": tid})
    answer = _responses(sender, src.connection_id)[-1]
    assert answer["ok"], answer
    assert answer["payload"] == {
        "source": "src:/tmp/r.txt",
        "destination": saved,
        "bytesTransferred": len(data),
    }
    assert services.workspace.get(keys.workspace_object("main", f"tool-results/{call_id}.txt"))[0] == data
    # the call is still the node's to answer
    assert src.call("tool.result", {"callId": call_id, "result": {"output": "y\n", "truncated": True}}) == {"ok": True}

    # a session-routed call saves into its session's agent; a client-chosen id becomes a safe, distinct name
    assert client.call("tool.request", {"callId": "my call/1", "tool": "src__Bash", "sessionKey": "agent:ops:x"})
    path = tool_result_path("my call/1")
    assert path.startswith("tool-results/my_call_1-") and path.endswith(".txt")
    assert path != tool_result_path("my_call_1")
    request = {"source": "src:r.txt", "destination": f"gsv:{path}", "callId": "my call/1", "mode": "chunks"}
    assert src.frame("transfer.request", request) is None
    tid = _events(sender, src.connection_id, "transfer.send")[-1]["transferId"]
    src.call("transfer.meta", {"transferId": tid, "size": 3})
    _send_file(services, src, tid, b"abc", "binary")
    src.call("transfer.complete", {"transferId": tid})
    assert services.workspace.get(keys.workspace_object("ops", path))[0] == b"abc"
    client.call("config.set", {"path": "timeouts.toolMs"})


def test_a_node_may_request_nothing_else(parties, sender, services):
    from orbital.domain.workspace_paths import tool_result_path

    src, dst, client = parties
    assert client.frame("tool.invoke", {"tool": "src__Bash", "args": {}}) is None
    call_id = _events(sender, src.connection_id, "tool.invoke")[0]["callId"]
    saved = f"gsv:{tool_result_path(call_id)}"

    def refused(params: dict[str, Any], node: Any = src) -> dict[str, Any]:
        return node.error("transfer.request", params)

    assert refused({"source": "src:r.txt", "destination": saved}) == {"code": 400, "message": "callId required"}
    assert refused({"source": "dst:r.txt", "destination": saved, "callId": call_id}) == {
        "code": 403,
        "message": "A node may only send its own files",
    }
    for elsewhere in ("gsv:SOUL.md", "gsv:tool-results/other.txt", f"dst:{call_id}.txt", f"{saved}.exe"):
        assert refused({"source": "src:r.txt", "destination": elsewhere, "callId": call_id}) == {
            "code": 403,
            "message": "A node may only save a tool result, to gsv:tool-results/{callId}.{ext}",
        }
    other = f"gsv:{tool_result_path('nope')}"
    assert refused({"source": "src:r.txt", "destination": other, "callId": "nope"}) == {
        "code": 404,
        "message": "Unknown callId",
    }
    # another node's call
    assert refused({"source": "dst:r.txt", "destination": saved, "callId": call_id}, dst) == {
        "code": 404,
        "message": "Unknown callId",
    }
    assert src.call("tool.result", {"callId": call_id, "result": "done"}) == {"ok": True}
    assert refused({"source": "src:r.txt", "destination": saved, "callId": call_id}) == {
        "code": 409,
        "message": "Call already answered",
    }
    assert not _events(sender, src.connection_id, "transfer.send")
    # a client is not bound by any of this
    _request(client, "src:r.txt", "gsv:SOUL.md")
    assert _events(sender, src.connection_id, "transfer.send")


def test_every_workspace_direction_on_the_file_workspace(parties, sender, services, tmp_path):
    """The engine through the `Workspace` port alone: the same transfers with the workspace on files, its presigned
    URLs served over HTTP by its own route."""
    from orbital.local.object_urls import ObjectRoute, mount
    from orbital.store.backends.files import FileWorkspace

    from tests.support.asgi_server import elsewhere, serving

    src, dst, client = parties
    store = FileWorkspace(tmp_path / "objects")
    services.__dict__["workspace"] = store
    try:
        with serving(mount(elsewhere, ObjectRoute(store))) as base:
            store.set_base_url(base)
            data = os.urandom(300_000)
            # node -> workspace, in chunks (parts stored, then assembled)
            _request(client, "src:photo.png", "gsv:media/photo.png")
            tid = _events(sender, src.connection_id, "transfer.send")[-1]["transferId"]
            src.call("transfer.meta", {"transferId": tid, "size": len(data), "mime": "image/png"})
            _send_file(services, src, tid, data, "text", reverse=True)
            src.call("transfer.complete", {"transferId": tid})
            stored = store.get("agents/main/media/photo.png")
            assert stored is not None and stored[0] == data and stored[1].content_type == "image/png"
            # workspace -> node, in chunks (ranged reads)
            _request(client, "gsv:media/photo.png", "dst:photo.png")
            tid = _events(sender, dst.connection_id, "transfer.receive")[-1]["transferId"]
            dst.call("transfer.accept", {"transferId": tid})
            assert _received_bytes(sender, dst.connection_id, tid) == data
            dst.call("transfer.done", {"transferId": tid, "bytesWritten": len(data)})
            # node -> workspace -> node, through presigned URLs
            _request(client, "src:big.bin", "gsv:big.bin", mode="presigned")
            tid = _events(sender, src.connection_id, "transfer.send")[-1]["transferId"]
            src.call("transfer.meta", {"transferId": tid, "size": len(data)})
            upload = _events(sender, src.connection_id, "transfer.start")[-1]["uploadUrl"]
            assert upload.startswith(f"{base}/_objects/")
            assert requests.put(upload, data=data, timeout=10).status_code == 200
            assert store.head("agents/main/big.bin") is None  # nothing visible before the check
            src.call("transfer.complete", {"transferId": tid})
            assert store.get("agents/main/big.bin")[0] == data
            _request(client, "gsv:big.bin", "dst:big.bin", mode="presigned")
            tid = _events(sender, dst.connection_id, "transfer.receive")[-1]["transferId"]
            dst.call("transfer.accept", {"transferId": tid})
            url = _events(sender, dst.connection_id, "transfer.end")[-1]["downloadUrl"]
            assert requests.get(url, timeout=10).content == data
            dst.call("transfer.done", {"transferId": tid, "bytesWritten": len(data)})
        assert [r["ok"] for r in _responses(sender, client.connection_id)] == [True, True, True, True]
        assert [i.key for i in store.list_all("")] == ["agents/main/big.bin", "agents/main/media/photo.png"]
        assert len([p for p in store.blobs.rglob("*") if p.is_file()]) == 1  # equal bytes, one blob; no part left
    finally:
        store.close()
