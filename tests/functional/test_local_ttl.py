"""Expired items deleted locally, as DynamoDB's TTL process does on AWS, and the ticker that runs it."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import boto3
from moto.dynamodb.models import dynamodb_backends
from orbital.local import ttl
from orbital.local.server import Ticker
from orbital.local.stack import ACCOUNT, REGION
from orbital.store.dynamo_table import DynamoTable

from tests.conftest import TABLE, wait_for


def _stored(key: tuple[str, str]) -> bool:
    client = boto3.client("dynamodb", region_name="us-east-1")
    return "Item" in client.get_item(TableName=TABLE, Key={"PK": {"S": key[0]}, "SK": {"S": key[1]}})


def test_expired_items_are_deleted_and_leave_the_cache(services: Any, monkeypatch: Any) -> None:
    table = DynamoTable(services.table.client, TABLE, cache=True)  # as the local gateway's
    now = time.time()
    past, future, kept, rewritten = ("T#past", "a"), ("T#future", "b"), ("T#kept", "c"), ("T#again", "d")
    table.put(past, {"x": 1}, ttl=int(now) - 10)
    table.put(future, {"x": 2}, ttl=int(now) + 3600)
    table.put(kept, {"x": 3})
    assert table.get(past) is None  # already absent to readers; still stored and cached
    assert _stored(past) and past in table._items

    assert ttl.sweep(table, "ttl", now) == 1
    partitions = dynamodb_backends[ACCOUNT][REGION].get_table(TABLE).items
    assert {str(h.value) for h in partitions} == {future[0], kept[0]}  # no empty map left behind
    assert not _stored(past) and past not in table._items
    assert _stored(future) and _stored(kept)
    assert table.get(future).data == {"x": 2} and table.get(kept).data == {"x": 3}
    assert ttl.sweep(table, "ttl", now) == 0
    for n in range(5):
        table.put((f"T#many{n}", "x"), {}, ttl=int(now) - 1)
    monkeypatch.setattr(ttl, "MAX_PER_SWEEP", 3)
    assert [ttl.sweep(table, "ttl", now) for _ in range(3)] == [3, 2, 0]  # the rest in the next sweep

    # listed as expired, then written again with a later ttl before its delete: kept
    table.put(rewritten, {"x": 4}, ttl=int(now) + 3600)
    monkeypatch.setattr(ttl, "expired_keys", lambda *_: [rewritten])
    assert ttl.sweep(table, "ttl", now) == 0
    assert table.get(rewritten).data == {"x": 4}


def test_the_ticker_runs_its_housekeeping_every_so_often() -> None:
    ran = threading.Event()
    times: list[float] = []

    def housekeeping() -> None:
        times.append(time.monotonic())
        if len(times) == 3:
            ran.set()

    ticker = Ticker(None, [], 0.01, housekeeping=housekeeping, housekeeping_every=0.05)
    ticker.start()
    try:
        assert ran.wait(10)
    finally:
        ticker.stop()
    assert all(later - earlier >= 0.05 for earlier, later in itertools.pairwise(times))
    wait_for(lambda: not ticker._thread.is_alive())
