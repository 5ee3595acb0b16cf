"""What several benchmarks share: free ports, `orbital dev` as its own process, an echo server process, percentiles
and a process's CPU time and resident memory (from /proc)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not come up") from None
            time.sleep(0.05)


def start_gateway(
    data_dir: Path, *extra: str, source: Path = ROOT, python: str | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """`orbital dev` in its own process, as users run it; returns the process and its WebSocket URL. `source` is
    the checkout whose code and template it runs (another one to compare versions in one run), `python` the
    interpreter (that checkout's own environment when its dependencies differ; default: this one)."""
    port = free_port()
    source = source.resolve()
    env = {**os.environ, "PYTHONPATH": str(source / "layers" / "orbital")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    command = [python or sys.executable, "-c", "from orbital.cli.main import main; main()", "dev", "--port", str(port)]
    if '"--auth"' in (source / "layers" / "orbital" / "orbital" / "cli" / "main.py").read_text(encoding="utf-8"):
        command += ["--auth", "same-user"]  # token-less, as checkouts from before the token by default ran
    proc = subprocess.Popen(
        [*command, "--data-dir", str(data_dir), *extra], env=env, stdout=subprocess.DEVNULL, cwd=source
    )
    wait_http(f"http://127.0.0.1:{port}/health", proc)
    return proc, f"ws://127.0.0.1:{port}/ws"


ECHO_SERVER = """
import asyncio, json, sys
from websockets.asyncio.server import serve

async def handler(ws):
    async for message in ws:
        frame = json.loads(message)
        await ws.send(json.dumps({"type": "res", "id": frame.get("id"), "ok": True, "payload": {}}))

async def main():
    async with serve(handler, "127.0.0.1", int(sys.argv[1]), max_size=None):
        print("ready", flush=True)
        await asyncio.Future()

asyncio.run(main())
"""


def start_echo() -> tuple[subprocess.Popen[bytes], str]:
    """The baseline: a bare `websockets` server in its own process answering every frame with a `res` frame."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", ECHO_SERVER, str(port)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != b"ready":
        raise RuntimeError("the echo server did not start")
    return proc, f"ws://127.0.0.1:{port}/ws"


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def p50(samples: list[float]) -> float:
    return statistics.median(samples)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def children(pid: int) -> list[int]:
    """A process's children and theirs (the gateway's Step Functions process)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            listed = (task / "children").read_text().split()
        except FileNotFoundError:  # a thread that just ended
            continue
        for child in listed:
            found += [int(child), *children(int(child))]
    return found


def tree_rss_mib(pid: int) -> tuple[float, float]:
    """Resident memory of a process, and of it with its children."""
    own = rss_mib(pid)
    return own, own + sum(rss_mib(c) for c in children(pid))


def connect_frame(client_id: str | None = None) -> str:
    client: dict[str, Any] = {"mode": "client"}
    if client_id:
        client["id"] = client_id
    return json.dumps({"type": "req", "id": "c", "method": "connect", "params": {"minProtocol": 1, "client": client}})


async def open_connected(url: str, client_id: str | None = None) -> Any:
    """A socket past its `connect` (the echo server answers that frame like any other)."""
    from websockets.asyncio.client import connect

    ws = await connect(url, max_size=None)
    await ws.send(connect_frame(client_id))
    await ws.recv()
    return ws


def run(coro: Any) -> Any:
    return asyncio.run(coro)
