"""Local persistence: what durability costs, how a write's cost grows with the state, and how long a restart takes.

1. Throughput of acknowledged writes (`workspace.write`, `config.set`, `session.patch`, from several sockets) with
   durability on (fsync before the answer) and off (the same writes, no fsync), in the same run; the ratio is the
   number to read (this machine is shared and noisy).
2. The latency of one write with 1,000 and with 100,000 items stored (it should be flat: a write is a row of the
   SQLite table, not a snapshot).
3. Restart with 100,000 messages and 10,000 workspace files: after a clean stop and after a crash (SQLite replays
   its WAL), with the data directory's size; in this process, and as a user sees it: a new `orbital dev` process
   from its start until `/health` answers.

    python bench/persistence.py [--writes 600] [--messages 100000] [--files 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "orbital"))
sys.path.insert(0, str(ROOT))


def gateway(data_dir: Path, *, durable: bool = True) -> Any:
    from orbital.local.server import GatewayOptions, LocalGateway

    options = GatewayOptions(data_dir=data_dir, port=0, project=ROOT, durable=durable, tick_interval=0)
    return LocalGateway(options).start()


def write_stream(url: str, clients: int, writes: int) -> float:
    """Acknowledged writes per second from `clients` sockets sharing `writes` writes."""
    from orbital.client import GatewayClient

    per_client = writes // clients
    barrier = threading.Barrier(clients + 1)

    def run(index: int) -> None:
        with GatewayClient(url, timeout=30) as client:
            client.connect("client", f"bench-{index}")
            barrier.wait()
            for i in range(per_client):
                kind = i % 3
                if kind == 0:
                    client.call("workspace.write", {"path": f"bench/{index}/{i}.md", "content": f"note {i}\n" * 20})
                elif kind == 1:
                    client.call("config.set", {"path": f"bench.c{index}.k{i % 50}", "value": i})
                else:
                    client.call("session.patch", {"sessionKey": f"agent:main:bench-{index}-{i}", "label": str(i)})
            barrier.wait()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    began = time.perf_counter()
    barrier.wait()
    elapsed = time.perf_counter() - began
    for thread in threads:
        thread.join(timeout=60)
    return per_client * clients / elapsed


def throughput(writes: int, clients: int) -> None:
    print(f"1. acknowledged writes/s, {clients} sockets, {writes} writes (A/B/A/B in one run)")
    rates: dict[bool, list[float]] = {True: [], False: []}
    for durable in (True, False, True, False):
        with tempfile.TemporaryDirectory() as tmp:
            gw = gateway(Path(tmp), durable=durable)
            try:
                write_stream(gw.ws_url, clients, clients * 6)  # warm up
                rates[durable].append(write_stream(gw.ws_url, clients, writes))
            finally:
                gw.stop()
    on, off = statistics.mean(rates[True]), statistics.mean(rates[False])
    print(f"   durable (fsync)  {on:8.0f} /s   runs {', '.join(f'{r:.0f}' for r in rates[True])}")
    print(f"   not durable      {off:8.0f} /s   runs {', '.join(f'{r:.0f}' for r in rates[False])}")
    print(f"   ratio durable / not durable: {on / off:.2f}x")


def message_item(session: int, seq: int) -> dict[str, Any]:
    text = f"message {seq} of session {session}: " + "lorem ipsum dolor sit amet " * 8
    data = {"role": "user" if seq % 2 else "assistant", "content": text, "timestamp": 1_700_000_000_000 + seq}
    return {
        "PK": {"S": f"SESSION#agent:main:bench-{session}"},
        "SK": {"S": f"MSG#s{session}#{seq:012d}"},
        "d": {"S": json.dumps(data)},
    }


def fill(gw: Any, messages: int, start: int = 0) -> None:
    """Store messages (as the gateway stores them: one item each), 25 per durable transaction."""
    table = gw.store.table
    batch: list[dict[str, Any]] = []
    for n in range(start, start + messages):
        batch.append(message_item(n // 100, n))
        if len(batch) == 25:
            table.put_items(batch)
            batch = []
    if batch:
        table.put_items(batch)


def write_latency(url: str, count: int) -> float:
    from orbital.client import GatewayClient

    samples = []
    with GatewayClient(url, timeout=30) as client:
        client.connect("client", "bench-latency")
        for i in range(count):
            began = time.perf_counter()
            client.call("session.patch", {"sessionKey": "agent:main:bench-latency", "label": str(i)})
            samples.append(time.perf_counter() - began)
    return statistics.median(samples) * 1000


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def scale_and_restart(messages: int, files: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        gw = gateway(data_dir)
        try:
            fill(gw, 1000)
            small = [write_latency(gw.ws_url, 150) for _ in range(2)]
            began = time.perf_counter()
            fill(gw, messages - 1000, start=1000)
            filled = time.perf_counter() - began
            large = [write_latency(gw.ws_url, 150) for _ in range(2)]
            print(f"2. one write (session.patch) p50: {min(small):.2f} ms with 1,000 items stored, ")
            print(f"   {min(large):.2f} ms with {messages:,} stored: ratio {min(large) / min(small):.2f}x")
            each = filled / (messages - 1000) * 1e6
            print(f"   (storing {messages - 1000:,} messages took {filled:.1f} s: {each:.0f} us each)")
            workspace = gw.store.workspace
            for i in range(files):
                workspace.put(
                    f"agents/main/notes/{i:05d}.md",
                    (f"# note {i}\n" + "some text " * 150).encode(),
                    content_type="text/markdown",
                )
            crashed = Path(tmp) / "crashed"
            # a crash's view: the database with its WAL, as the killed process left them
            shutil.copytree(data_dir, crashed, ignore=shutil.ignore_patterns("lock", ".xeno"))
        finally:
            began = time.perf_counter()
            gw.stop()
            stop_seconds = time.perf_counter() - began
        print(
            f"3. {messages:,} messages + {files:,} files: clean stop {stop_seconds:.2f} s, "
            f"data dir {dir_size(data_dir) / 1e6:.1f} MB"
        )
        for label, directory in (("after a clean stop", data_dir), ("after a crash (WAL replay)", crashed)):
            began = time.perf_counter()
            again = gateway(directory)
            ready = time.perf_counter() - began
            opened = again.store.describe()
            again.stop()
            print(f"   restart {label}: {ready:.2f} s to serving (store {opened})")
        process_restart(data_dir)  # compiles the package's bytecode once, as a first start on a machine would
        for _ in range(2):
            print(f"   `orbital dev` process, start to /health answering: {process_restart(data_dir):.2f} s")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def process_restart(data_dir: Path) -> float:
    """Seconds from launching `orbital dev` on `data_dir` until its health check answers (then Ctrl-C)."""
    import signal
    import subprocess
    import urllib.request

    port = free_port()
    command = [sys.executable, "-c", "from orbital.cli.main import main; main()", "dev", "--port", str(port)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "layers" / "orbital")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's environment keeps compiled modules between starts
    began = time.perf_counter()
    proc = subprocess.Popen([*command, "--data-dir", str(data_dir)], env=env, stdout=subprocess.DEVNULL)
    try:
        deadline = began + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.perf_counter() > deadline:
                    raise RuntimeError("the gateway did not become healthy") from None
                time.sleep(0.02)
        return time.perf_counter() - began
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes", type=int, default=600)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=10_000)
    args = parser.parse_args()
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
    throughput(args.writes, args.clients)
    scale_and_restart(args.messages, args.files)


if __name__ == "__main__":
    main()
