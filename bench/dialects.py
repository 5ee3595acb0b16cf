"""Other gateways' clients beside GSV's, in the same run: what the dialect layer costs.

A local gateway runs in this process with the scripted model answering at once. Interleaved, round after round:

- a chat turn through GSV's `chat.send` (until its `final` event), through Exoclaw's `chat.send` (until `done`),
  through xeno's `gateway.query` over `/ws` (until `gateway.done`) and through a WindieOS `query` (until
  `streaming-complete`); each turn's gateway overhead is its wall time
  less the time spent inside the model call (measured around it in process). Each turn has one client: the GSV
  client is connected for its own turns only (GSV clients get every session's events, so a GSV client connected
  during a dialect turn would make that turn pay for two audiences);
- a cheap request: GSV `config.get`, Exoclaw `ping`, xeno `gateway.initialize` (a short main session), WindieOS
  `load-settings`.

It prints p50/p99 and each dialect's p50 as a ratio of GSV's in the same run (this machine is shared and noisy:
compare ratios, not milliseconds across runs).

    python bench/dialects.py [--runs 30] [--requests 300]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "orbital"))
sys.path.insert(0, str(ROOT))

from bench.agent import ModelClock, pct  # noqa: E402


def _until(ws: Any, done: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        frame = json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
        if done(frame):
            return


def gsv_turn(ws: Any, key: str) -> float:
    """`chat.send` on a connected GSV socket (the same plain client as the dialects'), until the run's `final`."""
    rid = uuid.uuid4().hex[:8]
    start = time.perf_counter()
    ws.send(
        json.dumps({"type": "req", "id": rid, "method": "chat.send", "params": {"sessionKey": key, "message": "b"}})
    )
    run: dict[str, Any] = {}

    def ended(frame: dict[str, Any]) -> bool:
        if frame.get("type") == "res" and frame.get("id") == rid:
            run["id"] = frame["payload"]["runId"]
        payload = frame.get("payload") or {}
        return (
            frame.get("event") == "chat"
            and payload.get("runId") == run.get("id")
            and payload.get("state")
            in (
                "final",
                "error",
            )
        )

    _until(ws, ended)
    return time.perf_counter() - start


def exoclaw_turn(ws: Any, account: str) -> float:
    rid = uuid.uuid4().hex[:8]
    params = {"channel": "bench", "account": account, "content": "bench"}
    start = time.perf_counter()
    ws.send(json.dumps({"id": rid, "method": "chat.send", "params": params}))
    _until(ws, lambda f: f.get("id") == rid and (f.get("event") in ("done", "error") or "error" in f))
    return time.perf_counter() - start


def xeno_turn(ws: Any) -> float:
    rid = uuid.uuid4().hex[:8]
    params = {"requestId": rid, "content": "bench", "context": {"type": "rpc"}}
    start = time.perf_counter()
    ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": "gateway.query", "params": params}))
    _until(ws, lambda f: f.get("method") == "gateway.done" and f["params"]["requestId"] == rid)
    return time.perf_counter() - start


def windie_turn(ws: Any, conversation: str) -> float:
    rid = uuid.uuid4().hex[:8]
    start = time.perf_counter()
    ws.send(json.dumps({"id": rid, "type": "query", "payload": {"text": "bench", "conversation_ref": conversation}}))
    _until(ws, lambda f: f.get("turn_ref") == rid and f.get("type") in ("streaming-complete", "error"))
    return time.perf_counter() - start


def timed(call: Any) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="chat turns per client")
    parser.add_argument("--requests", type=int, default=300, help="cheap requests per client")
    args = parser.parse_args()

    from orbital.client import GatewayClient
    from orbital.local.server import GatewayOptions, LocalGateway
    from websockets.sync.client import connect

    from tests.support.agent import configure_fake_model
    from tests.support.fake_llm import FakeLLM, reply

    clock = ModelClock()
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp, FakeLLM() as llm:
        options = GatewayOptions(port=0, data_dir=Path(tmp), project=ROOT, quiet=True, xeno=False)
        gateway = LocalGateway(options).start()
        clock.install()
        llm.responder = lambda request: reply("done")
        overheads: dict[str, list[float]] = {
            "GSV chat.send": [],
            "Exoclaw chat.send": [],
            "xeno gateway.query": [],
            "WindieOS query": [],
        }
        cheap: dict[str, list[float]] = {
            "GSV config.get": [],
            "Exoclaw ping": [],
            "xeno gateway.initialize": [],
            "WindieOS load-settings": [],
        }
        try:
            with (
                connect(gateway.ws_url + "?dialect=exoclaw") as exo,
                connect(gateway.ws_url + "?dialect=xeno") as xeno,
                connect(gateway.ws_url) as windie,
            ):
                key = f"agent:main:bench-{uuid.uuid4().hex[:6]}"
                account = f"bench-{uuid.uuid4().hex[:6]}"
                with GatewayClient(gateway.ws_url, timeout=60) as gsv:
                    gsv.connect("client", "bench-dialects")
                    configure_fake_model(gsv, llm.base_url)
                exo.send(json.dumps({"id": "warm", "method": "ping"}))
                _until(exo, lambda f: f.get("id") == "warm")
                windie.send(json.dumps({"type": "handshake", "user_id": "bench"}))
                windie.send(json.dumps({"id": "warm", "type": "load-settings", "payload": {}}))
                _until(windie, lambda f: f.get("id") == "warm")
                conversation = f"bench-{uuid.uuid4().hex[:6]}"

                def gsv_alone() -> float:
                    with connect(gateway.ws_url) as ws:
                        hello = {"minProtocol": 1, "client": {"mode": "client", "id": "bench-dialects"}}
                        ws.send(json.dumps({"type": "req", "id": "c", "method": "connect", "params": hello}))
                        _until(ws, lambda f: f.get("id") == "c")
                        for n in range(3):  # the socket's first requests are not the turn's
                            get = {"type": "req", "id": f"g{n}", "method": "config.get", "params": {"path": "model"}}
                            ws.send(json.dumps(get))
                            _until(ws, lambda f, n=n: f.get("id") == f"g{n}")
                        return gsv_turn(ws, key)

                turns = {
                    "GSV chat.send": gsv_alone,
                    "Exoclaw chat.send": lambda: exoclaw_turn(exo, account),
                    "xeno gateway.query": lambda: xeno_turn(xeno),
                    "WindieOS query": lambda: windie_turn(windie, conversation),
                }
                for turn in turns.values():  # warm-up: imports, caches, first executions
                    turn()
                clock.take()
                for _ in range(args.runs):
                    for label, turn in turns.items():
                        wall = turn()
                        model_s, calls = clock.take()
                        overheads[label].append((wall - model_s) / max(1, calls))

                def ping() -> None:
                    exo.send(json.dumps({"id": "p", "method": "ping"}))
                    _until(exo, lambda f: f.get("id") == "p")

                def load_settings() -> None:
                    windie.send(json.dumps({"id": "s", "type": "load-settings", "payload": {}}))
                    _until(windie, lambda f: f.get("id") == "s")

                def initialize() -> None:
                    xeno.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "gateway.initialize"}))
                    _until(xeno, lambda f: f.get("id") == 1)

                with GatewayClient(gateway.ws_url, timeout=60) as gsv:
                    gsv.connect("client", "bench-dialects")
                    requests = {
                        "GSV config.get": lambda: gsv.call("config.get", {"path": "model"}),
                        "Exoclaw ping": ping,
                        "xeno gateway.initialize": initialize,
                        "WindieOS load-settings": load_settings,
                    }
                    for _ in range(args.requests):
                        for label, request in requests.items():
                            cheap[label].append(timed(request))
        finally:
            gateway.stop()

    def table(title: str, samples: dict[str, list[float]]) -> None:
        base = statistics.median(next(iter(samples.values())))
        print(f"{title:<28}{'p50 ms':>10}{'p99 ms':>10}{'x GSV p50':>12}")
        for label, values in samples.items():
            p50 = statistics.median(values)
            print(f"{label:<28}{p50 * 1000:>10.2f}{pct(values, 0.99) * 1000:>10.2f}{p50 / base:>12.2f}")
        print()

    table("chat turn, gateway overhead", overheads)
    table("cheap request, round trip", cheap)


if __name__ == "__main__":
    main()
