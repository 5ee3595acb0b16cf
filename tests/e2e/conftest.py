"""End-to-end fixtures: the real `orbital dev` in a subprocess on a free port, driven over real WebSockets."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


NODE_RUNTIME = {
    "hostRole": "execution",
    "hostCapabilities": ["filesystem.list", "filesystem.read", "filesystem.write", "shell.exec"],
    "toolCapabilities": {"Echo": ["shell.exec"]},
}
"""A node runtime with the execution baseline and an `Echo` tool."""


def in_process_gateway(data_dir: Path, **options: Any) -> Iterator[Any]:
    """A `LocalGateway` in this process (to look inside it), stopped with the environment it changed restored."""
    from orbital.local.server import GatewayOptions, LocalGateway

    from tests.conftest import reset_caches

    saved = dict(os.environ)
    gw = LocalGateway(GatewayOptions(port=0, data_dir=data_dir, project=ROOT, quiet=True, **options))
    try:
        yield gw.start()
    finally:
        gw.stop()
        os.environ.clear()
        os.environ.update(saved)
        reset_caches()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def end(proc: subprocess.Popen[Any], sig: int, timeout: float) -> None:
    """Send `sig` and wait for the process to end; kill it if it has not ended within `timeout` seconds."""
    proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


class GatewayProcess:
    """A real `orbital dev`. With `token`: that token, handed over in the environment (never on a command line).
    Without: `auth="same-user"` (the default here: token-less, this user only, as GSV's clients need), or
    `auth="token"` (what `make dev` does: the gateway draws a token into its data directory, read back into
    `self.token` once it runs)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        token: str | None = None,
        extra_args: list[str] | None = None,
        auth: str | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.token = token
        self.given_token = token
        self.auth = auth or ("token" if token else "same-user")
        self.extra_args = extra_args or []
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.output = ""

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0, *, port: int | None = None) -> GatewayProcess:
        """Start on a port the gateway binds itself (`--port 0`, read back from its runtime.json), or on `port` (a
        restart on the port it had)."""
        self.port = port or 0
        args = [
            sys.executable,
            "-m",
            "orbital.cli.main",
            "dev",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--project",
            str(ROOT),
            *self.extra_args,
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ORBITAL_"))}
        if self.given_token:
            env["ORBITAL_TOKEN"] = self.given_token
        elif self.auth == "same-user":
            args += ["--auth", "same-user"]
        self.proc = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                out = self.proc.stdout.read() if self.proc.stdout else ""
                raise RuntimeError(f"gateway exited early ({self.proc.returncode}):\n{out}")
            if self.port == 0:
                self.port = self._bound_port()
                if self.port == 0:
                    time.sleep(0.05)
                    continue
            try:
                with urllib.request.urlopen(f"{self.http}/health", timeout=1) as resp:
                    if resp.status == 200:
                        if not self.given_token and self.auth == "token":
                            self.token = (self.data_dir / "token").read_text().strip()
                        return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("gateway did not become healthy in time")

    def _bound_port(self) -> int:
        """The port this process wrote into runtime.json once it listens (0 while it has not: a file left by an
        earlier gateway on the same data directory names another pid)."""
        assert self.proc is not None
        try:
            info = self.runtime()
        except (OSError, ValueError):
            return 0
        if info.get("pid") != self.proc.pid:
            return 0
        return int(urllib.parse.urlsplit(info["httpUrl"]).port or 0)

    def runtime(self) -> dict[str, Any]:
        return json.loads((self.data_dir / "runtime.json").read_text())

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30.0) -> int:
        if self.proc is None:
            return 0
        gone = self.proc.poll()  # ended before it was asked to: a kill by the test, or a crash to explain
        if gone is None:
            end(self.proc, sig, timeout)
        self.output = self.proc.stdout.read() if self.proc.stdout else ""
        if self.proc.stdout:
            self.proc.stdout.close()
        code = self.proc.returncode
        if gone is not None:
            print(f"orbital dev on {self.data_dir} had ended by itself, exit status {gone}:", file=sys.stderr)
            print(self.output[-4000:], file=sys.stderr, flush=True)
        self.proc = None
        return code


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "orbital-data"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """One gateway per test module (tests use distinct client ids and keys); isolation-sensitive tests start
    their own `GatewayProcess`."""
    gw = GatewayProcess(tmp_path_factory.mktemp("gateway") / "data").start()
    yield gw
    gw.stop()


@pytest.fixture
def client(gateway: GatewayProcess) -> Iterator[Any]:
    from orbital.client import GatewayClient

    with GatewayClient(gateway.url, timeout=15) as c:
        c.connect("client", token=gateway.token)
        yield c


def store_for(gw: GatewayProcess) -> Any:
    """Services on a running local gateway's data directory, opened beside it (to seed data the RPCs then read)."""
    from orbital.local.store import LocalStore
    from orbital.runtime.services import build_services
    from orbital.settings import Settings

    store = LocalStore.open(gw.data_dir, exclusive=False)
    _opened.append(store)
    return build_services(Settings(), table=store.table, workspace=store.workspace)


_opened: list[Any] = []


@pytest.fixture(autouse=True)
def _close_opened_stores() -> Iterator[None]:
    yield
    while _opened:
        _opened.pop().close()


class NodeProcess:
    """A real `orbital node` subprocess connected to a gateway."""

    def __init__(self, gateway: GatewayProcess, node_id: str, workspace: Path, *extra: str) -> None:
        self.gateway = gateway
        self.node_id = node_id
        self.workspace = workspace
        self.log_file = workspace.parent / f"{node_id}.log"
        self.extra = list(extra)
        self.proc: subprocess.Popen[str] | None = None

    def start(self, timeout: float = 30.0) -> NodeProcess:
        from orbital.client import GatewayClient

        self.workspace.mkdir(parents=True, exist_ok=True)
        args = [
            sys.executable,
            "-m",
            "orbital.cli.main",
            "node",
            "--url",
            self.gateway.url,
            "--id",
            self.node_id,
            "--workspace",
            str(self.workspace),
            "--log-file",
            str(self.log_file),
            *self.extra,
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ORBITAL_"))}
        env["ORBITAL_DATA_DIR"] = str(self.gateway.data_dir)  # where a command of this user finds the token
        if self.gateway.token:
            env["ORBITAL_TOKEN"] = self.gateway.token
        self.proc = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + timeout
        with GatewayClient(self.gateway.url, timeout=10) as c:
            c.connect("client", token=self.gateway.token)
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"node exited: {self.proc.stderr.read() if self.proc.stderr else ''}")
                names = [t["name"] for t in c.call("tools.list")["tools"]]
                if f"{self.node_id}__Bash" in names:
                    return self
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"node {self.node_id} did not register in time")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            end(self.proc, signal.SIGINT, 15)
        if self.proc.stderr:
            self.proc.stderr.close()
        code = self.proc.returncode
        self.proc = None
        return code


@pytest.fixture
def node_factory(gateway: GatewayProcess, tmp_path: Path) -> Iterator[Any]:
    started: list[NodeProcess] = []

    def make(node_id: str, *extra: str) -> NodeProcess:
        node = NodeProcess(gateway, node_id, tmp_path / node_id / "ws", *extra).start()
        started.append(node)
        return node

    yield make
    for node in started:
        node.stop()
