"""Expired items deleted locally, as DynamoDB's TTL process does on AWS, and the ticker that runs it."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from orbital.local import ttl
from orbital.local.server import Ticker
from orbital.store.backends.database import Database
from orbital.store.backends.sqlite import SqliteTable

from tests.conftest import wait_for


def test_expired_items_are_deleted(tmp_path: Path, monkeypatch: Any) -> None:
    """The local runtime's table: expired items leave the database, live ones and those written again stay."""
    with Database(tmp_path / "t.sqlite3") as db:
        table = SqliteTable(db)
        now = time.time()
        past, future, kept, rewritten = ("T#past", "a"), ("T#future", "b"), ("T#kept", "c"), ("T#again", "d")
        table.put(past, {"x": 1}, ttl=int(now) - 10)
        table.put(future, {"x": 2}, ttl=int(now) + 3600)
        table.put(kept, {"x": 3})
        assert table.get(past) is None  # already absent to readers; still stored
        assert {item["PK"]["S"] for item in table.scan_items()} == {past[0], future[0], kept[0]}

        assert ttl.sweep(table, "ttl", now) == 1
        assert {item["PK"]["S"] for item in table.scan_items()} == {future[0], kept[0]}
        assert table.get(future).data == {"x": 2} and table.get(kept).data == {"x": 3}
        assert ttl.sweep(table, "ttl", now) == 0
        for n in range(5):
            table.put((f"T#many{n}", "x"), {}, ttl=int(now) - 1)
        monkeypatch.setattr(ttl, "MAX_PER_SWEEP", 3)
        assert [ttl.sweep(table, "ttl", now) for _ in range(3)] == [3, 2, 0]  # the rest in the next sweep

        # expired, then written again with a later ttl before the sweep: kept
        table.put(rewritten, {"x": 4}, ttl=int(now) - 5)
        table.put(rewritten, {"x": 4}, ttl=int(now) + 3600)
        assert ttl.sweep(table, "ttl", now) == 0
        assert table.get(rewritten).data == {"x": 4}
        with pytest.raises(ValueError, match="expires items by 'ttl'"):
            ttl.sweep(table, "expiry", now)


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
