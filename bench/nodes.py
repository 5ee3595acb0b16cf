"""tool.invoke round trips and file-transfer throughput against the local gateway.

Prints, in one run:
- tool.invoke (client → gateway → node → gateway → client) with a node that answers at once, beside a bare
  WebSocket echo round trip and a req→res `config.get` on the same gateway (ratios, same process), first with the
  state machines interpreted in the gateway's process, then as by default (in their own process);
- the same call against a real `orbital node` process running its Read tool;
- transfer throughput in MB/s for node→node, node→workspace and workspace→node, in chunk mode (binary and text
  framing) and presigned mode, with real `orbital node` processes;
- AWS API calls per tool.invoke + tool.result, counted at the boto3 client factory.

    python bench/nodes.py [--calls 200] [--mb 20] [--against ../other-checkout] [--rounds 2] [--rounds-only]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "orbital"))
sys.path.insert(0, str(ROOT))

RUNTIME = {
    "hostRole": "execution",
    "hostCapabilities": ["filesystem.list", "filesystem.read", "filesystem.write", "shell.exec"],
    "toolCapabilities": {"Echo": ["shell.exec"]},
}


def _stats(samples: list[float]) -> dict[str, float]:
    samples = sorted(samples)
    return {
        "p50": statistics.median(samples) * 1000,
        "p99": samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1000,
        "rate": len(samples) / sum(samples),
    }


def echo_round_trips(url: str, n: int) -> list[float]:
    from bench.plain_ws import PlainConnection

    out = []
    conn = PlainConnection(url)
    try:
        for i in range(n):
            start = time.perf_counter()
            conn.send(json.dumps({"type": "req", "id": str(i), "method": "x"}))
            conn.recv()
            out.append(time.perf_counter() - start)
    finally:
        conn.close()
    return out


class InstantNode(threading.Thread):
    """A node that answers every tool.invoke immediately, on the thread that reads its socket (measures the
    gateway, not a tool or the benchmark's own threads). If it fails, `error` says why (and the benchmark's calls
    time out)."""

    def __init__(self, url: str, node_id: str) -> None:
        super().__init__(daemon=True)
        from bench.plain_ws import PlainRpc

        self.rpc = PlainRpc(url)
        self.rpc.connect(
            "node", node_id, tools=[{"name": "Echo", "inputSchema": {"type": "object"}}], nodeRuntime=RUNTIME
        )
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        conn = self.rpc.conn
        try:
            while not self.stop.is_set():
                try:
                    frame = conn.recv_json(timeout=0.5)
                except TimeoutError:
                    continue
                if frame.get("event") != "tool.invoke":
                    continue  # the acknowledgements of its answers
                payload = frame["payload"]
                self.rpc.send(
                    {
                        "type": "req",
                        "id": "r" + payload["callId"],
                        "method": "tool.result",
                        "params": {"callId": payload["callId"], "result": payload["args"]},
                    }
                )
        except BaseException as exc:  # kept for the benchmark to report
            if not self.stop.is_set():
                self.error = exc
                print(f"instant node failed: {exc!r}", file=sys.stderr)
        finally:
            conn.close()


def invoke_round_trips(url: str, tool: str, args: dict[str, Any], n: int) -> list[float]:
    from bench.plain_ws import PlainRpc

    out = []
    with PlainRpc(url) as c:
        c.connect("client")
        for _ in range(n):
            start = time.perf_counter()
            c.call("tool.invoke", {"tool": tool, "args": args})
            out.append(time.perf_counter() - start)
    return out


def rpc_round_trips(url: str, n: int) -> list[float]:
    from bench.plain_ws import PlainRpc

    out = []
    with PlainRpc(url) as c:
        c.connect("client")
        for _ in range(n):
            start = time.perf_counter()
            c.call("config.get", {"path": "model"})
            out.append(time.perf_counter() - start)
    return out


def interleaved_round_trips(
    url: str, tool: str, args: dict[str, Any], n: int, *, block: int = 50, cpu_of: list[int] | None = None
) -> tuple[list[float], list[float], list[float]]:
    """`config.get` and `tool.invoke` round trips in alternating blocks of `block` calls (n of each), so that a
    change in the machine's load falls on both alike; each on its own client, as in `rpc_round_trips` and
    `invoke_round_trips`. With `cpu_of` (pids), also the CPU seconds each of them spent during the tool.invoke
    blocks. Returns (config.get samples, tool.invoke samples, CPU seconds per pid)."""
    from bench.common import cpu_seconds
    from bench.plain_ws import PlainRpc

    rpc: list[float] = []
    invoke: list[float] = []
    pids = cpu_of or []
    spent = [0.0] * len(pids)
    with PlainRpc(url) as rpc_client, PlainRpc(url) as invoke_client:
        rpc_client.connect("client")
        invoke_client.connect("client")
        while len(invoke) < n:
            size = min(block, n - len(invoke))
            for _ in range(size):
                start = time.perf_counter()
                rpc_client.call("config.get", {"path": "model"})
                rpc.append(time.perf_counter() - start)
            before = [cpu_seconds(pid) for pid in pids]
            for _ in range(size):
                start = time.perf_counter()
                invoke_client.call("tool.invoke", {"tool": tool, "args": args})
                invoke.append(time.perf_counter() - start)
            for i, pid in enumerate(pids):
                spent[i] += cpu_seconds(pid) - before[i]
    return rpc, invoke, spent


def start_node(url: str, node_id: str, workspace: Path, *extra: str) -> subprocess.Popen[bytes]:
    from orbital.client import GatewayClient

    workspace.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orbital.cli.main",
            "node",
            "--url",
            url,
            "--id",
            node_id,
            "--workspace",
            str(workspace),
            "--log-file",
            str(workspace.parent / f"{node_id}.log"),
            *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with GatewayClient(url) as c:
        c.connect("client")
        deadline = time.monotonic() + 30
        while f"{node_id}__Read" not in [t["name"] for t in c.call("tools.list")["tools"]]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {node_id} did not register")
            time.sleep(0.05)
    return proc


def variant_rows(label: str, data_dir: Path, n: int, **options: Any) -> list[tuple[str, dict[str, float]]]:
    """`config.get` and `tool.invoke` rows of an in-process gateway started with other `GatewayOptions`."""
    from orbital.local.server import GatewayOptions, LocalGateway

    gateway = LocalGateway(GatewayOptions(port=0, data_dir=data_dir, project=ROOT, **options)).start()
    try:
        node = InstantNode(gateway.ws_url, "instant")
        node.start()
        invoke_round_trips(gateway.ws_url, "instant__Echo", {"x": 1}, 20)
        rows = [
            (f"config.get, {label}", _stats(rpc_round_trips(gateway.ws_url, n))),
            (f"tool.invoke, {label}", _stats(invoke_round_trips(gateway.ws_url, "instant__Echo", {"x": 1}, n))),
        ]
        node.stop.set()
        return rows
    finally:
        gateway.stop()


def separate_processes(base: Path, n: int, against: Path | None = None, rounds: int = 2) -> None:
    """`orbital dev` in its own process, as users run it: the state machines in its child process (the default)
    against in its own, and `orbital dev` of the checkout `against` if given, alternated `rounds` times; the
    gateway's CPU per tool.invoke read from /proc. Ends with each way's p50 ratios, round by round (the machine's
    load changes between rounds: compare the ways within a round)."""
    from bench.common import children, start_gateway, stop

    print(
        f"\n`orbital dev` in its own process (instant node and clients in this one), {rounds} rounds; config.get and"
        " tool.invoke in alternating blocks of 50:"
    )
    print(
        f"{'state machines':<22}{'config.get p50/p99':>20}{'tool.invoke p50/p99':>21}"
        f"{'x config.get':>14}{'CPU/call':>16}"
    )
    ways: list[tuple[str, tuple[str, ...], Path]] = [
        ("in a child process", (), ROOT),
        ("in the gateway", ("--step-functions-in-process",), ROOT),
    ]
    if against is not None:
        ways.append((f"checkout {against.name}", (), against))
    ratios: dict[str, list[float]] = {label: [] for label, _, _ in ways}
    for round_ in range(rounds):
        for way, (label, extra, source) in enumerate(ways):
            proc, url = start_gateway(base / f"sep-{round_}-{way}", *extra, source=source)
            try:
                node = InstantNode(url, "instant")
                node.start()
                invoke_round_trips(url, "instant__Echo", {"x": 1}, 30)
                kids = children(proc.pid)
                rpc_samples, invoke_samples, spent = interleaved_round_trips(
                    url, "instant__Echo", {"x": 1}, n, cpu_of=[proc.pid, *kids]
                )
                rpc, invoke = _stats(rpc_samples), _stats(invoke_samples)
                own, child = spent[0] / n * 1000, sum(spent[1:]) / n * 1000
                node.stop.set()
            finally:
                stop(proc)
            ratios[label].append(invoke["p50"] / rpc["p50"])
            cpu = f"{own:.1f}" + (f" + {child:.1f} ms" if kids else " ms")
            print(
                f"{label:<22}{rpc['p50']:>10.2f} / {rpc['p99']:<7.2f}{invoke['p50']:>10.2f} / {invoke['p99']:<8.2f}"
                f"{invoke['p50'] / rpc['p50']:>6.1f} / {invoke['p99'] / rpc['p99']:<5.1f}{cpu:>16}"
            )
    print("tool.invoke / config.get at p50, round by round:")
    for label, values in ratios.items():
        print(f"  {label:<22}" + " ".join(f"{v:5.2f}" for v in values) + f"   median {statistics.median(values):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--mb", type=int, default=20)
    parser.add_argument(
        "--against",
        type=Path,
        default=None,
        metavar="DIR",
        help="another checkout whose `orbital dev` is measured beside this one's (in its own process)",
    )
    parser.add_argument("--rounds", type=int, default=2, help="rounds of `orbital dev` in its own process")
    parser.add_argument(
        "--rounds-only",
        action="store_true",
        help="only the rounds against `orbital dev` in its own process (the tool.invoke target's figures)",
    )
    args = parser.parse_args()
    if args.rounds_only:
        with tempfile.TemporaryDirectory() as tmp:
            separate_processes(Path(tmp), args.calls, args.against, args.rounds)
        return

    from orbital.aws import clients
    from orbital.client import GatewayClient
    from orbital.local.server import GatewayOptions, LocalGateway

    from bench.common import start_echo, stop

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        echo, echo_url = start_echo()
        n = args.calls
        echo_round_trips(echo_url, 20)
        rows = [("echo (bare websockets)", _stats(echo_round_trips(echo_url, n)))]
        # the same calls with the state machines interpreted in the gateway's own process (before ADR 0017); then
        # as by default
        rows += variant_rows("SFN in process", base / "inline", n, step_functions_process=False)
        gateway = LocalGateway(GatewayOptions(port=0, data_dir=base / "data", project=ROOT)).start()
        procs: list[subprocess.Popen[bytes]] = []
        try:
            url = gateway.ws_url
            instant = InstantNode(url, "instant")
            instant.start()
            invoke_round_trips(url, "instant__Echo", {"x": 1}, 20)
            rows += [
                ("config.get (req→res)", _stats(rpc_round_trips(url, n))),
                ("tool.invoke, instant node", _stats(invoke_round_trips(url, "instant__Echo", {"x": 1}, n))),
            ]
            procs.append(start_node(url, "reader", base / "reader"))
            (base / "reader" / "small.txt").write_text("hello\n" * 20)
            invoke_round_trips(url, "reader__Read", {"path": "small.txt"}, 10)
            rows.append(
                (
                    "tool.invoke, orbital node Read",
                    _stats(invoke_round_trips(url, "reader__Read", {"path": "small.txt"}, n)),
                )
            )
            echo_p50 = rows[0][1]["p50"]
            print(
                f"{'round trip':<32}{'p50 ms':>9}{'p99 ms':>9}{'calls/s':>10}{'x echo p50':>12}"
                f"{'x config.get p50 / p99':>24}"
            )
            rpc: dict[str, float] | None = None  # the config.get of the same gateway, measured just before
            for name, st in rows:
                line = f"{name:<32}{st['p50']:>9.2f}{st['p99']:>9.2f}{st['rate']:>10.0f}{st['p50'] / echo_p50:>12.1f}"
                if name.startswith("config.get"):
                    rpc = st
                elif rpc is not None:
                    line += f"{st['p50'] / rpc['p50']:>15.1f} / {st['p99'] / rpc['p99']:.1f}"
                print(line)

            time.sleep(1.0)  # let earlier benchmark clients' $disconnect finish outside the counted window
            clients.reset_call_counts()
            with GatewayClient(url) as c:
                c.connect("client")
                clients.reset_call_counts()
                for _ in range(10):
                    c.call("tool.invoke", {"tool": "instant__Echo", "args": {}})
                time.sleep(1.0)  # let the last answers' writes land in the counted window
            counts = clients.call_counts()
            print(
                "\nAWS API calls per tool.invoke + tool.result (mean of 10; the timer of a due second adds one"
                " StartExecution and its `due` step one Query + one BatchGetItem per second, not per call):"
            )
            print("  " + ", ".join(f"{k.split('.', 1)[1]} {v / 10:.1f}" for k, v in sorted(counts.items())))

            separate_processes(base, n, args.against, args.rounds)

            size = args.mb * 1024 * 1024
            data = os.urandom(size)
            digest = hashlib.sha256(data).hexdigest()
            print(f"\ntransfers of {args.mb} MB (MB/s, sha256 checked)")
            print(f"{'mode':<22}{'node→node':>12}{'node→gsv':>12}{'gsv→node':>12}")
            for label, mode, framing in (
                ("chunks, binary frames", "chunks", "--binary-frames"),
                ("chunks, text frames", "chunks", "--no-binary-frames"),
                ("presigned", "presigned", "--binary-frames"),
            ):
                tag = label.split(",")[-1].strip().split()[0]
                src = f"src-{tag}"
                dst = f"dst-{tag}"
                procs.append(start_node(url, src, base / src, framing))
                procs.append(start_node(url, dst, base / dst, framing))
                (base / src / "f.bin").write_bytes(data)
                results = []
                with GatewayClient(url, timeout=600) as c:
                    c.connect("client")
                    for source, destination, check in (
                        (f"{src}:f.bin", f"{dst}:a.bin", base / dst / "a.bin"),
                        (f"{src}:f.bin", f"gsv:bench/{tag}.bin", None),
                        (f"gsv:bench/{tag}.bin", f"{dst}:b.bin", base / dst / "b.bin"),
                    ):
                        start = time.perf_counter()
                        c.call("transfer.request", {"source": source, "destination": destination, "mode": mode})
                        elapsed = time.perf_counter() - start
                        if check is not None:
                            assert hashlib.sha256(check.read_bytes()).hexdigest() == digest
                        results.append(size / elapsed / 1e6)
                print(f"{label:<22}" + "".join(f"{r:>12.1f}" for r in results))
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=15)
            stop(echo)
            gateway.stop()


if __name__ == "__main__":
    main()
