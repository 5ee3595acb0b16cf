"""Device tokens with a real `orbital dev` and a real `orbital node`: a node started with its own node token
registers as its bound node, the token is no client's credential, and revoking it closes the node's socket and
refuses its reconnects (the node stops, refused for good)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from orbital.client import GatewayClient, RpcFailedError

from tests.conftest import wait_for
from tests.e2e.conftest import ROOT, GatewayProcess, end


@pytest.fixture
def gateway_with_token(tmp_path: Path) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(tmp_path / "data", auth="token").start()
    yield gw
    gw.stop()


def _tools(owner: GatewayClient) -> list[str]:
    return [t["name"] for t in owner.call("tools.list")["tools"]]


def test_a_node_with_its_own_token_is_cut_off_by_revoking_it(gateway_with_token: GatewayProcess, tmp_path: Path):
    gw = gateway_with_token
    with GatewayClient(gw.url, timeout=15) as owner:
        owner.connect("client", "owner", token=gw.token)
        made = owner.call("device.token.create", {"name": "laptop", "role": "node", "nodeId": "laptop"})

        # the node token is no client's credential, nor another node's
        with GatewayClient(gw.url, timeout=15) as intruder:
            with pytest.raises(RpcFailedError) as refused:
                intruder.connect("client", "intruder", token=made["token"])
            assert refused.value.code == 403

        workspace = tmp_path / "laptop" / "ws"
        workspace.mkdir(parents=True)
        log_file = tmp_path / "laptop.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ORBITAL_"))}
        env["ORBITAL_TOKEN"] = made["token"]  # the node's own token, in the environment
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "orbital.cli.main",
                "node",
                "--url",
                gw.url,
                "--id",
                "laptop",
                "--workspace",
                str(workspace),
                "--log-file",
                str(log_file),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for(lambda: "laptop__Bash" in _tools(owner) or proc.poll() is not None, 30, 0.05)
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            listed = owner.call("device.token.list")["tokens"]
            assert [(t["name"], t["lastUsedAt"] is not None) for t in listed] == [("laptop", True)]

            revoked = owner.call("device.token.revoke", {"tokenId": made["tokenId"]})
            assert revoked == {"tokenId": made["tokenId"], "revoked": True, "closed": 1}
            # its socket is closed, and its reconnect is refused: the node stops, refused for good
            assert proc.wait(timeout=60) == 2
            assert "laptop__Bash" not in _tools(owner)
            assert "refused this node (401)" in (proc.stderr.read() if proc.stderr else "")
        finally:
            if proc.poll() is None:
                end(proc, signal.SIGINT, 15)
            if proc.stderr:
                proc.stderr.close()
