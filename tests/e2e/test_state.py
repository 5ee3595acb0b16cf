"""Sessions, archives and the workspace over real sockets, and their survival across a gateway restart."""

from __future__ import annotations

import gzip
import json
import signal
import uuid

from orbital.client import GatewayClient

from tests.e2e.conftest import GatewayProcess, store_for


def _key() -> str:
    return f"agent:main:e2e-{uuid.uuid4().hex[:8]}"


def test_sessions_and_reset_archive(data_dir):
    """Messages come from the agent loop, which this test stands in for by writing them through the store of a
    fresh gateway before any RPC reads the session (the gateway caches what it has read; see ADR 0005)."""
    key = _key()
    gw = GatewayProcess(data_dir).start()
    try:
        services = store_for(gw)
        services.sessions.mark_chatted(key)
        services.sessions.touch_registry(key)
        services.sessions.append_messages(
            key,
            [
                {"role": "user", "content": "hello"},
                {"role": "assistant", "content": [{"type": "text", "text": "hi there"}]},
                {"role": "user", "content": "bye"},
            ],
        )
        with GatewayClient(gw.url) as client:
            client.connect("client")
            first = client.call("session.get", {"sessionKey": key})
            assert first["sessionKey"] == key
            assert client.call("session.get", {"sessionKey": key})["sessionId"] == first["sessionId"]  # F11
            client.call("session.patch", {"sessionKey": key, "label": "Research"})
            assert client.call("session.stats", {"sessionKey": key})["messageCount"] == 3
            preview = client.call("session.preview", {"sessionKey": key, "limit": 2})
            assert [m["role"] for m in preview["messages"]] == ["assistant", "user"]
            assert preview["messageCount"] == 3
            listed = client.call("sessions.list", {"limit": 100})
            assert [s["sessionKey"] for s in listed["sessions"]] == [key]

            reset = client.call("session.reset", {"sessionKey": key})
            assert reset["oldSessionId"] == first["sessionId"]
            assert reset["archivedMessages"] == 3
            archive_key = f"agents/main/sessions/{first['sessionId']}.jsonl.gz"
            assert reset["archivedTo"].endswith(archive_key)
            found = services.workspace.get(archive_key)
            assert found is not None
            body, info = found
            lines = gzip.decompress(body).decode().split("\n")
            assert [json.loads(line)["role"] for line in lines] == ["user", "assistant", "user"]
            assert info.metadata["messagecount"] == "3"
            after = client.call("session.get", {"sessionKey": key})
            assert after["messageCount"] == 0
            assert after["previousSessionIds"] == [first["sessionId"]]
            assert after["label"] == "Research"
            assert client.call("session.history", {"sessionKey": key})["previousSessionIds"] == [first["sessionId"]]
            assert client.request("session.get", {})["error"] == {"code": 400, "message": "sessionKey required"}
    finally:
        gw.stop()


def test_key_aliases_share_the_canonical_session(client):
    web = client.call("session.get", {"sessionKey": "agent:main:web:dm:local"})
    cli = client.call("session.get", {"sessionKey": "agent:main:cli:dm:main"})
    main = client.call("session.get", {"sessionKey": "main"})
    assert web["sessionId"] == cli["sessionId"] == main["sessionId"]


def test_workspace_round_trip(client):
    base = f"e2e-{uuid.uuid4().hex[:6]}"
    assert client.call("workspace.write", {"path": f"{base}/a.md", "content": "# A"})["written"] is True
    listing = client.call("workspace.list", {"path": base})
    assert listing["files"] == [f"{base}/a.md"]
    assert client.call("workspace.read", {"path": f"{base}/a.md"})["content"] == "# A"
    root = client.call("workspace.list", {})
    assert f"{base}/" in root["directories"]
    assert {"SOUL.md", "AGENTS.md"} <= set(root["files"])  # the seeded workspace
    assert client.call("workspace.delete", {"path": f"{base}/a.md"}) == {"path": f"{base}/a.md", "deleted": True}
    assert client.request("workspace.read", {"path": f"{base}/a.md"})["error"] == {
        "code": 404,
        "message": f"File not found: {base}/a.md",
    }
    assert (
        client.request("workspace.read", {"path": "../etc/passwd"})["error"]["message"] == "Path traversal not allowed"
    )


def test_sessions_config_and_files_survive_a_restart(data_dir):
    key = _key()
    gw = GatewayProcess(data_dir).start()
    try:
        with GatewayClient(gw.url) as c:
            c.connect("client")
            c.call("config.set", {"path": "userTimezone", "value": "Asia/Tokyo"})
            c.call("workspace.write", {"path": "SOUL.md", "content": "my own soul"})
            before = c.call("session.get", {"sessionKey": key})
            c.call("session.patch", {"sessionKey": key, "label": "kept"})
    finally:
        assert gw.stop(signal.SIGINT) == 0
    gw = GatewayProcess(data_dir).start()
    try:
        with GatewayClient(gw.url) as c:
            c.connect("client")
            assert c.call("config.get", {"path": "userTimezone"})["value"] == "Asia/Tokyo"
            assert c.call("workspace.read", {"path": "SOUL.md"})["content"] == "my own soul"  # seeding kept it
            after = c.call("session.get", {"sessionKey": key})
            assert (after["sessionId"], after["createdAt"], after["label"]) == (
                before["sessionId"],
                before["createdAt"],
                "kept",
            )
    finally:
        gw.stop()


def test_a_large_file_is_read_in_parts_and_no_reply_outgrows_a_message(gateway, client):
    from orbital.store import keys

    path = f"e2e-{uuid.uuid4().hex[:6]}/big.md"
    body = ("a line of a large file, ünïcödé included\n" * 5000).encode()  # ~220 KB: over the 128 KB per message
    store_for(gateway).workspace.put(keys.workspace_object("main", path), body, content_type="text/markdown")
    parts, offset = [], 0
    while True:
        part = client.call("workspace.read", {"path": path, "offset": offset})
        assert part["size"] == len(body)
        parts.append(part["content"])
        if not part.get("truncated"):
            break
        assert part["nextOffset"] > offset
        offset = part["nextOffset"]
    assert len(parts) == 3 and "".join(parts).encode() == body  # cut at character boundaries, nothing lost
    small = client.call("workspace.read", {"path": path, "offset": 10, "limit": 5})
    assert small["content"] == body[10:15].decode() and small["nextOffset"] == 15

    # a reply that would still outgrow a message (the whole configuration, here) is a clear error, not silence
    owner = f"e2e-big-{uuid.uuid4().hex[:4]}"
    for i in range(5):
        client.call("config.set", {"path": f"{owner}.v{i}", "value": "z" * 30_000})
    reply = client.request("config.get", {})
    assert reply["ok"] is False and reply["error"]["code"] == 413
    assert reply["error"]["message"].startswith("Reply too large to send: ")
    assert "the limit is 131072" in reply["error"]["message"]
    client.call("config.set", {"path": owner})  # no value: deleted
    assert client.request("config.get", {})["ok"]  # the socket goes on
