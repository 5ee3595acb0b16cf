"""The CPU one `config.get` costs the local gateway's handler, measured in process: this checkout and others.

`bench/rpc.py`'s throughput is a wall-clock figure, and on this shared two-core machine it moves with whatever else
runs. This one is CPU time, which moves far less: an in-process `LocalGateway` of each checkout (in its own
interpreter), one real `config.get` over a WebSocket to capture the event its bridge hands the handler, then that
event replayed through the handler (the Lambda entry point, as the bridge runs it on its event loop) many times.
It leaves out the socket and the WebSocket framing (the same code in every checkout). Prints, per checkout, the
median and the least CPU per call over `--repeats` batches, and the SQL SELECTs its database ran per call (where
the checkout has a SQLite table).

    python bench/read_path.py [--calls 5000] [--repeats 7] [--against ../other-checkout ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MEASURE = r"""
import json, sys, tempfile, time
from pathlib import Path

checkout, calls, repeats = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
selects = [0]
try:
    from orbital.store.backends.database import Database
except ImportError:  # a checkout from before the SQLite table
    Database = None
if Database is not None:
    connect = Database._connect

    def count(sql):
        if sql.lstrip().upper().startswith("SELECT"):
            selects[0] += 1

    def traced(self):
        conn = connect(self)
        conn.set_trace_callback(count)
        return conn

    Database._connect = traced

from orbital.client import GatewayClient
from orbital.local.server import GatewayOptions, LocalGateway

with tempfile.TemporaryDirectory() as tmp:
    gateway = LocalGateway(GatewayOptions(port=0, data_dir=Path(tmp), project=checkout)).start()
    try:
        invoke = gateway.bridge.invoke
        captured = []

        def spy(function, event):
            if '"config.get"' in str(event.get("body", "")):
                captured.append((function, event))
            return invoke(function, event)

        gateway.bridge.invoke = spy
        with GatewayClient(gateway.ws_url) as client:
            client.connect("client", "bench-read-path")
            client.call("config.get", {"path": "model"})
            function, event = captured[-1]
            for _ in range(1000):
                invoke(function, event)
            per_call = []
            before = selects[0]
            for _ in range(repeats):
                began = time.process_time()
                for _ in range(calls):
                    invoke(function, event)
                per_call.append((time.process_time() - began) / calls)
            per_call.sort()
            print(json.dumps({
                "median_us": per_call[len(per_call) // 2] * 1e6,
                "least_us": per_call[0] * 1e6,
                "selects": (selects[0] - before) / (calls * repeats) if Database is not None else None,
            }))
    finally:
        gateway.stop()
"""


def measure(checkout: Path, python: str, calls: int, repeats: int) -> dict[str, float | None]:
    env = {**os.environ, "PYTHONPATH": str(checkout / "layers" / "orbital")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run(
        [python, "-c", MEASURE, str(checkout), str(calls), str(repeats)],
        env=env,
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{checkout}: the measurement failed:\n{out.stderr[-2000:]}")
    result: dict[str, float | None] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=5000, help="calls per batch")
    parser.add_argument("--repeats", type=int, default=7, help="batches per checkout")
    parser.add_argument("--against", type=Path, action="append", default=[], help="another checkout (repeatable)")
    args = parser.parse_args()
    checkouts = [ROOT, *(c.resolve() for c in args.against)]
    print(f"{'checkout':<40}{'median us':>12}{'least us':>12}{'SELECTs/call':>14}")
    for checkout in checkouts:
        own = checkout / ".venv" / "bin" / "python"
        got = measure(checkout, str(own) if own.exists() else sys.executable, args.calls, args.repeats)
        selects = "" if got["selects"] is None else f"{got['selects']:.2f}"
        print(f"{checkout!s:<40}{got['median_us']:>12.1f}{got['least_us']:>12.1f}{selects:>14}")


if __name__ == "__main__":
    main()
