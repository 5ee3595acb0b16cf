"""The table port's contract (`orbital.store.table`): the same tests against SQLite and DynamoDB (moto), each kind
given by the `table` fixture (see conftest.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from orbital.errors import ConflictError
from orbital.store import conditions as cond
from orbital.store.backends.dynamo import DynamoTable
from orbital.store.backends.sqlite import SqliteTable
from orbital.store.table import ConditionFailedError, Record, Table, Update


def soon() -> int:
    return int(time.time()) + 3600


def gone() -> int:
    return int(time.time()) - 100


# --- single items -----------------------------------------------------------------------------------------------


def test_an_item_reads_back_as_it_was_put(table: Any) -> None:
    data = {"text": "héllo 中文 😀", "n": 3, "nested": {"list": [1, 2.5, None, True]}, "empty": ""}
    attrs = {"st": "pending", "n": 7, "f": 1.5, "b": True, "z": None}
    ttl = soon()
    table.put(("P#1", "a"), data, ttl=ttl, gsi=("G#1", "x"), attrs=attrs)
    assert table.get(("P#1", "a")) == Record("P#1", "a", data, attrs, ttl)
    assert table.get(("P#1", "b")) is None
    assert table.get(("P#2", "a")) is None
    table.put(("P#1", "c"), {})
    assert table.get(("P#1", "c")) == Record("P#1", "c", {}, {}, None)


def test_a_put_replaces_the_whole_item(table: Any) -> None:
    table.put(("P", "a"), {"v": 1}, ttl=soon(), gsi=("G", "1"), attrs={"st": "x"})
    table.put(("P", "a"), {"v": 2})
    assert table.get(("P", "a")) == Record("P", "a", {"v": 2}, {}, None)
    assert table.query_index("G") == []


def test_a_put_returns_the_item_it_replaced(table: Any) -> None:
    assert table.put(("P", "a"), {"v": 1}, attrs={"n": 1}, return_old=True) is None
    old = table.put(("P", "a"), {"v": 2}, return_old=True)
    assert old == Record("P", "a", {"v": 1}, {"n": 1}, None)
    assert table.put(("P", "a"), {"v": 3}) is None  # without return_old: nothing
    table.put(("P", "e"), {"v": 1}, ttl=gone())
    assert table.put(("P", "e"), {"v": 2}, return_old=True) is None  # what it replaced had expired


def test_other_values_of_a_flat_attribute_are_stored_as_text(table: Any) -> None:
    table.put(("P", "a"), {}, attrs={"list": [1, 2]})
    assert table.get(("P", "a")).attrs == {"list": "[1, 2]"}


def test_expired_items_are_absent_to_every_read(table: Any) -> None:
    table.put(("P", "e"), {"v": 1}, ttl=gone(), gsi=("G", "e"))
    table.put(("P", "l"), {"v": 2}, ttl=soon(), gsi=("G", "l"))
    assert table.get(("P", "e")) is None
    assert table.view(("P", "e"), lambda rec: rec) is None
    assert list(table.get_many([("P", "e"), ("P", "l")])) == [("P", "l")]
    assert [r.sk for r in table.query("P")] == ["l"]
    assert table.count("P") == 1
    assert [r.sk for r in table.query_index("G")] == ["l"]


def test_get_many_returns_the_items_that_exist(table: Any) -> None:
    for n in range(130):  # more than one DynamoDB batch
        table.put(("M", f"{n:03d}"), {"n": n})
    wanted = [("M", f"{n:03d}") for n in range(0, 140, 2)] + [("M", "000"), ("X", "1")]
    found = table.get_many(wanted)
    assert sorted(found) == [("M", f"{n:03d}") for n in range(0, 130, 2)]
    assert found[("M", "010")] == Record("M", "010", {"n": 10})
    assert table.get_many([]) == {}


def test_a_view_is_made_from_the_item_as_it_is_now(table: Any) -> None:
    made: list[int] = []

    def make(rec: Record) -> dict[str, int]:
        made.append(rec.data["v"])
        return {"v": rec.data["v"]}

    assert table.view(("V", "a"), make) is None and made == []
    table.put(("V", "a"), {"v": 1})
    assert table.view(("V", "a"), make) == {"v": 1}
    table.put(("V", "a"), {"v": 2})
    assert table.view(("V", "a"), make) == {"v": 2}
    table.update(("V", "a"), set_attrs={"x": 1}, return_values="NONE")
    assert table.view(("V", "a"), lambda rec: (rec.data["v"], rec.attrs["x"])) == (2, 1)
    table.delete(("V", "a"))
    assert table.view(("V", "a"), make) is None


# --- queries --------------------------------------------------------------------------------------------------------


SKS = ["a", "a#1", "a#2", "ab", "b", "b#1", "~", "é", "中", "😀"]


def test_a_partition_reads_in_sort_key_order(table: Any) -> None:
    for sk in reversed(SKS):
        table.put(("Q", sk), {"sk": sk})
    table.put(("Q2", "a"), {})
    assert [r.sk for r in table.query("Q")] == SKS  # code-point order, DynamoDB's (UTF-8 bytes)
    assert [r.sk for r in table.query("Q", forward=False)] == SKS[::-1]
    assert [r.sk for r in table.query("Q", limit=3)] == SKS[:3]
    assert [r.sk for r in table.query("Q", forward=False, limit=2)] == ["😀", "中"]  # the last N
    assert [r.sk for r in table.query("Q", sk_prefix="a")] == ["a", "a#1", "a#2", "ab"]
    assert [r.sk for r in table.query("Q", sk_prefix="a#")] == ["a#1", "a#2"]
    assert [r.sk for r in table.query("Q", sk_prefix="a#", forward=False, limit=1)] == ["a#2"]
    assert [r.sk for r in table.query("Q", sk_prefix="中")] == ["中"]
    assert table.query("Q", sk_prefix="c") == []
    assert [r.sk for r in table.query("Q", sk_prefix="")] == SKS  # an empty prefix: everything
    assert table.query("Q", limit=0) == []
    assert table.query("none") == []
    assert table.count("Q") == len(SKS)
    assert table.count("Q", sk_prefix="b") == 2
    assert table.count("none") == 0
    assert table.query("Q", limit=1)[0] == Record("Q", "a", {"sk": "a"})


def test_a_partition_reads_a_sort_key_range(table: Any) -> None:
    for sk in reversed(SKS):
        table.put(("R", sk), {"sk": sk})
    table.put(("R", "a#9"), {}, ttl=gone())
    assert [r.sk for r in table.query("R", sk_between=("a#1", "ab"))] == ["a#1", "a#2", "ab"]  # both bounds in
    assert [r.sk for r in table.query("R", sk_between=("a#", "a#~"))] == ["a#1", "a#2"]  # the expired one left out
    assert [r.sk for r in table.query("R", sk_between=("a#1", "ab"), forward=False, limit=2)] == ["ab", "a#2"]
    assert [r.sk for r in table.query("R", sk_between=("a#1", "ab"), limit=1)] == ["a#1"]
    assert table.query("R", sk_between=("x", "y")) == []
    with pytest.raises(ValueError, match="the lower first"):
        table.query("R", sk_between=("b", "a"))
    with pytest.raises(ValueError, match="one of"):
        table.query("R", sk_prefix="a", sk_between=("a", "b"))


def test_a_limit_counts_only_live_items(table: Any) -> None:
    for n in range(6):
        table.put(("L", f"{n}"), {"n": n}, ttl=gone() if n in (1, 2, 5) else soon())
    assert [r.sk for r in table.query("L", limit=2)] == ["0", "3"]
    assert [r.sk for r in table.query("L", forward=False, limit=1)] == ["4"]
    assert table.count("L") == 3


def test_the_index_reads_in_index_sort_key_order(table: Any) -> None:
    due = {"0003#c": ("J", "c"), "0001#a": ("J", "a"), "0002#b": ("K", "b"), "0004#d": ("J", "d")}
    for gsk, key in due.items():
        table.put(key, {"gsk": gsk}, gsi=("DUE", gsk))
    table.put(("J", "x"), {})  # not in the index
    table.put(("J", "y"), {}, gsi=("OTHER", "0000"))
    assert [r.data["gsk"] for r in table.query_index("DUE")] == sorted(due)
    assert [(r.pk, r.sk) for r in table.query_index("DUE", limit=2)] == [("J", "a"), ("K", "b")]
    assert [r.sk for r in table.query_index("DUE", sk_max="0002#b")] == ["a", "b"]
    assert [r.sk for r in table.query_index("DUE", sk_max="0002")] == ["a"]
    assert [r.sk for r in table.query_index("DUE", sk_prefix="0003")] == ["c"]
    assert table.query_index("DUE", sk_max="0000") == []
    assert table.query_index("nothing") == []
    with pytest.raises(ValueError):
        table.query_index("DUE", sk_prefix="0", sk_max="1")


def test_an_update_can_take_an_item_out_of_the_index(table: Any) -> None:
    table.put(("C", "1"), {"v": 1}, gsi=("CALLS", "1"), attrs={"st": "pending"})
    table.put(("C", "2"), {"v": 2}, gsi=("CALLS", "2"), attrs={"st": "pending"})
    table.update(("C", "1"), set_attrs={"st": "done"}, unindex=True)
    assert [r.sk for r in table.query_index("CALLS")] == ["2"]
    assert table.get(("C", "1")) == Record("C", "1", {"v": 1}, {"st": "done"})


# --- updates and counters -------------------------------------------------------------------------------------------


def test_an_update_sets_attributes_and_adds_to_counters(table: Any) -> None:
    table.put(("U", "a"), {"keep": True}, attrs={"n": 5, "st": "x"}, gsi=("G", "a"))
    new = table.update(("U", "a"), set_attrs={"st": "y", "f": 2.5}, add={"n": -2, "m": 4})
    assert new == Record("U", "a", {"keep": True}, {"n": 3, "m": 4, "st": "y", "f": 2.5})
    assert table.get(("U", "a")) == new
    assert [r.sk for r in table.query_index("G")] == ["a"]  # still indexed


def test_an_update_returns_what_it_is_asked_for(table: Any) -> None:
    table.put(("U", "r"), {}, attrs={"n": 1})
    assert table.update(("U", "r"), add={"n": 1}, return_values="ALL_OLD") == Record("U", "r", {}, {"n": 1})
    assert table.update(("U", "r"), add={"n": 1}, return_values="NONE") is None
    assert table.update(("U", "r"), add={"n": 1}) == Record("U", "r", {}, {"n": 4})
    assert table.update(("U", "new"), add={"n": 1}, return_values="ALL_OLD") is None  # there was none
    with pytest.raises(ValueError):
        table.update(("U", "r"), add={"n": 1}, return_values="UPDATED_NEW")


def test_an_update_creates_a_missing_item(table: Any) -> None:
    ttl = soon()
    assert table.update(("U", "c"), set_attrs={"st": "x"}, ttl=ttl) == Record("U", "c", {}, {"st": "x"}, ttl)
    assert table.get(("U", "c")) == Record("U", "c", {}, {"st": "x"}, ttl)
    assert [r.sk for r in table.query("U")] == ["c"]


def test_an_update_sets_the_ttl(table: Any) -> None:
    table.put(("U", "t"), {"v": 1})
    later = soon()
    assert table.update(("U", "t"), set_attrs={"x": 1}, ttl=later).ttl == later
    assert table.update(("U", "t"), add={"n": 1}, ttl=gone()) is None  # expired by the update itself
    assert table.get(("U", "t")) is None


def test_counters_count_atomically(table: Any) -> None:
    assert table.next_counter(("COUNTER", "x")) == 1
    assert table.next_counter(("COUNTER", "x")) == 2
    assert table.next_counter(("COUNTER", "x"), 10) == 12
    assert table.next_counter(("COUNTER", "y")) == 1
    assert table.update(("COUNTER", "x"), add={"n": -12}).attrs == {"n": 0}


# --- deletes and batches ------------------------------------------------------------------------------------------


def test_a_delete_returns_the_item_it_deleted(table: Any) -> None:
    table.put(("D", "a"), {"v": 1}, attrs={"cid": "c1"})
    assert table.delete(("D", "missing")) is None
    assert table.delete(("D", "a"), return_old=True) == Record("D", "a", {"v": 1}, {"cid": "c1"})
    assert table.get(("D", "a")) is None
    assert table.delete(("D", "a"), return_old=True) is None


def test_a_batch_writes_and_deletes_many_items(table: Any) -> None:
    table.put(("B", "old"), {"v": 0}, attrs={"n": 1}, ttl=soon())
    for n in range(3):
        table.put(("B", f"gone{n}"), {})
    puts = [(("B", f"{n:02d}"), {"n": n}) for n in range(40)] + [(("B", "old"), {"v": 1})]
    table.write_batch(puts=puts, deletes=[("B", f"gone{n}") for n in range(3)] + [("B", "never")])
    assert table.count("B") == 41
    assert table.get(("B", "old")) == Record("B", "old", {"v": 1})  # replaced whole
    assert table.get(("B", "gone1")) is None
    table.write_batch(deletes=[("B", f"{n:02d}") for n in range(40)])
    assert [r.sk for r in table.query("B")] == ["old"]
    table.write_batch()
    with pytest.raises(ValueError):
        table.write_batch(puts=[(("B", "x"), {})], deletes=[("B", "x")])


# --- conditions -------------------------------------------------------------------------------------------------


def refused(table: Any, write: Any) -> bool:
    """True if the write raised ConflictError (and, checked by the callers, changed nothing)."""
    try:
        write()
    except ConflictError:
        return True
    return False


def test_item_existence_conditions(table: Any) -> None:
    key = ("K", "a")
    assert not refused(table, lambda: table.put(key, {"v": 1}, condition=cond.not_exists("PK")))
    assert refused(table, lambda: table.put(key, {"v": 2}, condition=cond.not_exists("PK")))
    assert table.get(key).data == {"v": 1}
    assert not refused(table, lambda: table.put(key, {"v": 3}, condition=cond.exists("PK")))
    assert refused(table, lambda: table.put(("K", "b"), {"v": 1}, condition=cond.exists("PK")))
    assert table.get(("K", "b")) is None
    assert refused(table, lambda: table.update(("K", "b"), add={"n": 1}, condition=cond.exists("PK")))
    assert table.get(("K", "b")) is None  # not created
    assert refused(table, lambda: table.delete(("K", "b"), condition=cond.exists("PK")))
    assert not refused(table, lambda: table.delete(key, condition=cond.exists("SK")))
    assert table.get(key) is None


def test_flat_attribute_existence_conditions(table: Any) -> None:
    key = ("K", "dl")
    table.put(key, {}, attrs={"other": 1})
    claim = cond.not_exists("dl") | cond.eq("dl", 0)
    assert not refused(table, lambda: table.update(key, set_attrs={"dl": 123}, condition=claim))
    assert refused(table, lambda: table.update(key, set_attrs={"dl": 456}, condition=claim))
    assert table.get(key).attrs["dl"] == 123
    table.update(key, set_attrs={"dl": 0})
    assert not refused(table, lambda: table.update(key, set_attrs={"dl": 789}, condition=claim))
    assert table.get(key).attrs["dl"] == 789
    assert not refused(table, lambda: table.update(key, set_attrs={"x": 1}, condition=cond.exists("other")))
    assert refused(table, lambda: table.update(key, set_attrs={"x": 2}, condition=cond.exists("missing")))
    table.put(key, {}, attrs={"nul": None})
    assert not refused(table, lambda: table.update(key, set_attrs={"x": 3}, condition=cond.exists("nul")))


def test_equality_conditions(table: Any) -> None:
    key = ("K", "eq")
    table.put(key, {}, attrs={"st": "pending", "v": 3, "f": 1.0})
    assert refused(table, lambda: table.update(key, set_attrs={"x": 1}, condition=cond.eq("st", "done")))
    assert refused(table, lambda: table.update(key, set_attrs={"x": 1}, condition=cond.eq("v", 4)))
    assert refused(table, lambda: table.update(key, set_attrs={"x": 1}, condition=cond.eq("v", "3")))  # a string
    assert refused(table, lambda: table.update(key, set_attrs={"x": 1}, condition=cond.eq("missing", "pending")))
    assert "x" not in table.get(key).attrs
    assert not refused(table, lambda: table.update(key, set_attrs={"x": 1}, condition=cond.eq("st", "pending")))
    assert not refused(table, lambda: table.update(key, set_attrs={"x": 2}, condition=cond.eq("v", 3.0)))
    assert not refused(table, lambda: table.update(key, set_attrs={"x": 3}, condition=cond.eq("f", 1)))
    assert not refused(table, lambda: table.put(key, {}, attrs={"v": 4}, condition=cond.eq("v", 3)))
    assert refused(table, lambda: table.delete(key, condition=cond.eq("v", 3)))
    assert not refused(table, lambda: table.delete(key, condition=cond.eq("v", 4)))


def test_ordering_conditions(table: Any) -> None:
    key = ("K", "ord")
    table.put(key, {}, attrs={"n": 5, "s": "m"})
    holds = {
        cond.lt("n", 6): True,
        cond.lt("n", 5): False,
        cond.le("n", 5): True,
        cond.le("n", 4.5): False,
        cond.gt("n", 4): True,
        cond.gt("n", 5): False,
        cond.lt("s", "n"): True,
        cond.lt("s", "m"): False,
        cond.le("s", "m"): True,
        cond.gt("s", "l"): True,
        cond.gt("s", "ma"): False,
        cond.lt("missing", 10): False,
        cond.le("missing", 10): False,
        cond.gt("missing", -10): False,
    }
    for condition, expected in holds.items():
        before = table.get(key)
        assert refused(table, lambda c=condition: table.update(key, add={"w": 1}, condition=c)) is not expected, (
            condition
        )
        if not expected:
            assert table.get(key) == before


def test_and_or_and_grouping(table: Any) -> None:
    key = ("K", "xfer")
    table.put(key, {}, attrs={"xs": "completing", "sc": "c1"})
    chunk = (cond.eq("xs", "streaming") | cond.eq("xs", "completing")) & cond.eq("sc", "c1")
    assert not refused(table, lambda: table.update(key, add={"b": 1}, condition=chunk))
    other = (cond.eq("xs", "streaming") | cond.eq("xs", "completing")) & cond.eq("sc", "c2")
    assert refused(table, lambda: table.update(key, add={"b": 1}, condition=other))
    # without the grouping it would read: streaming OR (completing AND sc = c2)
    ungrouped = cond.eq("xs", "streaming") | (cond.eq("xs", "completing") & cond.eq("sc", "c2"))
    assert refused(table, lambda: table.update(key, add={"b": 1}, condition=ungrouped))
    lease = cond.not_exists("PK") | cond.lt("lu", 100)
    assert not refused(table, lambda: table.put(("K", "seen"), {}, attrs={"lu": 50}, condition=lease))
    assert not refused(table, lambda: table.put(("K", "seen"), {}, attrs={"lu": 150}, condition=lease))
    assert refused(table, lambda: table.put(("K", "seen"), {}, attrs={"lu": 250}, condition=lease))
    assert table.get(("K", "seen")).attrs == {"lu": 150}
    group = cond.exists("PK") & cond.gt("n", 0)
    assert refused(table, lambda: table.update(("K", "group"), set_attrs={"tok": "t"}, condition=group))
    table.put(("K", "group"), {}, attrs={"n": 1})
    assert not refused(table, lambda: table.update(("K", "group"), set_attrs={"tok": "t"}, condition=group))
    assert table.get(key).attrs["b"] == 1


def test_a_condition_on_the_index_key(table: Any) -> None:
    key = ("CALL", "1")
    table.put(key, {}, attrs={"st": "pending", "ck": "tool"}, gsi=("NODE#a", "1"))
    mine = cond.eq("st", "pending") & cond.eq("ck", "tool") & cond.eq("GSI1PK", "NODE#a")
    theirs = cond.eq("st", "pending") & cond.eq("ck", "tool") & cond.eq("GSI1PK", "NODE#b")
    assert refused(table, lambda: table.update(key, set_attrs={"st": "done"}, condition=theirs, unindex=True))
    old = table.update(key, set_attrs={"st": "done"}, condition=mine, unindex=True, return_values="ALL_OLD")
    assert old == Record("CALL", "1", {}, {"st": "pending", "ck": "tool"})
    assert refused(table, lambda: table.update(key, set_attrs={"st": "x"}, condition=cond.exists("GSI1PK")))


def test_a_failed_condition_can_carry_the_item_as_it_stood(table: Any) -> None:
    key = ("USAGE", "2026-01")
    table.put(key, {"v": 1}, attrs={"m": 90})
    within = cond.not_exists("m") | cond.le("m", 100 - 20)
    with pytest.raises(ConditionFailedError) as failed:
        table.update(key, add={"m": 20}, condition=within, current_on_conflict=True)
    assert failed.value.current == Record("USAGE", "2026-01", {"v": 1}, {"m": 90})
    with pytest.raises(ConditionFailedError) as missing:
        table.update(("USAGE", "none"), add={"m": 1}, condition=cond.exists("PK"), current_on_conflict=True)
    assert missing.value.current is None
    with pytest.raises(ConflictError) as plain:
        table.update(key, add={"m": 20}, condition=within)
    assert not isinstance(plain.value, ConditionFailedError)
    smaller = cond.not_exists("m") | cond.le("m", 100 - 5)
    assert table.update(key, add={"m": 5}, condition=smaller, current_on_conflict=True).attrs["m"] == 95


def test_a_condition_sees_an_expired_item_until_it_is_deleted(table: Any) -> None:
    """DynamoDB deletes expired items lazily and its conditions see them meanwhile; so does the local table."""
    key = ("E", "a")
    table.put(key, {"v": 1}, ttl=gone(), attrs={"st": "x"})
    assert table.get(key) is None
    assert refused(table, lambda: table.put(key, {"v": 2}, condition=cond.not_exists("PK")))
    with pytest.raises(ConditionFailedError) as failed:
        table.update(key, add={"n": 1}, condition=cond.eq("st", "y"), current_on_conflict=True)
    assert failed.value.current is None  # as it stood: expired, so absent
    assert table.delete_expired(time.time()) == 1
    assert not refused(table, lambda: table.put(key, {"v": 3}, condition=cond.not_exists("PK")))


def skip_on_moto(table: Any) -> None:
    if type(table).__name__ == "DynamoTable":
        pytest.skip("DynamoDB's writes are atomic; plain moto does not serialize them")


def test_counters_from_many_threads_lose_nothing(table: Any) -> None:
    skip_on_moto(table)
    seen: list[int] = []

    def count() -> None:
        for _ in range(50):
            seen.append(table.next_counter(("COUNTER", "z")))

    threads = [threading.Thread(target=count) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(seen) == list(range(1, 201))  # every value handed out once
    assert table.get(("COUNTER", "z")).attrs["n"] == 200


def test_racing_claims_have_one_winner(table: Any) -> None:
    skip_on_moto(table)
    for i in range(40):
        key = ("RACE", str(i))
        table.put(key, {}, attrs={"st": "pending"})
        wins: list[int] = []
        start = threading.Barrier(4)

        def claim(n: int, key: tuple[str, str] = key, wins: list[int] = wins) -> None:
            start.wait()
            try:
                table.update(key, set_attrs={"st": "done", "by": n}, condition=cond.eq("st", "pending"))
                wins.append(n)
            except ConflictError:
                pass

        threads = [threading.Thread(target=claim, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert len(wins) == 1
        assert table.get(key).attrs["by"] == wins[0]


# --- expiry ---------------------------------------------------------------------------------------------------------


def test_expired_items_are_deleted_in_bulk(table: Any) -> None:
    for n in range(7):
        table.put(("X", f"{n}"), {}, ttl=gone() - n)
    table.put(("X", "live"), {}, ttl=soon())
    table.put(("X", "forever"), {})
    assert table.delete_expired(time.time(), limit=3) == 3
    assert table.delete_expired(time.time()) == 4
    assert table.delete_expired(time.time()) == 0
    assert [r.sk for r in table.query("X")] == ["forever", "live"]
    table.put(("X", "again"), {}, ttl=int(time.time()) + 50)
    assert table.delete_expired(time.time() + 100) == 1  # as of a later time: "again" has expired, "live" not
    assert [r.sk for r in table.query("X")] == ["forever", "live"]


# --- bad input ----------------------------------------------------------------------------------------------------


def test_bad_input_is_refused_before_anything_is_written(table: Any) -> None:
    for attrs in ({"PK": "x"}, {"ttl": 1}, {"d": "x"}, {"GSI1PK": "x"}):
        with pytest.raises(ValueError, match="reserved"):
            table.put(("BAD", "a"), {}, attrs=attrs)
    with pytest.raises(ValueError, match="reserved"):
        table.update(("BAD", "a"), set_attrs={"SK": "x"})
    with pytest.raises(ValueError):
        table.update(("BAD", "a"))  # nothing to do
    with pytest.raises(ValueError):
        table.update(("BAD", "a"), set_attrs={"n": 1}, add={"n": 1})
    with pytest.raises(ValueError):
        table.put(("", "a"), {})
    with pytest.raises(TypeError):
        table.put(("BAD", "a"), {}, condition="attribute_not_exists(PK)")
    with pytest.raises(TypeError):
        table.delete(("BAD", "a"), condition="attribute_exists(PK)")
    assert table.get(("BAD", "a")) is None


# --- the port is a template: it checks once, the backends only do ------------------------------------------------

PUBLIC = sorted(name for name in vars(Table) if not name.startswith("_"))


@pytest.mark.parametrize("backend", [DynamoTable, SqliteTable])
def test_a_backend_implements_the_hooks_not_the_public_methods(backend: type[Table]) -> None:
    assert {"get", "put", "update", "delete", "query", "write_batch"} <= set(PUBLIC)
    assert [name for name in PUBLIC if getattr(backend, name) is not getattr(Table, name)] == []
    assert backend.__abstractmethods__ == frozenset()


class Recording(Table):
    """A backend that records what the port hands it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def _record(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((name, args, kwargs))
        return None

    def _get(self, pk: str, sk: str) -> Record | None:
        return self._record("_get", pk, sk)

    def _get_many(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], Record]:
        self._record("_get_many", keys)
        return {}

    def _query(self, pk: str, **kwargs: Any) -> list[Record]:
        self._record("_query", pk, **kwargs)
        return []

    def _query_index(self, gsi_pk: str, **kwargs: Any) -> list[Record]:
        self._record("_query_index", gsi_pk, **kwargs)
        return []

    def _put(self, pk: str, sk: str, data: Any, **kwargs: Any) -> Record | None:
        return self._record("_put", pk, sk, data, **kwargs)

    def _update(self, pk: str, sk: str, change: Update, **kwargs: Any) -> Record | None:
        return self._record("_update", pk, sk, change, **kwargs)

    def _delete(self, pk: str, sk: str, **kwargs: Any) -> Record | None:
        return self._record("_delete", pk, sk, **kwargs)

    def _write_batch(self, puts: Any, deletes: Any) -> None:
        self._record("_write_batch", puts, deletes)

    def _delete_expired(self, now: float, limit: int | None) -> int:
        self._record("_delete_expired", now, limit)
        return 0


