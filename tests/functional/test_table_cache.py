"""The local gateway's table cache (store/table.py): served from memory, written through, never older than the table."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.conftest import TABLE


@pytest.fixture
def table(aws: None) -> Any:
    import boto3
    from orbital.store.backends.dynamo import DynamoTable

    return DynamoTable(boto3.client("dynamodb", region_name="us-east-1"), TABLE, cache=True)


def paused_after(table: Any, operation: str) -> tuple[threading.Event, threading.Event]:
    """Make the next `operation` call hold its result until released (to interleave a write with a read)."""
    fetched, release = threading.Event(), threading.Event()

    def hold(**_: Any) -> None:
        if not fetched.is_set():
            fetched.set()
            assert release.wait(10)

    table.client.meta.events.register(f"after-call.dynamodb.{operation}", hold)
    return fetched, release


def test_a_read_that_raced_a_write_does_not_cache_the_older_item(table: Any) -> None:
    table.put(("P", "a"), {"v": 1})
    table._items.clear()  # not cached yet: the next read goes to the table
    fetched, release = paused_after(table, "GetItem")
    seen: list[Any] = []
    reader = threading.Thread(target=lambda: seen.append(table.get(("P", "a"))))
    reader.start()
    assert fetched.wait(10)  # the reader holds v=1 from the table
    table.put(("P", "a"), {"v": 2})
    release.set()
    reader.join(10)
    assert seen[0].data == {"v": 1}  # what the table said when it was read
    assert table.get(("P", "a")).data == {"v": 2}  # but it was not cached over the newer write


def test_a_partition_read_that_raced_a_write_is_not_kept(table: Any) -> None:
    table.put(("P", "a"), {"v": 1})
    table._parts.clear()
    fetched, release = paused_after(table, "Query")
    reader = threading.Thread(target=lambda: table.query("P"))
    reader.start()
    assert fetched.wait(10)
    table.put(("P", "b"), {"v": 2})
    release.set()
    reader.join(10)
    assert [r.sk for r in table.query("P")] == ["a", "b"]


def test_writes_go_through_the_cached_partition(table: Any) -> None:
    for sk in ("m1", "m3"):
        table.put(("S", sk), {"sk": sk})
    assert [r.sk for r in table.query("S")] == ["m1", "m3"]  # now cached
    calls: list[str] = []
    table.client.meta.events.register("before-call.dynamodb.*", lambda event_name, **_: calls.append(event_name))
    table.write_batch(puts=[(("S", "m2"), {"sk": "m2"})], deletes=[("S", "m1")])
    table.update(("S", "m3"), set_attrs={"x": 1})
    assert [r.sk for r in table.query("S", sk_prefix="m")] == ["m2", "m3"]
    assert [r.sk for r in table.query("S", forward=False, limit=1)] == ["m3"]
    assert table.get(("S", "m3")).attrs["x"] == 1
    assert all("Query" not in c and "GetItem" not in c for c in calls)  # every read above came from memory


def test_lambda_tables_keep_nothing(aws: None) -> None:
    import boto3
    from orbital.runtime.services import build_services
    from orbital.settings import get_settings

    services = build_services(get_settings())
    assert services.settings.local is False
    assert services.table._cache_on is False and services.workspace._cache_on is False
    services.table.put(("P", "a"), {"v": 1})
    boto3.client("dynamodb", region_name="us-east-1").put_item(
        TableName=TABLE, Item={"PK": {"S": "P"}, "SK": {"S": "a"}, "d": {"S": '{"v": 2}'}}
    )
    assert services.table.get(("P", "a")).data == {"v": 2}  # another writer's change is seen at once


def test_a_key_known_to_be_absent_is_read_without_a_request(table: Any) -> None:
    """A new socket's connection record: `$connect` knows it does not exist, so `connect` reads nothing."""
    from orbital.store.connections import ConnectionRepo

    calls: list[str] = []
    table.client.meta.events.register("before-call.dynamodb.GetItem", lambda **_: calls.append("GetItem"))
    repo = ConnectionRepo(table, 3600)
    repo.opened("fresh")
    assert repo.get("fresh") is None
    assert calls == []
    assert table.get(("CONN#other", "META")) is None and calls == ["GetItem"]


