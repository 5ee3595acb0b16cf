"""RPC round trips against the local gateway, beside a bare WebSocket echo server in the same run.

Prints, for 1 client and for 50 concurrent clients: throughput, p50/p99 latency, and the ratio to the echo baseline
(this machine is shared and noisy, so only ratios within one run mean much). Then prints the AWS API calls each
method makes, counted at the boto3 client factory: once as the local gateway runs (its per-process cache on) and
once as a Lambda container would run (no cache).

    python bench/rpc.py [--requests 400] [--clients 50] [--per-client 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import websockets
from websockets.asyncio.client import connect as ws_connect
from websockets.asyncio.server import serve

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "orbital"))
sys.path.insert(0, str(ROOT))


class EchoServer:
    """The baseline: a websockets server that answers every frame with a res frame, no work at all."""

    def __init__(self) -> None:
        self.port = 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Future[None] | None = None

    async def _handler(self, ws: Any) -> None:
        async for message in ws:
            frame = json.loads(message)
            await ws.send(json.dumps({"type": "res", "id": frame.get("id"), "ok": True, "payload": {}}))

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = self._loop.create_future()
        async with serve(self._handler, "127.0.0.1", 0) as server:
            self.port = next(iter(server.sockets)).getsockname()[1]
            self._ready.set()
            await self._stop

    def start(self) -> EchoServer:
        threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True).start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop and self._stop:
            self._loop.call_soon_threadsafe(self._stop.set_result, None)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"


async def _open(url: str) -> Any:
    ws = await ws_connect(url, max_size=None)
    await ws.send(
        json.dumps(
            {"type": "req", "id": "c", "method": "connect", "params": {"minProtocol": 1, "client": {"mode": "client"}}}
        )
    )
    await ws.recv()
    return ws


async def _loop(ws: Any, requests: int, latencies: list[float], method: str, params: Any) -> None:
    for i in range(requests):
        frame = json.dumps({"type": "req", "id": str(i), "method": method, "params": params})
        start = time.perf_counter()
        await ws.send(frame)
        await ws.recv()
        latencies.append(time.perf_counter() - start)


async def _run(url: str, clients: int, per_client: int, method: str, params: Any) -> dict[str, float]:
    """All sockets connect first; the clock runs only over the request loops."""
    sockets = [await _open(url) for _ in range(clients)]
    latencies: list[float] = []
    start = time.perf_counter()
    await asyncio.gather(*(_loop(ws, per_client, latencies, method, params) for ws in sockets))
    elapsed = time.perf_counter() - start
    for ws in sockets:
        await ws.close()
    latencies.sort()
    return {
        "throughput": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
    }


def measure(url: str, clients: int, per_client: int) -> dict[str, float]:
    params = {"path": "model"}
    asyncio.run(_run(url, clients, min(per_client, 20), "config.get", params))  # warm-up
    return asyncio.run(_run(url, clients, per_client, "config.get", params))


def count_calls(gateway: Any) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """AWS calls per method: through the running gateway (cache on), and as a Lambda container (cache off)."""
    from orbital.aws import clients
    from orbital.client import GatewayClient
    from orbital.methods import registry
    from orbital.protocol.dispatch import Dispatcher
    from orbital.runtime.services import Services
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

    settings = get_settings().model_copy(update={"local": False})
    lam = Services(settings, sender=Quiet())
    dispatcher = Dispatcher(registry())
    cold: dict[str, dict[str, int]] = {}
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
    return local, cold


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="round trips for the single client")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--per-client", type=int, default=40)
    args = parser.parse_args()

    from orbital.local.server import GatewayOptions, LocalGateway

    with tempfile.TemporaryDirectory() as tmp:
        gateway = LocalGateway(GatewayOptions(port=0, data_dir=Path(tmp), project=ROOT)).start()
        echo = EchoServer().start()
        try:
            print(f"websockets {websockets.__version__}, python {sys.version.split()[0]}")
            print(f"{'scenario':<28}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'x echo p50':>12}{'echo/gw tput':>14}")
            for label, clients_n, per in (
                ("1 client", 1, args.requests),
                (f"{args.clients} clients", args.clients, args.per_client),
            ):
                base = measure(echo.url, clients_n, per)
                gw = measure(gateway.ws_url, clients_n, per)
                for name, row in ((f"echo, {label}", base), (f"config.get, {label}", gw)):
                    print(f"{name:<28}{row['throughput']:>10.0f}{row['p50_ms']:>10.2f}{row['p99_ms']:>10.2f}", end="")
                    if row is gw:
                        print(f"{gw['p50_ms'] / base['p50_ms']:>12.1f}{base['throughput'] / gw['throughput']:>14.1f}")
                    else:
                        print()
            local, cold = count_calls(gateway)
            print("\nAWS API calls per method (second call; connect is the first frame)")
            print(f"{'method':<18}{'local gateway':<40}{'Lambda (no cache)'}")
            for method in local:

                def fmt(counts: dict[str, int]) -> str:
                    return ", ".join(f"{k.split('.', 1)[1]} x{v}" for k, v in sorted(counts.items())) or "none"

                print(f"{method:<18}{fmt(local[method]):<40}{fmt(cold[method])}")
        finally:
            echo.stop()
            gateway.stop()


if __name__ == "__main__":
    main()