def test_the_port_hands_the_backend_checked_and_normalized_arguments() -> None:
    table = Recording()
    table.put(("P", "a"), {"v": 1}, ttl=12.7, gsi=("G", "1"), attrs={"st": "x", "obj": ("a",)})
    table.update(("P", "a"), set_attrs={"st": "y"}, add={"n": 2}, ttl=5)
    table.query("P", sk_prefix="")
    table.query_index("G", sk_max="9", limit=3)
    table.get_many([("P", "a"), ("P", "b"), ("P", "a")])
    table.write_batch()  # nothing to do: the backend is not asked
    table.count("P", sk_prefix="")
    assert table.calls == [
        (
            "_put",
            ("P", "a", {"v": 1}),
            {
                "ttl": 12,
                "gsi": ("G", "1"),
                "attrs": {"st": "x", "obj": "('a',)"},
                "condition": None,
                "return_old": False,
            },
        ),
        (
            "_update",
            ("P", "a", Update({"st": "y"}, {"n": 2}, 5, False)),
            {"condition": None, "return_values": "ALL_NEW", "current_on_conflict": False},
        ),
        ("_query", ("P",), {"sk_prefix": None, "sk_between": None, "forward": True, "limit": None}),
        ("_query_index", ("G",), {"sk_prefix": None, "sk_max": "9", "limit": 3}),
        ("_get_many", ([("P", "a"), ("P", "b")],), {}),
        ("_query", ("P",), {"sk_prefix": None, "sk_between": None, "forward": True, "limit": None}),
    ]


def test_the_port_refuses_bad_arguments_before_the_backend_sees_them() -> None:
    table = Recording()
    with pytest.raises(ValueError, match="reserved"):
        table.put(("P", "a"), {}, attrs={"PK": "x"})
    with pytest.raises(ValueError):
        table.put(("P", ""), {})
    with pytest.raises(TypeError):
        table.delete(("P", "a"), condition="attribute_exists(PK)")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        table.update(("P", "a"), return_values="SOME")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        table.query("P", sk_prefix="a", sk_between=("a", "b"))
    with pytest.raises(ValueError, match="twice"):
        table.write_batch(puts=[(("P", "a"), {})], deletes=[("P", "a")])
    assert table.calls == []