def test_without_the_cache_knowing_absent_keys_changes_nothing(aws: None) -> None:
    import boto3
    from orbital.store.backends.dynamo import DynamoTable

    lambda_table = DynamoTable(boto3.client("dynamodb", region_name="us-east-1"), TABLE, cache=False)
    lambda_table.know_absent(("P", "gone"))
    boto3.client("dynamodb", region_name="us-east-1").put_item(
        TableName=TABLE, Item={"PK": {"S": "P"}, "SK": {"S": "gone"}, "d": {"S": '{"v": 1}'}}
    )
    assert lambda_table.get(("P", "gone")).data == {"v": 1}


def test_a_view_is_made_once_per_stored_version_of_the_item(table: Any) -> None:
    made: list[Any] = []

    def make(rec: Any) -> dict[str, Any]:
        made.append(rec.data)
        return {"v": rec.data["v"]}

    assert table.view(("P", "v"), make) is None  # no item: nothing made
    table.put(("P", "v"), {"v": 1})
    first = table.view(("P", "v"), make)
    assert first == {"v": 1} and table.view(("P", "v"), make) is first  # the same object while the item stands
    assert len(made) == 1
    table.put(("P", "v"), {"v": 2})  # a write through the table: made again from the new item
    assert table.view(("P", "v"), make) == {"v": 2} and len(made) == 2
    table.update(("P", "v"), set_attrs={"x": 1}, return_values="NONE")  # a write whose result is not cached
    assert table.view(("P", "v"), make) == {"v": 2} and len(made) == 3
    table.delete(("P", "v"))
    assert table.view(("P", "v"), make) is None
    table.put(("P", "v"), {"v": 3})
    assert table.view(("P", "v"), lambda rec: ("other", rec.data["v"])) == ("other", 3)  # another function: its own
    assert table.view(("P", "v"), make) == {"v": 3}


def test_a_view_ends_with_its_items_ttl(table: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from orbital.store.backends import dynamo as table_module

    now = time.time()
    table.put(("P", "t"), {"v": 1}, ttl=int(now) + 60)
    assert table.view(("P", "t"), lambda rec: rec.data["v"]) == 1
    monkeypatch.setattr(table_module.time, "time", lambda: now + 120)
    assert table.view(("P", "t"), lambda rec: rec.data["v"]) is None  # expired, as `get` says


def test_a_view_of_an_item_a_write_raced_is_made_but_not_kept(table: Any) -> None:
    table.put(("P", "r"), {"v": 1})
    table._items.clear()
    fetched, release = paused_after(table, "GetItem")
    seen: list[Any] = []
    reader = threading.Thread(target=lambda: seen.append(table.view(("P", "r"), lambda rec: rec.data["v"])))
    reader.start()
    assert fetched.wait(10)
    table.put(("P", "r"), {"v": 2})
    release.set()
    reader.join(10)
    assert seen == [2]  # the read that raced was not cached: the view read the item again, as it is now
    assert table.view(("P", "r"), lambda rec: rec.data["v"]) == 2


def test_without_the_cache_a_view_is_made_from_a_read_each_time(aws: None) -> None:
    import boto3
    from orbital.store.backends.dynamo import DynamoTable

    plain = DynamoTable(boto3.client("dynamodb", region_name="us-east-1"), TABLE)
    plain.put(("P", "n"), {"v": 1})
    made: list[int] = []
    for _ in range(2):
        assert plain.view(("P", "n"), lambda rec: made.append(rec.data["v"]) or len(made)) == len(made)
    assert made == [1, 1]
