"""Durability of the local gateway, as a user meets it: several sockets stream writes, the process is killed with
SIGKILL in the middle, and after a restart on the same data directory every write that was acknowledged is there.
Also: a second gateway on the same directory is refused, and what was in flight at the crash ends cleanly."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from orbital.client import GatewayClient
from orbital.store import keys

from tests.conftest import ROOT, wait_for
from tests.e2e.conftest import GatewayProcess, NodeProcess, store_for

WRITERS = 4
STREAM_SECONDS = 2.5


class Writer(threading.Thread):
    """Streams workspace writes, config sets and session patches; keeps what was acknowledged."""

    def __init__(self, url: str, index: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.url, self.index, self.stop = url, index, stop
        self.files: dict[str, str] = {}
        self.config: dict[str, int] = {}
        self.sessions: dict[str, str] = {}
        self.ended_by: BaseException | None = None

    def run(self) -> None:
        try:
            with GatewayClient(self.url, timeout=10) as client:
                client.connect("client", f"writer-{self.index}")
                i = 0
                while not self.stop.is_set():
                    kind = i % 3
                    if kind == 0:
                        path, content = f"crash/w{self.index}/{i}.md", f"write {i} of writer {self.index}\n"
                        client.call("workspace.write", {"path": path, "content": content})
                        self.files[path] = content
                    elif kind == 1:
                        path = f"crashtest.w{self.index}.k{i}"
                        client.call("config.set", {"path": path, "value": i})
                        self.config[path] = i
                    else:
                        key, label = f"agent:main:crash-{self.index}-{i}", f"label {i}"
                        client.call("session.patch", {"sessionKey": key, "label": label})
                        self.sessions[key] = label
                    i += 1
        except Exception as exc:  # the gateway died under us: the write in flight was never acknowledged
            self.ended_by = exc


def test_acknowledged_writes_survive_kill_9(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    gateway = GatewayProcess(data_dir).start()
    node = None
    try:
        node = NodeProcess(gateway, "crash-node", tmp_path / "node" / "ws").start()
        payload = os.urandom(3 * 1024 * 1024 + 123)
        (node.workspace / "upload.bin").write_bytes(payload)
        with GatewayClient(gateway.url, timeout=60) as client:
            client.connect("client", "crash-admin")
            done = client.call(
                "transfer.request",
                {"source": "crash-node:upload.bin", "destination": "gsv:crash/upload.bin", "mode": "chunks"},
                timeout=120,
            )
            assert done["bytesTransferred"] == len(payload)
        stop = threading.Event()
        writers = [Writer(gateway.url, i, stop) for i in range(WRITERS)]
        for writer in writers:
            writer.start()
        deadline = time.monotonic() + STREAM_SECONDS
        while time.monotonic() < deadline and all(w.is_alive() for w in writers):
            time.sleep(0.05)
        assert gateway.proc is not None
        os.kill(gateway.proc.pid, signal.SIGKILL)  # no shutdown, no final checkpoint
        gateway.proc.wait(timeout=10)
        for writer in writers:
            writer.join(timeout=20)
        stop.set()
        gateway.stop()
        acknowledged = sum(len(w.files) + len(w.config) + len(w.sessions) for w in writers)
        assert acknowledged > 100, acknowledged  # a real stream, in every kind
        assert all(w.files and w.config and w.sessions for w in writers), [w.ended_by for w in writers]

        restarted = GatewayProcess(data_dir).start()
        try:
            with GatewayClient(restarted.url, timeout=30) as client:
                client.connect("client", "crash-check")
                missing = []
                for writer in writers:
                    for path, content in writer.files.items():
                        if client.call("workspace.read", {"path": path}).get("content") != content:
                            missing.append(path)
                    config = client.call("config.get", {"path": f"crashtest.w{writer.index}"}).get("value") or {}
                    missing += [p for p, v in writer.config.items() if config.get(p.rsplit(".", 1)[1]) != v]
                    for key, label in writer.sessions.items():
                        if client.call("session.get", {"sessionKey": key}).get("label") != label:
                            missing.append(key)
                assert missing == [], f"{len(missing)} of {acknowledged} acknowledged writes lost: {missing[:10]}"
            stored = store_for(restarted).workspace.get(keys.workspace_object("main", "crash/upload.bin"))
            assert stored is not None and hashlib.sha256(stored[0]).digest() == hashlib.sha256(payload).digest()
        finally:
            restarted.stop()
    finally:
        if node is not None:
            node.stop()
        gateway.stop()


def test_a_second_gateway_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = GatewayProcess(data_dir).start()
    try:
        second = subprocess.run(
            [sys.executable, "-m", "orbital.cli.main", "dev", "--port", "0", "--data-dir", str(data_dir)],
            cwd=ROOT,
            env={k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ORBITAL_"))},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2
        assert "in use by another Orbital gateway" in second.stderr and str(first.proc.pid) in second.stderr
        assert first.runtime()["pid"] == first.proc.pid  # the running one's files are left alone
        with GatewayClient(first.url, timeout=10) as client:
            client.connect("client")
            client.call("workspace.write", {"path": "still.md", "content": "fine"})
    finally:
        first.stop()


def test_work_in_flight_at_a_crash_ends_cleanly(tmp_path: Path) -> None:
    """A client's tool call pending on a node when the process is killed: after the restart the dead node is not
    listed, the call is no longer pending (it was failed as the node's socket was closed), and a node with the
    same id can connect again."""
    data_dir = tmp_path / "data"
    gateway = GatewayProcess(data_dir).start()
    node_params: dict[str, Any] = {
        "tools": [{"name": "Bash", "description": "x", "inputSchema": {"type": "object"}}],
        "nodeRuntime": {
            "hostRole": "execution",
            "hostCapabilities": ["filesystem.list", "filesystem.read", "filesystem.write", "shell.exec"],
            "toolCapabilities": {"Bash": ["shell.exec"]},
        },
    }
    with GatewayClient(gateway.url, timeout=10) as ghost, GatewayClient(gateway.url, timeout=10) as client:
        ghost.connect("node", "ghost", **node_params)
        client.connect("client", "asker")
        client.send_raw('{"type":"req","id":"pending","method":"tool.invoke","params":{"tool":"ghost__Bash"}}')
        ghost.next_event("tool.invoke", timeout=10)  # the call is now pending on the node
        assert _pending_calls(store_for(gateway)) == 1
        assert gateway.proc is not None
        os.kill(gateway.proc.pid, signal.SIGKILL)
        gateway.proc.wait(timeout=10)
    gateway.stop()
    restarted = GatewayProcess(data_dir).start()
    try:
        assert _pending_calls(store_for(restarted)) == 0
        with GatewayClient(restarted.url, timeout=10) as client:
            client.connect("client", "checker")
            assert [t for t in client.call("tools.list")["tools"] if t["name"].startswith("ghost__")] == []
            with GatewayClient(restarted.url, timeout=10) as ghost:
                ghost.connect("node", "ghost", **node_params)
                names = [t["name"] for t in client.call("tools.list")["tools"]]
                assert "ghost__Bash" in names
    finally:
        restarted.stop()


def _pending_calls(store: Any) -> int:
    """Deferred calls still waiting for an answer."""
    found = [
        item
        for item in store.table.scan_items()
        if item["PK"]["S"].startswith("CALL#") and item.get("st") == {"S": "pending"}
    ]
    return len(found)


def test_a_run_in_flight_at_a_crash_does_not_hold_its_session(tmp_path: Path) -> None:
    from tests.support.agent import configure_fake_model, follow_run
    from tests.support.fake_llm import FakeLLM, hang, reply

    data_dir = tmp_path / "data"
    with FakeLLM() as llm:
        gateway = GatewayProcess(data_dir).start()
        with GatewayClient(gateway.url, timeout=10) as client:
            client.connect("client", "crash-chat")
            configure_fake_model(client, llm.base_url)
            llm.script(hang(max_s=30), reply("after the restart"), reply("third"))
            client.call("chat.send", {"sessionKey": "main", "message": "a long question"})
            llm.wait_for_requests(1)  # the run is waiting for the model
            queued = client.call("chat.send", {"sessionKey": "main", "message": "and a follow-up"})
            assert queued["queued"] is True
            assert gateway.proc is not None
            os.kill(gateway.proc.pid, signal.SIGKILL)
            gateway.proc.wait(timeout=10)
        gateway.stop()
        llm.release()
        restarted = GatewayProcess(data_dir).start()
        try:
            with GatewayClient(restarted.url, timeout=20) as client:
                client.connect("client", "crash-chat-2")

                def replies() -> list[Any]:
                    messages = client.call("session.preview", {"sessionKey": "main"})["messages"]
                    return [m for m in messages if m["role"] == "assistant"]

                # the interrupted run let go of the session, left its trace, and the queued follow-up ran on its own
                answered = wait_for(lambda: [m for m in replies() if "after the restart" in str(m["content"])], 30)
                assert answered
                texts = [str(m["content"]) for m in replies()]
                assert "restarted while this run was in progress" in texts[0], texts
                started = client.call("chat.send", {"sessionKey": "main", "message": "hello again"})
                assert "queued" not in started
                assert follow_run(client, started["runId"], timeout=30)[-1]["state"] == "final"
        finally:
            restarted.stop()
