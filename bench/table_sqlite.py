"""The local table on SQLite: what a read costs against the DynamoDB table on moto, and what durability costs.

1. Reads, per call (median of repeated rounds): `get` of one item (a session's meta, ~1 KB payload) and `view` of it,
   and `query` of a partition (50 and 500 messages; all, and the last 20): the DynamoDB table on moto against the
   SQLite table.
2. Acknowledged writes per second from many threads at once (conditional puts and counter updates of distinct
   items, as request and task threads make them), for each durability mode: group commit (`synchronous=NORMAL` and
   one shared fsync of the WAL per round of waiters), `synchronous=FULL` (every commit syncs, under the write lock),
   and not durable (committed, never waited for). The modes alternate A/B/C/A/B/C in one run; the ratio durable /
   not durable is the number to read (this machine is shared and noisy). `--work-us` adds that much CPU per write
   outside the table (a request's own work), which is closer to the gateway's case than bare writes.

    python bench/table_sqlite.py [--threads 4,16,64] [--writes 4000] [--work-us 0,300]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "orbital"))
sys.path.insert(0, str(ROOT))


def per_call_us(fn: Callable[[], Any], calls: int = 2000, rounds: int = 5) -> float:
    samples = []
    for _ in range(rounds):
        began = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - began) / calls * 1e6)
    return statistics.median(samples)


def meta() -> dict[str, Any]:
    return {
        "sessionKey": "agent:main:bench",
        "label": "a session label",
        "model": "anthropic/claude-sonnet",
        "tokens": {"input": 12345, "output": 678},
        "origin": {"channel": "telegram", "peer": {"id": "12345", "name": "someone"}},
        "notes": ["lorem ipsum dolor sit amet " * 3] * 8,
    }


def fill(table: Any, messages: int) -> None:
    body = "lorem ipsum dolor sit amet " * 8
    for n in range(messages):
        table.put((f"S#{messages}", f"MSG#{n:08d}"), {"role": "user", "content": body, "n": n})


def reads() -> None:
    import boto3
    from moto import mock_aws
    from orbital.local.template import load_template, table_definition
    from orbital.store.backends.database import Database
    from orbital.store.backends.dynamo import DynamoTable
    from orbital.store.backends.sqlite import SqliteTable

    print("1. reads, us per call (DynamoDB table on moto; SQLite)")
    os.environ.update(AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x", AWS_DEFAULT_REGION="us-east-1")
    with mock_aws(), tempfile.TemporaryDirectory() as tmp:
        _, kwargs = table_definition(load_template(ROOT / "template.yaml"))
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(TableName="bench", **kwargs)
        dynamo = DynamoTable(client, "bench")
        db = Database(Path(tmp) / "bench.db")
        lite = SqliteTable(db)
        key = ("SESSION#agent:main:bench", "META")
        for table in (dynamo, lite):
            table.put(key, meta(), attrs={"v": 3})
            fill(table, 50)
            fill(table, 500)
            table.query("S#50")
            table.query("S#500")

        def make(rec: Any) -> Any:
            return dict(rec.data)

        cases: list[tuple[str, Callable[[Any], Any], int]] = [
            ("get (1 KB item)", lambda t: t.get(key), 5000),
            ("view (1 KB item)", lambda t: t.view(key, make), 5000),
            ("query 50 items", lambda t: t.query("S#50"), 300),
            ("query 500 items", lambda t: t.query("S#500"), 40),
            ("query last 20 of 500", lambda t: t.query("S#500", forward=False, limit=20), 500),
        ]
        print(f"   {'':24} {'DynamoDB (moto)':>16} {'SQLite':>10} {'difference':>11}")
        for label, op, calls in cases:
            a = per_call_us(lambda op=op: op(dynamo), calls)
            b = per_call_us(lambda op=op: op(lite), calls)
            print(f"   {label:24} {a:14.1f}us {b:8.1f}us {b - a:+9.1f}us")
        threads = 4
        rate = {}
        for label, table in (("DynamoDB (moto)", dynamo), ("SQLite", lite)):
            rate[label] = parallel_rate(lambda t=table: t.get(key), threads, 20000)
        print(
            f"   get from {threads} threads at once: DynamoDB (moto) {rate['DynamoDB (moto)']:.0f}/s, "
            f"SQLite {rate['SQLite']:.0f}/s"
        )
        db.close()


def parallel_rate(fn: Callable[[], Any], threads: int, total: int) -> float:
    each = total // threads
    barrier = threading.Barrier(threads + 1)

    def run() -> None:
        barrier.wait()
        for _ in range(each):
            fn()
        barrier.wait()

    workers = [threading.Thread(target=run, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    barrier.wait()
    began = time.perf_counter()
    barrier.wait()
    elapsed = time.perf_counter() - began
    for worker in workers:
        worker.join()
    return each * threads / elapsed


def busy(us: float) -> None:
    if us <= 0:
        return
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


def write_rate(mode: str, threads: int, writes: int, work_us: float) -> float:
    from orbital.store import conditions as cond
    from orbital.store.backends.database import Database
    from orbital.store.backends.sqlite import SqliteTable

    with tempfile.TemporaryDirectory(dir=os.environ.get("ORBITAL_BENCH_DIR")) as tmp:
        db = Database(Path(tmp) / "bench.db", durable=mode != "off", sync="full" if mode == "full" else "group")
        table = SqliteTable(db)
        each = writes // threads
        barrier = threading.Barrier(threads + 1)
        data = meta()

        def run(index: int) -> None:
            barrier.wait()
            for i in range(each):
                busy(work_us)
                if i % 2:
                    table.put((f"B#{index}", f"{i}"), data, attrs={"v": 1}, condition=cond.not_exists("PK"))
                else:
                    table.update((f"B#{index}", "counter"), add={"n": 1}, set_attrs={"at": i})
            barrier.wait()

        workers = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(threads)]
        for worker in workers:
            worker.start()
        barrier.wait()
        began = time.perf_counter()
        barrier.wait()
        elapsed = time.perf_counter() - began
        for worker in workers:
            worker.join()
        syncs, committed = db.syncs, db.committed
        db.close()
    if mode == "group":
        write_rate.last_share = committed / max(1, syncs)  # type: ignore[attr-defined]
    return each * threads / elapsed


def durability(thread_counts: list[int], writes: int, works: list[float]) -> None:
    print("2. acknowledged writes/s from many threads (A/B/C/A/B/C per row; ratio to not durable)")
    for work_us in works:
        for threads in thread_counts:
            rates: dict[str, list[float]] = {"group": [], "full": [], "off": []}
            shares = []
            for _ in range(2):
                for mode in rates:
                    rates[mode].append(write_rate(mode, threads, writes, work_us))
                    if mode == "group":
                        shares.append(write_rate.last_share)  # type: ignore[attr-defined]
            mean = {mode: statistics.mean(values) for mode, values in rates.items()}
            print(
                f"   {threads:3d} threads, {work_us:4.0f} us work/write: group {mean['group']:7.0f}/s "
                f"({mean['group'] / mean['off']:.2f}x, {statistics.mean(shares):.1f} commits/fsync)  "
                f"full {mean['full']:7.0f}/s ({mean['full'] / mean['off']:.2f}x)  not durable {mean['off']:7.0f}/s"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", default="4,16,64")
    parser.add_argument("--writes", type=int, default=4000)
    parser.add_argument("--work-us", default="0,300")
    parser.add_argument("--skip-reads", action="store_true")
    args = parser.parse_args()
    if not args.skip_reads:
        reads()
    durability([int(n) for n in args.threads.split(",")], args.writes, [float(w) for w in args.work_us.split(",")])


if __name__ == "__main__":
    main()
