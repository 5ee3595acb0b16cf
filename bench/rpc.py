"""RPC round trips against the local gateway, beside a bare WebSocket echo server, each in its own process.

Prints, in one run and as ratios to the echo server (this machine is shared and noisy: only ratios within one run
mean much):
- sequential `config.get` round trips from one socket (p50, p99);
- open → `hello-ok` (a new socket and its `connect`; for the echo server, a new socket and one answered frame);
- throughput of 50 sockets spread over several generator processes, with the CPU the server and the generators
  used meanwhile (a server near 100% of a core is the bottleneck, not the clients);
- the gateway's resident memory after all that;
- the AWS API calls each method makes, counted at the boto3 client factory: once as the local gateway runs (its
  table and workspace are in its data directory: only Step Functions calls remain) and once as a Lambda container
  would run (DynamoDB and S3, here moto's, no cache).

    python bench/rpc.py [--requests 2000] [--clients 50] [--seconds 10] [--generators 3] [--handshakes 100]
        [--rounds 1] [--against ../other-checkout ...] [--throughput-only] [--no-calls]

With `--against`, the `orbital dev` of another checkout (an earlier version: `git worktree add ../old <commit>`, with
its own `.venv` from `make install` there if its dependencies differ) is measured in the same rounds, so the two
versions' ratios to echo come from the same moments. With `--rounds`, every server is measured that many times in
turns and the medians are printed (this machine is shared: one round says little).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "orbital"))
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402 - after the path setup above
    connect_frame,
    cpu_seconds,
    open_connected,
    p50,
    percentile,
    start_echo,
    start_gateway,
    stop,
    tree_rss_mib,
)

REQUEST = {"type": "req", "method": "config.get", "params": {"path": "model"}}


def _frame(i: int | str) -> str:
    return json.dumps({**REQUEST, "id": str(i)})


async def _sequential(url: str, n: int) -> list[float]:
    ws = await open_connected(url)
    out = []
    for i in range(n):
        began = time.perf_counter()
        await ws.send(_frame(i))
        await ws.recv()
        out.append(time.perf_counter() - began)
    await ws.close()
    return out


async def _handshakes(url: str, n: int) -> list[float]:
    from websockets.asyncio.client import connect

    out = []
    for i in range(n):
        began = time.perf_counter()
        ws = await connect(url)
        await ws.send(connect_frame(f"hs-{i}"))
        await ws.recv()
        out.append(time.perf_counter() - began)
        await ws.close()
    return out


def _generator(url: str, sockets: int, seconds: float, start_at: float, queue: Any) -> None:
    """One load process: its sockets each loop request → response until the time is up."""

    async def one(ws: Any, until: float, latencies: list[float]) -> None:
        i = 0
        while time.monotonic() < until:
            i += 1
            began = time.perf_counter()
            await ws.send(_frame(i))
            await ws.recv()
            latencies.append(time.perf_counter() - began)

    async def main() -> list[float]:
        conns = [await open_connected(url) for _ in range(sockets)]
        await asyncio.sleep(max(0.0, start_at - time.time()))
        latencies: list[float] = []
        until = time.monotonic() + seconds
        await asyncio.gather(*(one(ws, until, latencies) for ws in conns))
        for ws in conns:
            await ws.close()
        return latencies

    began = time.process_time()
    latencies = asyncio.run(main())
    queue.put({"latencies": latencies, "cpu": time.process_time() - began})


def throughput(url: str, pid: int, clients: int, generators: int, seconds: float) -> dict[str, float]:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    start_at = time.time() + 2 + clients * 0.02
    shares = [clients // generators + (1 if i < clients % generators else 0) for i in range(generators)]
    procs = [ctx.Process(target=_generator, args=(url, n, seconds, start_at, queue)) for n in shares if n]
    for proc in procs:
        proc.start()
    time.sleep(max(0.0, start_at - time.time()))
    server_before = cpu_seconds(pid)
    results = [queue.get(timeout=seconds + 120) for _ in procs]
    server_cpu = cpu_seconds(pid) - server_before
    for proc in procs:
        proc.join(timeout=30)
    latencies = [x for r in results for x in r["latencies"]]
    return {
        "rate": len(latencies) / seconds,
        "p50": p50(latencies),
        "p99": percentile(latencies, 0.99),
        "server_cpu": server_cpu / seconds,
        "client_cpu": max(r["cpu"] for r in results) / seconds,
    }


def count_calls(gateway: Any) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """AWS calls per method: through the running gateway (cache on), and as a Lambda container (cache off)."""
    from orbital.aws import clients
    from orbital.client import GatewayClient
    from orbital.methods import registry
    from orbital.protocol.dispatch import Dispatcher
    from orbital.runtime.services import build_services
    from orbital.settings import get_settings

    steps: list[tuple[str, dict[str, Any]]] = [
        ("config.get", {}),
        ("tools.list", {}),
        ("session.get", {"sessionKey": "agent:main:bench"}),
        ("workspace.write", {"path": "bench/note.md", "content": "hello"}),
    ]
    local: dict[str, dict[str, int]] = {}
    with GatewayClient(gateway.ws_url) as c:
        clients.reset_call_counts()
        c.connect("client", "bench-counter")
        local["connect"] = clients.call_counts()
        for method, params in steps:
            c.call(method, params)  # first call may fill caches
            clients.reset_call_counts()
            c.call(method, params)
            local[method] = clients.call_counts()

    class Quiet:
        def post(self, *_: Any) -> bool:
            return True

        def close(self, *_: Any) -> None:
            pass

    # as a Lambda container would run: DynamoDB and S3 (moto here), no cache
    import os

    import boto3
    from moto import mock_aws
    from orbital.local.template import load_template, table_definition
    from orbital.settings import reset_settings

    for name in [n for n in os.environ if n.startswith("ORBITAL_")]:  # what the local gateway set for itself
        del os.environ[name]
    reset_settings()
    settings = get_settings()
    cold: dict[str, dict[str, int]] = {}
    with mock_aws():
        _, table_kwargs = table_definition(load_template(ROOT / "template.yaml"))
        boto3.client("dynamodb", region_name=settings.region).create_table(
            TableName=settings.table_name, **table_kwargs
        )
        boto3.client("s3", region_name=settings.region).create_bucket(Bucket=settings.bucket_name)
        clients.reset_clients()
        lam = build_services(settings, sender=Quiet())
        dispatcher = Dispatcher(registry())
        frame = {
            "type": "req",
            "id": "1",
            "method": "connect",
            "params": {"minProtocol": 1, "client": {"mode": "client", "id": "bench-lambda"}},
        }
        clients.reset_call_counts()
        dispatcher.dispatch(lam, "bench-lambda-conn", frame)
        cold["connect"] = clients.call_counts()
        for method, params in steps:
            clients.reset_call_counts()
            out = dispatcher.dispatch(
                lam, "bench-lambda-conn", {"type": "req", "id": "2", "method": method, "params": params}
            )
            assert out.response and out.response["ok"], out.response
            cold[method] = clients.call_counts()
        clients.reset_clients()
    return local, cold


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def _other_python(checkout: Path) -> str | None:
    """The interpreter of another checkout's own environment (its dependencies may differ), if it has one."""
    python = checkout / ".venv" / "bin" / "python"
    return str(python) if python.exists() else None


