"""`orbital devices`, `orbital node --pair` and `orbital login --pair` against a real `orbital dev` with a token: an
admin makes a pairing code, a "new machine" (a home and config directory of its own, no token anywhere) trades it for
a device token saved 0600 in its config directory, and its `orbital` commands then present that token by themselves;
revoking the token cuts the device off."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.client import GatewayClient

from tests.conftest import wait_for
from tests.e2e.conftest import ROOT, GatewayProcess, end

TOKEN = "devices-cli-admin-token-0123456789abcdef"
CODE = re.compile(r"Pairing code: (\S+)")


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    gateway = GatewayProcess(tmp_path_factory.mktemp("devices") / "data", token=TOKEN).start()
    yield gateway
    gateway.stop()


def base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ORBITAL_", "XDG_"))}


def admin_env(tmp: Path) -> dict[str, str]:
    env = base_env()
    env.update(ORBITAL_TOKEN=TOKEN, HOME=str(tmp / "admin-home"), XDG_CONFIG_HOME=str(tmp / "admin-config"))
    return env


def machine_env(home: Path) -> dict[str, str]:
    """A machine with no token of any kind: no ORBITAL_TOKEN, an empty home, a config directory of its own."""
    env = base_env()
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), ORBITAL_DATA_DIR=str(home / ".orbital"))
    home.mkdir(parents=True, exist_ok=True)
    return env


def orbital(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orbital.cli.main", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def add(gw: GatewayProcess, tmp: Path, *args: str) -> tuple[str, str]:
    """`orbital devices add ARGS` as the admin: the code and the command it says to run."""
    done = orbital(admin_env(tmp), "devices", "add", "--url", gw.url, *args)
    assert done.returncode == 0, done.stderr
    match = CODE.search(done.stdout)
    assert match, done.stdout
    command = next(line.strip() for line in done.stdout.splitlines() if line.strip().startswith("orbital "))
    return match.group(1), command


def saved(home: Path) -> dict[str, Any]:
    path = home / ".config" / "orbital" / "devices.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    return dict(json.loads(path.read_text()))


def tools(gw: GatewayProcess) -> list[str]:
    with GatewayClient(gw.url, timeout=15) as c:
        c.connect("client", token=TOKEN)
        return [t["name"] for t in c.call("tools.list")["tools"]]


def listed(gw: GatewayProcess, tmp: Path) -> list[dict[str, Any]]:
    done = orbital(admin_env(tmp), "devices", "list", "--json", "--url", gw.url)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout)["tokens"])


class Node:
    def __init__(self, env: dict[str, str], args: list[str], log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orbital.cli.main", "node", *args, "--log-file", str(log)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def stop(self) -> tuple[str, str]:
        if self.proc.poll() is None:
            end(self.proc, 2, 15)
        out, err = self.proc.communicate(timeout=15)
        return out, err


def test_a_node_paired_with_a_code_runs_on_its_own_token_until_revoked(gw: GatewayProcess, tmp_path: Path) -> None:
    node_id = f"box{uuid.uuid4().hex[:6]}"
    code, command = add(gw, tmp_path, "--role", "node", "--node-id", node_id, "--name", "build box")
    assert command == f"orbital node --pair {code} --url {gw.url} --id {node_id}"
    home = tmp_path / "machine"
    env = machine_env(home)
    workspace = home / "ws"
    workspace.mkdir()
    # the command as printed, plus where this test keeps the node's workspace and log
    args = [*command.split()[2:], "--workspace", str(workspace)]
    node = Node(env, args, home / "node.log")
    try:
        wait_for(lambda: f"{node_id}__Bash" in tools(gw), timeout=30, interval=0.2)
    finally:
        out, err = node.stop()
    kept = saved(home)["gateways"][gw.url]["node"]
    assert kept["role"] == "node"
    assert kept["nodeId"] == node_id
    secret = kept["token"]
    assert secret != TOKEN
    assert secret not in out + err + (home / "node.log").read_text()  # never printed nor logged
    assert "Paired with" in out

    # the next start needs neither the code nor --id: the saved token (bound to its node id) is found for the URL
    node = Node(env, ["--url", gw.url, "--workspace", str(workspace)], home / "node.log")
    try:
        wait_for(lambda: f"{node_id}__Bash" in tools(gw), timeout=30, interval=0.2)
        device = next(t for t in listed(gw, tmp_path) if t["name"] == "build box")
        assert (device["role"], device["binding"], device["revoked"]) == ("node", {"nodeId": node_id}, False)
        assert device["lastUsedAt"]
        table = orbital(admin_env(tmp_path), "devices", "--url", gw.url)
        row = next(line for line in table.stdout.splitlines() if "build box" in line)
        assert f"node {node_id}" in row
        assert secret not in table.stdout

        revoked = orbital(admin_env(tmp_path), "devices", "revoke", device["tokenId"], "--url", gw.url)
        assert revoked.returncode == 0, revoked.stderr
        assert f"Revoked {device['tokenId']}" in revoked.stdout
        # the node's socket is closed and its token refused from then on: its tools leave the gateway
        wait_for(lambda: f"{node_id}__Bash" not in tools(gw), timeout=30, interval=0.2)
    finally:
        node.stop()
    assert next(t for t in listed(gw, tmp_path) if t["name"] == "build box")["revoked"] is True


def test_login_pair_then_every_command_presents_the_device_token(gw: GatewayProcess, tmp_path: Path) -> None:
    code, command = add(gw, tmp_path, "--role", "client", "--name", "laptop")
    assert command == f"orbital login --pair {code} --url {gw.url}"
    home = tmp_path / "laptop"
    env = machine_env(home)
    without = orbital(env, "call", "--url", gw.url, "connect")
    assert without.returncode == 1  # no token anywhere yet: refused

    login = orbital(env, *command.split()[1:])
    assert login.returncode == 0, login.stderr
    kept = saved(home)["gateways"][gw.url]["client"]
    assert kept["role"] == "client"
    assert kept["token"] not in login.stdout + login.stderr

    hello = orbital(env, "call", "--url", gw.url, "connect")
    assert hello.returncode == 0, hello.stderr
    assert json.loads(hello.stdout)["type"] == "hello-ok"
    assert orbital(env, "call", "--url", gw.url, "sessions.list", "{}").returncode == 0

    # the code was used once
    again = orbital(machine_env(tmp_path / "other"), "login", "--pair", code, "--url", gw.url)
    assert again.returncode == 1
    assert "refused the code (401)" in again.stderr

    # a client's token does not manage devices
    refused = orbital(env, "devices", "--url", gw.url)
    assert refused.returncode == 1
    assert "managing devices needs an admin token" in refused.stderr

    token_id = kept["tokenId"]
    assert orbital(admin_env(tmp_path), "devices", "revoke", token_id, "--url", gw.url).returncode == 0
    after = orbital(env, "call", "--url", gw.url, "connect")
    assert after.returncode == 1


def test_a_wrong_code_is_refused(gw: GatewayProcess, tmp_path: Path) -> None:
    env = machine_env(tmp_path / "m")
    done = orbital(env, "login", "--pair", "WRONG234", "--url", gw.url)
    assert done.returncode == 1
    assert "orbital login: the gateway refused the code (401)" in done.stderr
    assert not (tmp_path / "m" / ".config" / "orbital" / "devices.json").exists()
    node = orbital(env, "node", "--pair", "WRONG234", "--url", gw.url)
    assert node.returncode == 2
    assert "pairing failed" in node.stderr


def test_add_token_prints_the_token_once_and_it_works(gw: GatewayProcess, tmp_path: Path) -> None:
    done = orbital(
        admin_env(tmp_path), "devices", "add", "--role", "viewer", "--name", "wall", "--token", "--url", gw.url
    )
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    assert "\n" not in token and len(token) >= 32
    assert "Shown this once" in done.stderr
    env = machine_env(tmp_path / "wall")
    env["ORBITAL_TOKEN"] = token
    hello = orbital(env, "call", "--url", gw.url, "connect")
    assert hello.returncode == 0, hello.stderr
    assert token not in orbital(admin_env(tmp_path), "devices", "--url", gw.url).stdout


def test_usage_errors(gw: GatewayProcess, tmp_path: Path) -> None:
    env = admin_env(tmp_path)
    for args, message in [
        (["add"], "add needs --role"),
        (["add", "--role", "client", "--node-id", "x"], "--node-id goes with --role node"),
        (["add", "--role", "channel"], "--role channel needs --channel"),
        (["revoke"], "revoke needs the token's ID"),
        (["list", "--role", "node"], "--role go with add"),
    ]:
        done = orbital(env, "devices", *args, "--url", gw.url)
        assert done.returncode == 2, args
        assert message in done.stderr, (args, done.stderr)


def test_a_node_token_bound_to_one_id_does_not_serve_another(gw: GatewayProcess, tmp_path: Path) -> None:
    bound = f"only{uuid.uuid4().hex[:6]}"
    code, _ = add(gw, tmp_path, "--role", "node", "--node-id", bound)
    home = tmp_path / "machine"
    workspace = home / "ws"
    env = machine_env(home)
    workspace.mkdir()
    node = Node(
        env, ["--pair", code, "--url", gw.url, "--id", "someone-else", "--workspace", str(workspace)], home / "n.log"
    )
    try:
        status = node.proc.wait(timeout=60)  # refused for good: the node stops instead of retrying
    finally:
        _, err = node.stop()
    assert status == 2
    assert f"may connect only as node {bound!r}" in err + (home / "n.log").read_text()
    assert not [t for t in tools(gw) if t.startswith("someone-else__")]
