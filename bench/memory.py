"""Resident memory of a long-lived local gateway: `orbital dev` in its own process answering rounds of tool calls.

A node in this process answers every `tool.invoke` at once; after each round of calls the resident memory of the
gateway's process and of its children (the Step Functions process) is read from /proc. A gateway whose memory
keeps growing round after round keeps something per call.

    python bench/memory.py [--rounds 6] [--calls 1000] [--gateway-arg=--step-functions-in-process]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "orbital"))
sys.path.insert(0, str(ROOT))

from bench.common import children, rss_mib, start_gateway, stop  # noqa: E402 - after the path setup above
from bench.nodes import InstantNode, invoke_round_trips  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--gateway-arg", action="append", default=[], help="pass an option to `orbital dev`")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_gateway(Path(tmp) / "data", *args.gateway_arg)
        try:
            node = InstantNode(url, "instant")
            node.start()
            invoke_round_trips(url, "instant__Echo", {"x": 1}, 50)
            print(f"{'tool calls':>10}{'gateway MiB':>14}{'children MiB':>14}{'seconds':>10}")
            done = 50
            for _ in range(args.rounds + 1):
                kids = children(proc.pid)
                print(f"{done:>10}{rss_mib(proc.pid):>14.0f}{sum(rss_mib(k) for k in kids):>14.0f}", end="", flush=True)
                if done >= 50 + args.rounds * args.calls:
                    print()
                    break
                start = time.perf_counter()
                invoke_round_trips(url, "instant__Echo", {"x": 1}, args.calls)
                print(f"{time.perf_counter() - start:>10.1f}")
                done += args.calls
                time.sleep(0.5)  # the round's last executions end
            node.stop.set()
        finally:
            stop(proc)


if __name__ == "__main__":
    main()
