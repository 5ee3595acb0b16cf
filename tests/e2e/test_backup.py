"""Local backups of a real `orbital dev`, as a user meets them: `orbital backup now` asks the running gateway, a
restore (refused while it runs) brings back a session deleted after the backup, kill -9 in the middle of a backup
loses nothing (the earlier backup stays valid, the next start removes the partial one), and automatic backups come
on `backup.every` and are pruned to `backup.keep`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

from orbital.client import GatewayClient, RpcFailedError
from orbital.local import backup
from orbital.local.store import LocalStore
from orbital.store import keys

from tests.conftest import ROOT, wait_for
from tests.e2e.conftest import GatewayProcess, store_for
from tests.support.agent import configure_fake_model, follow_run
from tests.support.fake_llm import FakeLLM, reply


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ORBITAL_"))}
    return subprocess.run(
        [sys.executable, "-m", "orbital.cli.main", "backup", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _history_texts(client: GatewayClient, key: str) -> list[str]:
    messages = client.call("session.preview", {"sessionKey": key}).get("messages") or []
    texts = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(part.get("text", "") for part in content if isinstance(part, dict))
    return texts


def test_a_restore_brings_back_a_deleted_session(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    key = f"agent:main:e2e-{uuid.uuid4().hex[:8]}"
    gw = GatewayProcess(data_dir, auth="token").start()  # as `make dev` runs it: `backup now` finds its token
    try:
        with FakeLLM() as llm, GatewayClient(gw.url, timeout=20) as client:
            client.connect("client", "backup-admin", token=gw.token)
            configure_fake_model(client, llm.base_url)
            llm.responder = lambda _request: reply("Behind the blue door.")
            started = client.call("chat.send", {"sessionKey": key, "message": "where is the key?"})
            assert follow_run(client, started["runId"])[-1]["state"] == "final"
            assert "Behind the blue door." in _history_texts(client, key)

            made = _cli("now", "--data-dir", str(data_dir), "--json")
            assert made.returncode == 0, made.stderr
            name = json.loads(made.stdout)["name"]
            assert client.call("backup.status", {})["last"]["name"] == name

            # the session is deleted: every item of its partition, beside the running gateway
            table = store_for(gw).table
            doomed = [(i["PK"]["S"], i["SK"]["S"]) for i in table.scan_items() if i["PK"]["S"] == keys.session_pk(key)]
            assert doomed
            for item_key in doomed:
                table.delete(item_key)
            assert "Behind the blue door." not in _history_texts(client, key)

        refused = _cli("restore", name, "--data-dir", str(data_dir))
        assert refused.returncode == 1 and "stop it first" in refused.stderr
    finally:
        gw.stop()

    listed = _cli("list", "--data-dir", str(data_dir), "--verify")
    assert listed.returncode == 0 and name in listed.stdout and "verified" in listed.stdout
    restored = _cli("restore", name, "--data-dir", str(data_dir))
    assert restored.returncode == 0, restored.stderr
    aside = list(tmp_path.glob("data.replaced-*"))
    assert len(aside) == 1 and str(aside[0]) in restored.stdout

    gw = GatewayProcess(data_dir, auth="token").start()  # as `make dev` runs it: `backup now` finds its token
    try:
        with GatewayClient(gw.url, timeout=20) as client:
            client.connect("client", "backup-admin", token=gw.token)
            assert "Behind the blue door." in _history_texts(client, key)
            assert client.call("backup.status", {})["count"] == 1  # the backups moved with the data directory
    finally:
        gw.stop()


def test_kill_9_during_a_backup_loses_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    gw = GatewayProcess(data_dir).start()
    try:
        with GatewayClient(gw.url, timeout=60) as client:
            client.connect("client", "backup-admin")
            first = client.call("backup.run", {})
    finally:
        gw.stop()
    directory = data_dir / "backups"
    # many objects, so that the next backup takes a while (each is linked into the backup and read back)
    store = LocalStore.open(data_dir, durable=False)
    try:
        for i in range(1500):
            store.workspace.put(f"agents/main/bulk/{i:05}.bin", os.urandom(48 * 1024))
    finally:
        store.close()

    gw = GatewayProcess(data_dir).start()
    outcome: dict[str, Any] = {}

    def run_backup() -> None:
        try:
            with GatewayClient(gw.url, timeout=120) as client:
                client.connect("client", "backup-admin")
                outcome["result"] = client.call("backup.run", {})
        except Exception as exc:  # the gateway dies under it
            outcome["error"] = exc

    caller = threading.Thread(target=run_backup)
    try:
        caller.start()

        def partial() -> list[str]:
            return [n for n in os.listdir(directory) if n.startswith(backup.PARTIAL)] if directory.is_dir() else []

        wait_for(lambda: partial() or outcome, timeout=60, interval=0.001)
        assert partial() and not outcome, "the backup ended before it could be interrupted"
        os.kill(gw.proc.pid, signal.SIGKILL)
        caller.join(60)
        assert "result" not in outcome
        assert partial()  # what the kill left
    finally:
        gw.stop()
    # the earlier backup is listed alone, and whole
    listed = backup.list_backups(directory)
    assert [b.name for b in listed] == [first["name"]]
    backup.verify(directory, listed[0].path, deep=True)

    gw = GatewayProcess(data_dir).start()  # the next start cleans up
    try:
        assert not [n for n in os.listdir(directory) if n.startswith(backup.PARTIAL)]
        named = set(listed[0].manifest["objects"].values())
        assert {p.name for p in (directory / "blobs").glob("*/*")} == named
        with GatewayClient(gw.url, timeout=120) as client:
            client.connect("client", "backup-admin")
            status = client.call("backup.status", {})
            assert status["count"] == 1 and status["last"]["name"] == first["name"]
            # nothing was lost: every object is there, and the next backup has them all
            workspace = store_for(gw).workspace
            assert len(list(workspace.list_all("agents/main/bulk/"))) == 1500
            again = client.call("backup.run", {})
            assert again["objects"] >= 1500 and again["verified"] is True
    finally:
        gw.stop()


def test_automatic_backups_on_every_pruned_to_keep(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    gw = GatewayProcess(data_dir).start()
    try:
        with GatewayClient(gw.url, timeout=30) as client:
            client.connect("client", "backup-admin")
            status = client.call("backup.status", {})
            assert status["available"] is True and status["every"] == "off" and status["next"] is None
            assert status["keep"] == 7 and status["dir"] == str(data_dir.resolve() / "backups")
            try:
                client.call("config.set", {"path": "backup.every", "value": "daily"})
                raise AssertionError("a bad duration was accepted")
            except RpcFailedError as exc:
                assert exc.code == 400
            client.call("config.set", {"path": "backup.keep", "value": 2})
            client.call("config.set", {"path": "backup.every", "value": "1s"})
            seen: set[str] = set()

            def three_taken() -> bool:
                seen.update(b.name for b in backup.list_backups(data_dir / "backups"))
                return len(seen) >= 3

            wait_for(three_taken, timeout=60, interval=0.05)
            client.call("config.set", {"path": "backup.every", "value": "off"})
            wait_for(lambda: not client.call("backup.status", {})["running"], timeout=60)
            kept = backup.list_backups(data_dir / "backups")
            seen.update(b.name for b in kept)
            assert len(kept) == 2 and [b.name for b in kept] == sorted(seen)[-2:]
            status = client.call("backup.status", {})
            assert status["count"] == 2 and status["every"] == "off" and status["last"]["name"] == kept[-1].name
            # the store holds the blobs the two kept name, no more
            named = set().union(*(set(b.manifest["objects"].values()) for b in kept))
            assert {p.name for p in (data_dir / "backups" / "blobs").glob("*/*")} == named
    finally:
        gw.stop()
