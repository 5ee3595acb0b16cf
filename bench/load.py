"""Many clients at once against one local gateway: errors, lost writes and latency under load.

`orbital dev` runs as its own process (durable, as users run it). Load comes from several generator processes,
each holding its share of the sockets on one asyncio loop, so the client side is not the bottleneck (the report
shows each generator's CPU time beside the wall time). A node in its own process answers every `tool.invoke` at once.
Every socket loops over a mix — `config.get` (read), `workspace.write` and `config.set` (writes, each recorded),
`tool.invoke` on the node — for the given time. Afterwards every acknowledged write is read back.

Printed: operations and errors per kind (by code), p50 / p99 latency per kind, the single-client `config.get` p50 of
the same gateway measured before the load (the baseline the ratios use), and the verification of every write.

    python bench/load.py [--clients 500] [--seconds 60] [--generators 4] [--gateway-arg=--step-functions-in-process]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "orbital"))
sys.path.insert(0, str(ROOT))

from bench.common import start_gateway  # noqa: E402 - after the path setup above

NODE_RUNTIME = {
    "hostRole": "execution",
    "hostCapabilities": ["filesystem.list", "filesystem.read", "filesystem.write", "shell.exec"],
    "toolCapabilities": {"Echo": ["shell.exec"]},
}


async def _call(ws: Any, pending: dict[str, asyncio.Future[Any]], frame_id: str, method: str, params: Any) -> Any:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    pending[frame_id] = future
    await ws.send(json.dumps({"type": "req", "id": frame_id, "method": method, "params": params}))
    return await asyncio.wait_for(future, 60)


async def _reader(ws: Any, pending: dict[str, asyncio.Future[Any]]) -> None:
    async for message in ws:
        frame = json.loads(message)
        if frame.get("type") == "res":
            future = pending.pop(str(frame.get("id")), None)
            if future is not None and not future.done():
                future.set_result(frame)


async def _client(url: str, name: str, until: float, out: dict[str, Any]) -> None:
    from websockets.asyncio.client import connect

    pending: dict[str, asyncio.Future[Any]] = {}
    async with connect(url, max_size=None, open_timeout=60) as ws:
        reader = asyncio.create_task(_reader(ws, pending))
        hello = await _call(ws, pending, "c", "connect", {"minProtocol": 1, "client": {"mode": "client", "id": name}})
        if not hello.get("ok"):
            out["errors"]["connect:" + str(hello.get("error"))] += 1
            return
        n = 0
        while time.monotonic() < until:
            n += 1
            kind = ("read", "workspace.write", "read", "config.set", "tool.invoke")[n % 5]
            frame_id = f"{name}-{n}"
            if kind == "read":
                method, params = "config.get", {"path": "userTimezone"}
            elif kind == "workspace.write":
                method, params = "workspace.write", {"path": f"load/{name}/{n}.md", "content": f"{name} {n}\n"}
            elif kind == "config.set":
                method, params = "config.set", {"path": f"load.{name}", "value": n}
            else:
                method, params = "tool.invoke", {"tool": "loadnode__Echo", "args": {"n": n}}
            began = time.perf_counter()
            try:
                res = await _call(ws, pending, frame_id, method, params)
            except Exception as exc:  # a timeout or a dropped socket: both count as errors
                out["errors"][f"{kind}:{type(exc).__name__}"] += 1
                if not isinstance(exc, TimeoutError):
                    return
                continue
            out["latency"].setdefault(kind, []).append(time.perf_counter() - began)
            if not res.get("ok"):
                out["errors"][f"{kind}:{res['error'].get('code')}"] += 1
            elif kind == "workspace.write":
                out["files"].append((params["path"], params["content"]))
            elif kind == "config.set":
                out["config"][f"load.{name}"] = n
        reader.cancel()


def generator(url: str, names: list[str], seconds: float, start_at: float, queue: Any) -> None:
    out: dict[str, Any] = {"latency": {}, "errors": Counter(), "files": [], "config": {}}

    async def main() -> None:
        await asyncio.sleep(max(0.0, start_at - time.time()))
        until = time.monotonic() + seconds
        await asyncio.gather(*(_client(url, name, until, out) for name in names), return_exceptions=False)

    began = time.process_time()
    asyncio.run(main())
    out["cpu"] = time.process_time() - began
    queue.put(out)


def node(url: str, ready: Any) -> None:
    from orbital.client import GatewayClient

    client = GatewayClient(url, timeout=120)
    client.connect(
        "node", "loadnode", tools=[{"name": "Echo", "inputSchema": {"type": "object"}}], nodeRuntime=NODE_RUNTIME
    )
    ready.set()
    while True:
        try:
            evt = client.next_event("tool.invoke", timeout=300)
        except Exception:
            return
        payload = evt["payload"]
        frame = {"type": "req", "id": "r" + payload["callId"], "method": "tool.result"}
        frame["params"] = {"callId": payload["callId"], "result": payload["args"]}
        client.send_raw(json.dumps(frame))


def baseline(url: str, n: int = 300) -> float:
    from orbital.client import GatewayClient

    samples = []
    with GatewayClient(url) as client:
        client.connect("client", "baseline")
        for _ in range(n):
            began = time.perf_counter()
            client.call("config.get", {"path": "userTimezone"})
            samples.append(time.perf_counter() - began)
    return statistics.median(samples) * 1000


def verify(url: str, files: list[tuple[str, str]], config: dict[str, int]) -> tuple[int, int]:
    """Read back every acknowledged write: (checked, missing or wrong)."""
    from orbital.client import GatewayClient

    bad = 0
    with GatewayClient(url, timeout=60) as client:
        client.connect("client", "verifier")
        for path, content in files:
            if client.request("workspace.read", {"path": path}).get("payload", {}).get("content") != content:
                bad += 1
        stored = client.call("config.get", {"path": "load"}).get("value") or {}
        for path, value in config.items():
            if stored.get(path.split(".", 1)[1]) != value:
                bad += 1
    return len(files) + len(config), bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--generators", type=int, default=4)
    parser.add_argument(
        "--gateway-arg", action="append", default=[], help="pass an option to `orbital dev` (repeatable)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_gateway(Path(tmp) / "data", *args.gateway_arg)
        ctx = multiprocessing.get_context("spawn")
        ready = ctx.Event()
        node_proc = ctx.Process(target=node, args=(url, ready), daemon=True)
        node_proc.start()
        try:
            ready.wait(60)
            base = baseline(url)
            queue = ctx.Queue()
            names = [f"c{i}" for i in range(args.clients)]
            shares = [names[i :: args.generators] for i in range(args.generators)]
            start_at = time.time() + 3
            gens = [ctx.Process(target=generator, args=(url, s, args.seconds, start_at, queue)) for s in shares]
            for g in gens:
                g.start()
            results = [queue.get(timeout=args.seconds + 600) for _ in gens]
            for g in gens:
                g.join(timeout=30)
            latency: dict[str, list[float]] = {}
            errors: Counter[str] = Counter()
            files: list[tuple[str, str]] = []
            config: dict[str, int] = {}
            for r in results:
                for kind, samples in r["latency"].items():
                    latency.setdefault(kind, []).extend(samples)
                errors.update(r["errors"])
                files.extend(r["files"])
                config.update(r["config"])
            total = sum(len(v) for v in latency.values())
            print(f"{args.clients} clients for {args.seconds:.0f} s from {args.generators} generator processes")
            cpu = ", ".join(f"{r['cpu']:.1f}" for r in results)
            print(f"  generator CPU seconds: {cpu} (wall {args.seconds:.0f} s each)")
            print(f"  single-client config.get p50 before the load (baseline): {base:.2f} ms")
            print(f"  operations answered: {total} ({total / args.seconds:.0f}/s)")
            for kind in sorted(latency):
                s = sorted(latency[kind])
                p50, p99 = statistics.median(s) * 1000, s[min(len(s) - 1, int(len(s) * 0.99))] * 1000
                print(f"  {kind:16} n={len(s):6}  p50 {p50:8.1f} ms ({p50 / base:6.1f}x)  p99 {p99:8.1f} ms")
            print(f"  errors: {sum(errors.values())} {dict(errors) if errors else ''}")
            checked, bad = verify(url, files, config)
            print(f"  acknowledged writes read back: {checked}, missing or wrong: {bad}")
        finally:
            node_proc.terminate()
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
