"""`orbital export --agent` and `orbital import --agent` as a user runs them, against a real `orbital dev`: the export
is read beside the running gateway, the import is refused while it runs, and once imported under a new id the agent
is served by the gateway (its memory, sessions and cron job) while the original is unchanged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from orbital.client import GatewayClient

from tests.e2e.conftest import ROOT, GatewayProcess, store_for

MEMORY = "# Memory\n\n- the user's cat is called Miso\n"


def _orbital(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orbital.cli.main", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_an_agent_moves_under_a_new_id_through_the_cli(data_dir: Path, tmp_path: Path) -> None:
    gw = GatewayProcess(data_dir).start()
    try:
        with GatewayClient(gw.url) as client:
            client.connect("client")
            client.call("workspace.write", {"path": "MEMORY.md", "content": MEMORY})
            client.call("config.set", {"path": "apiKeys.anthropic", "value": "sk-e2e-never-exported"})
            client.call(
                "cron.add",
                {
                    "name": "morning",
                    "schedule": {"kind": "cron", "expr": "0 7 * * *", "tz": "UTC"},
                    "spec": {"mode": "task", "message": "Good morning."},
                },
            )
        services = store_for(gw)
        services.sessions.mark_chatted("agent:main:main")
        services.sessions.touch_registry("agent:main:main")
        services.sessions.append_messages("agent:main:main", [{"role": "user", "content": "remember Miso"}])

        archive = tmp_path / "main.zip"
        exported = _orbital("export", "--agent", "main", "--data-dir", str(data_dir), str(archive))
        assert exported.returncode == 0, exported.stderr
        assert "Exported agent main" in exported.stdout and "beside the gateway" in exported.stdout
        assert "apiKeys.anthropic" in exported.stdout
        assert b"sk-e2e-never-exported" not in archive.read_bytes()

        refused = _orbital("import", str(archive), "--agent", "twin", "--data-dir", str(data_dir))
        assert refused.returncode == 1 and "a gateway is running" in refused.stderr
    finally:
        gw.stop()

    imported = _orbital("import", str(archive), "--agent", "twin", "--data-dir", str(data_dir))
    assert imported.returncode == 0, imported.stderr
    assert "Imported agent main as twin" in imported.stdout
    again = _orbital("import", str(archive), "--agent", "twin", "--data-dir", str(data_dir))
    assert again.returncode == 1 and "agent 'twin' already exists" in again.stderr

    gw = GatewayProcess(data_dir).start()
    try:
        with GatewayClient(gw.url) as client:
            client.connect("client")
            assert client.call("workspace.read", {"path": "MEMORY.md", "agentId": "twin"})["content"] == MEMORY
            assert client.call("workspace.read", {"path": "MEMORY.md", "agentId": "main"})["content"] == MEMORY
            keys = {s["sessionKey"] for s in client.call("sessions.list", {"limit": 100})["sessions"]}
            assert {"agent:main:main", "agent:twin:main"} <= keys
            preview = client.call("session.preview", {"sessionKey": "agent:twin:main", "limit": 5})
            assert [m["content"] for m in preview["messages"]] == ["remember Miso"]
            jobs = client.call("cron.list", {"includeDisabled": True})["jobs"]
            assert sorted(j["agentId"] for j in jobs) == ["main", "twin"]
            assert len({j["id"] for j in jobs}) == 2
    finally:
        gw.stop()
