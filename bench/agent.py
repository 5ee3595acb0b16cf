"""The agent turn's own cost, beside `config.get` in the same run.

A local gateway runs in this process with the scripted model server on loopback answering at once. For runs of 1
model call (a plain reply) and of several (each reply asks for a cheap native tool, then a final reply), it measures:

- wall time from `chat.send` to the `final` event, as a client sees it;
- the time spent inside the model call (`complete`, measured around it in process), which is the model's, not ours;
- gateway overhead per iteration = (wall - model time) / model calls;
- AWS API calls per single-iteration turn (counted at the boto3 client factory: DynamoDB, S3, Step Functions,
  management API), with and without the PostToConnection pushes to clients;
- with `--long N` (default 200; 0 leaves it out), one session of N turns alternating a plain turn and a turn with
  one tool call (two model calls): the overhead of a turn in its first 20 turns (around turn 10) and in its last
  20 (around turn N), their ratio, and the DynamoDB calls per turn (local calls answered without botocore are
  counted too: the local Workflows and Sender count them at the same factory counter). A turn's cost that grows with the
  session's length shows as a ratio above 1. The first and the last turns are minutes apart, and this machine's
  load moves meanwhile: so each of the last 20 turns is also followed by the same kind of turn in a second session
  reset every 20 turns, and the late turns are compared with those too (same moments, same load). Here the
  overhead is the wall time less the model server's own time (from a request's arrival to its answer's last byte),
  so building the request from the history and sending it count as the gateway's; the overhead outside `complete`
  (as above) is shown too. `--long-only` skips the other scenarios.

`config.get` p50 in the same run is the yardstick (this machine is shared and noisy: compare ratios, not
milliseconds across runs).

    python bench/agent.py [--runs 20] [--iterations 3] [--long 200] [--long-only]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "orbital"))
sys.path.insert(0, str(ROOT))

PLAIN = "plain"
ONE_TOOL = "one tool call"
TOOL_MESSAGE = "bench: use a tool"


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


def run_turn(client: Any, key: str, message: str = "bench") -> float:
    from tests.support.agent import follow_run

    start = time.perf_counter()
    started = client.call("chat.send", {"sessionKey": key, "message": message})
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


class ServerClock:
    """Accumulates the time the scripted model server spends on requests, from a request's arrival (its headers
    read) to the last byte of its answer: reading and parsing the request is the model's part of sending it."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._lock = threading.Lock()

    def install(self, llm: Any) -> None:
        handler = llm._server.RequestHandlerClass  # this server's own handler class
        original = handler.do_POST

        def timed(request_handler: Any) -> None:
            start = time.perf_counter()
            try:
                original(request_handler)
            finally:
                with self._lock:
                    self.seconds += time.perf_counter() - start

        handler.do_POST = timed

    def take(self) -> float:
        with self._lock:
            taken, self.seconds = self.seconds, 0.0
        return taken


@dataclass
class LongTurn:
    number: int
    """The turn's place in its session (in the reference session: since its last reset)."""
    kind: str
    overhead: float
    """Wall time less the model server's time."""
    outside: float
    """Wall time less the time inside `complete`."""
    dynamodb_calls: int


class LongSession:
    """One session of `turns` turns, a plain one then one with a tool call, and so on; each turn's overhead and the
    DynamoDB calls counted while it ran (from `chat.send` until the session is idle again). Alongside its last
    `width` turns, a turn of the same kind in a reference session kept short (reset every `width` turns), so the
    late turns have early ones measured at the same moment, under the same load."""

    def __init__(self, client: Any, llm: Any, clock: ModelClock, server: ServerClock) -> None:
        self.client, self.llm, self.clock, self.server = client, llm, clock, server
        self.long: list[LongTurn] = []
        self.reference: list[LongTurn] = []

    def run(self, turns: int, width: int) -> None:
        key = f"agent:main:bench-long-{uuid.uuid4().hex[:6]}"
        reference = f"agent:main:bench-short-{uuid.uuid4().hex[:6]}"
        for number in range(1, turns + 1):
            kind = PLAIN if number % 2 else ONE_TOOL
            self.long.append(self.turn(key, number, kind))
            if number > turns - width:
                place = len(self.reference) % width + 1
                if place == 1 and self.reference:
                    self.client.call("session.reset", {"sessionKey": reference})
                self.reference.append(self.turn(reference, place, kind))

    def turn(self, key: str, number: int, kind: str) -> LongTurn:
        from orbital.aws import clients

        self.llm.reset()  # the model server keeps every request it got: the bench's own memory must not grow
        self.llm.responder = _respond_long
        self.clock.take()
        self.server.take()
        clients.reset_call_counts()
        wall = run_turn(self.client, key, TOOL_MESSAGE if kind == ONE_TOOL else "bench")
        model_s, _ = self.clock.take()
        served_s = self.server.take()
        wait_idle(self.client, key)
        dynamodb = sum(n for name, n in clients.call_counts().items() if name.startswith("dynamodb."))
        return LongTurn(number, kind, wall - served_s, wall - model_s, dynamodb)