def measure(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """Each server's figures, once per round; the servers take turns within a round, each round in another order
    (so no server is always measured first, nor always right after the same other)."""
    rows: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        servers: list[tuple[str, Any, str]] = []
        try:
            gateway, gw_url = start_gateway(Path(tmp) / "data")
            servers.append(("gateway", gateway, gw_url))
            for i, checkout in enumerate(args.against):
                other, other_url = start_gateway(
                    Path(tmp) / f"other-{i}", source=checkout, python=args.against_python or _other_python(checkout)
                )
                servers.append((f"other{i + 1}", other, other_url))
            echo, echo_url = start_echo()
            servers.insert(0, ("echo", echo, echo_url))
            for _, _, url in servers:
                asyncio.run(_sequential(url, 200))  # warm-up
            for round_ in range(args.rounds):
                shift = round_ % len(servers)
                for name, proc, url in servers[shift:] + servers[:shift]:
                    row: dict[str, Any] = {}
                    if not args.throughput_only:
                        row["seq"] = asyncio.run(_sequential(url, args.requests))
                        row["hs"] = asyncio.run(_handshakes(url, args.handshakes))
                    row["tput"] = throughput(url, proc.pid, args.clients, args.generators, args.seconds)
                    rows.setdefault(name, []).append(row)
            rows["rss"] = [dict(zip(("own", "all"), tree_rss_mib(gateway.pid), strict=True))]
        finally:
            for _, proc, _ in servers:
                stop(proc)
    return rows


def _median(values: list[float]) -> float:
    return statistics.median(values)


def report(args: argparse.Namespace, rows: dict[str, list[dict[str, Any]]]) -> None:
    """Medians over the rounds: of each server's figure, and of the ratio to echo taken within each round."""
    names = ["gateway", *(f"other{i + 1}" for i in range(len(args.against)))]
    heads = {"gateway": "gateway", **{f"other{i + 1}": str(c) for i, c in enumerate(args.against)}}
    echo = rows["echo"]
    rounds = len(echo)
    print(f"python {sys.version.split()[0]}; echo server and `orbital dev` each in its own process", end="")
    for name in names[1:]:
        print(f"; {name}: `orbital dev` of {heads[name]}", end="")
    print(f"; {rounds} round(s), medians over them (ratios: each round's own, to that round's echo)")
    print(f"{'figure':<34}{'echo':>12}" + "".join(f"{n:>12}{'ratio':>9}" for n in names))

    def line(label: str, value: Any, fmt: Any, ratio_fmt: str) -> None:
        out = f"{label:<34}{fmt(_median([value(r) for r in echo])):>12}"
        for n in names:
            mine = [value(r) for r in rows[n]]
            ratios = [m / value(e) for m, e in zip(mine, echo, strict=True)]
            out += f"{fmt(_median(mine)):>12}{format(_median(ratios), ratio_fmt):>9}"
        print(out)

    if not args.throughput_only:
        for label, key, q in (
            ("config.get sequential p50 ms", "seq", 0.5),
            ("open -> hello-ok p50 ms", "hs", 0.5),
            ("config.get sequential p99 ms", "seq", 0.99),
            ("open -> hello-ok p99 ms", "hs", 0.99),
        ):
            line(label, lambda r, k=key, q=q: percentile(r[k], q) if q != 0.5 else p50(r[k]), _ms, ".2f")
    line(f"{args.clients}-client throughput req/s", lambda r: r["tput"]["rate"], lambda v: f"{v:.0f}", ".2f")
    line(f"{args.clients}-client p50 ms", lambda r: r["tput"]["p50"], _ms, ".2f")
    line(
        "server CPU us per request",
        lambda r: r["tput"]["server_cpu"] / r["tput"]["rate"],
        lambda v: f"{v * 1e6:.0f}",
        ".2f",
    )
    for name in ["echo", *names]:
        tput = [r["tput"] for r in rows[name]]
        cpu = ", ".join(f"{t['server_cpu']:.0%}" for t in tput)
        busiest = ", ".join(f"{t['client_cpu']:.0%}" for t in tput)
        ratios = ", ".join(f"{t['rate'] / e['tput']['rate']:.2f}" for t, e in zip(tput, echo, strict=True))
        print(
            f"  {name}: server CPU during the runs {cpu} of a core; busiest of {args.generators}"
            f" generators {busiest}; throughput ratio to echo per round {ratios}"
        )
    rss = rows["rss"][0]
    print(
        f"gateway resident memory after the runs: {rss['own']:.0f} MiB,"
        f" {rss['all']:.0f} MiB with its Step Functions process"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="sequential round trips")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the throughput run")
    parser.add_argument("--generators", type=int, default=3, help="load processes for the throughput run")
    parser.add_argument("--handshakes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1, help="times each server is measured, in turns")
    parser.add_argument(
        "--against",
        type=Path,
        action="append",
        default=[],
        help="another checkout, whose `orbital dev` is measured in the same rounds (`other1`; may be given again)",
    )
    parser.add_argument(
        "--against-python",
        help="the interpreter for every --against (default: each checkout's .venv if it has one, else this one)",
    )
    parser.add_argument("--throughput-only", action="store_true", help="only the throughput runs")
    parser.add_argument("--no-calls", action="store_true", help="skip counting the AWS calls per method")
    args = parser.parse_args()

    report(args, measure(args))
    if args.no_calls:
        return

    from orbital.local.server import GatewayOptions, LocalGateway

    with tempfile.TemporaryDirectory() as tmp:
        local_gateway = LocalGateway(GatewayOptions(port=0, data_dir=Path(tmp), project=ROOT)).start()
        try:
            local, cold = count_calls(local_gateway)
        finally:
            local_gateway.stop()
    print("\nAWS API calls per method (second call; connect is the first frame)")
    print(f"{'method':<18}{'local gateway':<40}{'Lambda (moto, no cache)'}")

    def fmt(counts: dict[str, int]) -> str:
        return ", ".join(f"{k.split('.', 1)[1]} x{v}" for k, v in sorted(counts.items())) or "none"

    for method in local:
        print(f"{method:<18}{fmt(local[method]):<40}{fmt(cold[method])}")


if __name__ == "__main__":
    main()
