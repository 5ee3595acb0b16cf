"""The agent turn's own cost, beside `config.get` in the same run.

A local gateway runs in this process with the scripted model server on loopback answering at once. For runs of 1
model call (a plain reply) and of several (each reply asks for a cheap native tool, then a final reply), it measures:

- wall time from `chat.send` to the `final` event, as a client sees it;
- the time spent inside the model call (`complete`, measured around it in process), which is the model's, not ours;
- gateway overhead per iteration = (wall - model time) / model calls;
- AWS API calls per single-iteration turn (counted at the boto3 client factory: DynamoDB, S3, Step Functions,
  management API), with and without the PostToConnection pushes to clients.

`config.get` p50 in the same run is the yardstick (this machine is shared and noisy: compare ratios, not
milliseconds across runs).

    python bench/agent.py [--runs 20] [--iterations 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "orbital"))
sys.path.insert(0, str(ROOT))


class ModelClock:
    """Accumulates the time spent inside model calls (wrapping the turn's `complete`)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._lock = threading.Lock()

    def install(self) -> None:
        from orbital.agent import turn

        original = turn.complete

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                with self._lock:
                    self.seconds += time.perf_counter() - start
                    self.calls += 1

        turn.complete = timed  # type: ignore[assignment]

    def take(self) -> tuple[float, int]:
        with self._lock:
            taken = (self.seconds, self.calls)
            self.seconds, self.calls = 0.0, 0
        return taken


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def wait_idle(client: Any, key: str, timeout: float = 30.0) -> None:
    """Until the session's run has released it (the final event is sent just after)."""
    deadline = time.monotonic() + timeout
    while client.call("session.stats", {"sessionKey": key})["isProcessing"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{key} stayed busy")
        time.sleep(0.005)


def run_turn(client: Any, key: str) -> float:
    from tests.support.agent import follow_run

    start = time.perf_counter()
    started = client.call("chat.send", {"sessionKey": key, "message": "bench"})
    events = follow_run(client, started["runId"], timeout=60)
    elapsed = time.perf_counter() - start
    if events[-1]["state"] != "final":
        raise RuntimeError(f"run failed: {events[-1]}")
    return elapsed


def config_get_p50(client: Any, n: int = 200) -> float:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        client.call("config.get", {"path": "model"})
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per scenario")
    parser.add_argument("--iterations", type=int, default=3, help="model calls in the multi-iteration scenario")
    args = parser.parse_args()

    from orbital.aws import clients
    from orbital.client import GatewayClient
    from orbital.local.server import GatewayOptions, LocalGateway

    from tests.support.agent import configure_fake_model
    from tests.support.fake_llm import FakeLLM, call, reply

    clock = ModelClock()
    with tempfile.TemporaryDirectory() as tmp, FakeLLM() as llm:
        gateway = LocalGateway(GatewayOptions(port=0, data_dir=Path(tmp), project=ROOT, quiet=True)).start()
        clock.install()
        try:
            with GatewayClient(gateway.ws_url, timeout=60) as c:
                c.connect("client", "bench-agent")
                configure_fake_model(c, llm.base_url)
                rounds = args.iterations

                def respond(request: Any) -> Any:
                    messages = request.body["messages"]
                    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
                    tools = sum(1 for m in messages[last_user:] if m["role"] == "tool")
                    if tools < rounds - 1:
                        return reply(tool_calls=[call("gsv__ConfigGet", {"path": "model"})])
                    return reply("done")

                scenarios = {}
                for label, iterations in (("1 model call", 1), (f"{rounds} model calls", rounds)):
                    llm.responder = (lambda request: reply("done")) if iterations == 1 else respond
                    key = f"agent:main:bench-{uuid.uuid4().hex[:6]}"
                    run_turn(c, key)  # warm-up: imports, caches, first execution
                    wait_idle(c, key)
                    clock.take()
                    walls, overheads = [], []
                    for _ in range(args.runs):
                        wall = run_turn(c, key)
                        model_s, model_calls = clock.take()
                        walls.append(wall)
                        overheads.append((wall - model_s) / max(1, model_calls))
                        wait_idle(c, key)
                    scenarios[label] = (walls, overheads)

                base = config_get_p50(c)

                key = f"agent:main:bench-{uuid.uuid4().hex[:6]}"
                llm.responder = lambda request: reply("done")
                run_turn(c, key)
                wait_idle(c, key)
                time.sleep(0.2)  # let the warm-up execution finish its last transition
                clients.reset_call_counts()
                run_turn(c, key)
                wait_idle(c, key)
                time.sleep(0.2)
                counts = Counter(clients.call_counts())
        finally:
            gateway.stop()

    print(f"config.get p50: {base * 1000:.2f} ms (yardstick, same run)")
    print(
        f"{'scenario':<20}{'wall p50 ms':>12}{'wall p99 ms':>12}"
        f"{'overhead/iter p50 ms':>22}{'p99':>8}{'x config.get':>14}"
    )
    for label, (walls, overheads) in scenarios.items():
        p50 = statistics.median(overheads)
        print(
            f"{label:<20}{statistics.median(walls) * 1000:>12.1f}{pct(walls, 0.99) * 1000:>12.1f}"
            f"{p50 * 1000:>22.1f}{pct(overheads, 0.99) * 1000:>8.1f}{p50 / base:>14.1f}"
        )
    pushes = sum(v for k, v in counts.items() if k.endswith("PostToConnection"))
    total = sum(counts.values())
    print(f"\nAWS calls for one single-iteration turn (chat.send to final): {total} in all, {total - pushes} without")
    print(f"the {pushes} PostToConnection pushes to clients")
    for name, n in sorted(counts.items()):
        print(f"  {name:<42}{n:>4}")


if __name__ == "__main__":
    main()