def _respond_long(request: Any) -> Any:
    from tests.support.fake_llm import call, reply

    messages = request.body["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    asks_tool = TOOL_MESSAGE in json.dumps(messages[last_user])
    if asks_tool and not any(m["role"] == "tool" for m in messages[last_user:]):
        return reply(tool_calls=[call("gsv__ConfigGet", {"path": "model"})])
    return reply("done")


def report_long(session: LongSession, base: float, width: int) -> None:
    done = session.long
    early = done[:width]
    late = done[-width:]
    columns = (
        (f"turns {early[0].number}-{early[-1].number}", early),
        (f"turns {late[0].number}-{late[-1].number}", late),
        ("alongside: 1-" + str(width), session.reference),
    )
    print(f"\nOne session of {len(done)} turns, a plain turn and a turn with one tool call in turn; alongside its last")
    print(f"{width} turns, the same turns in a session reset every {width} turns (measured at the same moments).")
    print("Overhead / turn p50, ms (x config.get); the ratios: the late turns over the early ones, and over those")
    print("alongside:")
    heading = "".join(f"{label:>22}" for label, _ in columns)
    print(f"{'':<34}{heading}{'late/early':>12}{'late/along':>12}")
    for label, measure in (("", lambda t: t.overhead), (" (outside complete)", lambda t: t.outside)):
        for kind in (PLAIN, ONE_TOOL):
            p50s = [statistics.median(measure(t) for t in turns if t.kind == kind) for _, turns in columns]
            cells = "".join(f"{f'{v * 1000:.1f} ({v / base:.0f})':>22}" for v in p50s)
            print(f"{kind + label:<34}{cells}{p50s[1] / p50s[0]:>12.2f}{p50s[1] / p50s[2]:>12.2f}")
    print(f"{'DynamoDB calls / turn (median, max)':<34}")
    for kind in (PLAIN, ONE_TOOL):
        cells = ""
        for _, turns in columns:
            calls = [t.dynamodb_calls for t in turns if t.kind == kind]
            cells += f"{f'{statistics.median(calls):g}, {max(calls)}':>22}"
        print(f"{kind:<34}{cells}")


def short_scenarios(c: Any, llm: Any, clock: ModelClock, runs: int, rounds: int) -> dict[str, Any]:
    """Runs of 1 and of `rounds` model calls, each in a session of its own: (walls, overheads per iteration)."""
    from tests.support.fake_llm import call, reply

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
        for _ in range(runs):
            wall = run_turn(c, key)
            model_s, model_calls = clock.take()
            walls.append(wall)
            overheads.append((wall - model_s) / max(1, model_calls))
            wait_idle(c, key)
        scenarios[label] = (walls, overheads)
    return scenarios


def turn_calls(c: Any, llm: Any) -> Counter[str]:
    """The AWS calls of one single-iteration turn (its session's second)."""
    from orbital.aws import clients

    from tests.support.fake_llm import reply

    key = f"agent:main:bench-{uuid.uuid4().hex[:6]}"
    llm.responder = lambda request: reply("done")
    run_turn(c, key)
    wait_idle(c, key)
    time.sleep(0.2)  # let the warm-up execution finish its last transition
    clients.reset_call_counts()
    run_turn(c, key)
    wait_idle(c, key)
    time.sleep(0.2)
    return Counter(clients.call_counts())


def report_short(scenarios: dict[str, Any], counts: Counter[str], base: float) -> None:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per scenario")
    parser.add_argument("--iterations", type=int, default=3, help="model calls in the multi-iteration scenario")
    parser.add_argument("--long", type=int, default=200, help="turns of the long session (0: leave it out)")
    parser.add_argument("--window", type=int, default=20, help="turns at the start, at the end, and alongside")
    parser.add_argument("--long-only", action="store_true", help="only the long session (and the yardstick)")
    args = parser.parse_args()

    from orbital.client import GatewayClient
    from orbital.local.server import GatewayOptions, LocalGateway

    from tests.support.agent import configure_fake_model
    from tests.support.fake_llm import FakeLLM

    clock, server = ModelClock(), ServerClock()
    scenarios: dict[str, Any] = {}
    counts: Counter[str] = Counter()
    long_session: LongSession | None = None
    with tempfile.TemporaryDirectory() as tmp, FakeLLM() as llm:
        gateway = LocalGateway(GatewayOptions(port=0, data_dir=Path(tmp), project=ROOT, quiet=True)).start()
        clock.install()
        server.install(llm)
        try:
            with GatewayClient(gateway.ws_url, timeout=60) as c:
                c.connect("client", "bench-agent")
                configure_fake_model(c, llm.base_url)
                if not args.long_only:
                    scenarios = short_scenarios(c, llm, clock, args.runs, args.iterations)
                base = config_get_p50(c)
                if not args.long_only:
                    counts = turn_calls(c, llm)
                if args.long > 0:
                    long_session = LongSession(c, llm, clock, server)
                    long_session.run(args.long, min(args.window, args.long))
        finally:
            gateway.stop()

    print(f"config.get p50: {base * 1000:.2f} ms (yardstick, same run)")
    if scenarios:
        report_short(scenarios, counts, base)
    if long_session is not None:
        report_long(long_session, base, min(args.window, args.long))


if __name__ == "__main__":
    main()
