"""The two writes of a tool call as the local gateway makes them at moto's backend (`orbital.local.moto_items`): the
pending call's conditional `PutItem` and its claim (`UpdateItem`, `ALL_OLD`), without the gateway around them.

Prints microseconds per call (the best of five means of `--calls` calls), and with `--instructions` the instructions
per call counted by valgrind's callgrind (a run of `--calls` calls less a run of none: the same count whatever else
the machine does). `--against DIR` measures another checkout's code the same way, alternately, in the same run.

    python bench/writes.py [--calls 2000] [--against ../other-checkout] [--instructions]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DATA = (
    '{"callId":"x","kind":"tool","nodeId":"n1","nodeConnectionId":"c1","timeoutMs":30000,"createdAt":1764100000000,'
    '"callerConnectionId":"c2","frameId":"f","tool":"n1__Echo","extra":{}}'
)


def _table() -> object:
    """The gateway's table as the template defines it, in moto; returns moto's DynamoDB backend."""
    import boto3
    from orbital.local.template import load_template, table_definition

    _, definition = table_definition(load_template(ROOT / "template.yaml"))
    boto3.client("dynamodb", region_name="us-east-1").create_table(TableName="t", **definition)
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    return dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]


def measure(calls: int, repeats: int, claims: bool) -> None:
    """In this process (the checkout on `sys.path`): time `calls` puts and (with `claims`) `calls` claims of the
    items put, `repeats` times each."""
    os.environ.update(AWS_ACCESS_KEY_ID="local", AWS_SECRET_ACCESS_KEY="local", AWS_DEFAULT_REGION="us-east-1")
    from moto import mock_aws

    with mock_aws():
        backend = _table()
        from orbital.local import moto_items, moto_updates, stack

        stack.cache_conditions()
        moto_updates.fast_update_items()
        if hasattr(stack, "plain_string_keys"):
            stack.plain_string_keys()
        ids = [f"{i:08d}-0000-4000-8000-000000000000" for i in range(calls * repeats + 1)]

        def put(i: int) -> None:
            item = {
                "PK": {"S": f"CALL#{ids[i]}"},
                "SK": {"S": "META"},
                "d": {"S": DATA},
                "ttl": {"N": "1764103600"},
                "GSI1PK": {"S": "NODECALLS#n1"},
                "GSI1SK": {"S": ids[i]},
                "st": {"S": "pending"},
            }
            params = {"TableName": "t", "Item": item, "ConditionExpression": "attribute_not_exists(PK)"}
            if moto_items.put_item(backend, params) != {}:
                raise RuntimeError("the put was not answered at moto's backend")

        def claim(i: int) -> None:
            params = {
                "TableName": "t",
                "Key": {"PK": {"S": f"CALL#{ids[i]}"}, "SK": {"S": "META"}},
                "UpdateExpression": "SET #s0 = :s0 REMOVE GSI1PK, GSI1SK",
                "ReturnValues": "ALL_OLD",
                "ExpressionAttributeNames": {"#s0": "st"},
                "ExpressionAttributeValues": {":pending": {"S": "pending"}, ":s0": {"S": "done"}},
                "ConditionExpression": "st = :pending",
            }
            answer = moto_items.update_item(backend, params)
            if not answer or "Attributes" not in answer:
                raise RuntimeError("the claim was not answered at moto's backend")

        put(calls * repeats)  # warm: the condition parsed, the update's text checked
        claim(calls * repeats)
        if calls == 0:  # the run the counted ones are compared with: everything but the calls
            return
        for name, write in (("put", put), ("claim", claim))[: 2 if claims else 1]:
            means = []
            for r in range(repeats):
                start = time.perf_counter()
                for i in range(r * calls, (r + 1) * calls):
                    write(i)
                means.append((time.perf_counter() - start) / calls)
            print(f"{name} {min(means) * 1e6:.2f} {statistics.median(means) * 1e6:.2f}", flush=True)


def _run(
    source: Path, calls: int, repeats: int, prefix: list[str], *, claims: bool = True
) -> tuple[dict[str, tuple[float, float]], int]:
    env = {**os.environ, "PYTHONPATH": str(source / "layers" / "orbital")}
    command = [*prefix, sys.executable, __file__, "--child", str(calls), str(repeats), "both" if claims else "put"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    times = {line.split()[0]: (float(line.split()[1]), float(line.split()[2])) for line in done.stdout.splitlines()}
    counted = [line for line in done.stderr.splitlines() if "Collected :" in line]
    return times, int(counted[-1].split()[-1]) if counted else 0


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        measure(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "both")
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--against", type=Path, default=None, metavar="DIR")
    parser.add_argument("--instructions", action="store_true", help="also count instructions (valgrind)")
    args = parser.parse_args()
    sources = [("this checkout", ROOT)] + (
        [(f"checkout {args.against.name}", args.against.resolve())] if args.against else []
    )
    print(f"{'code':<24}{'put us (best / median)':>26}{'claim us (best / median)':>28}")
    for _ in range(2):  # alternately, twice
        for label, source in sources:
            times, _ = _run(source, args.calls, 5, [])
            print(
                f"{label:<24}{times['put'][0]:>14.2f} / {times['put'][1]:<9.2f}"
                f"{times['claim'][0]:>16.2f} / {times['claim'][1]:<9.2f}"
            )
    if not args.instructions:
        return
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("valgrind is not installed: no instruction counts")
        return
    prefix = [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    calls = min(args.calls, 400)
    print(f"\ninstructions per call (callgrind, {calls} calls of each, less a run without them):")
    for label, source in sources:
        _, none = _run(source, 0, 1, prefix, claims=False)
        _, puts = _run(source, calls, 1, prefix, claims=False)
        _, both = _run(source, calls, 1, prefix)
        print(f"{label:<24}put {(puts - none) / calls:>10,.0f}   claim {(both - puts) / calls:>10,.0f}")


if __name__ == "__main__":
    main()
