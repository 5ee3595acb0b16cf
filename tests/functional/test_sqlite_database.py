"""The local SQLite database (orbital/store/backends/database.py) and its table: acknowledged means on disk, a crash
keeps what was acknowledged, transactions nest, other components share the file and its transactions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from orbital.errors import ConflictError
from orbital.store import conditions as cond
from orbital.store import keys
from orbital.store.backends.database import Database, DatabaseError
from orbital.store.backends.sqlite import SqliteTable

from tests.conftest import ROOT


@pytest.fixture
def db(tmp_path: Path) -> Any:
    with Database(tmp_path / "orbital.db") as opened:
        yield opened


def test_a_write_returns_once_its_commit_is_synced(db: Database) -> None:
    table = SqliteTable(db)
    for n in range(5):
        table.put(("S", f"{n}"), {"n": n})
        assert db.synced == db.committed  # this write's commit (the last one) is on disk
    before = db.syncs
    table.update(("S", "0"), add={"n": 1})
    assert db.synced == db.committed and db.syncs == before + 1


def test_items_bound_to_the_process_do_not_wait_for_the_disk(db: Database) -> None:
    table = SqliteTable(db)
    table.put(("S", "durable"), {})
    synced = db.synced
    assert keys.process_bound(*keys.connection("c1"))
    table.put(keys.connection("c1"), {"connectionId": "c1"})
    table.update(keys.client("me"), set_attrs={"cid": "c1"})
    table.write_batch(puts=[(keys.node("n1"), {})])
    assert db.committed == synced + 3 and db.synced == synced  # committed, not waited for
    table.write_batch(puts=[(keys.node("n2"), {}), (("S", "other"), {})])  # one durable item: the batch waits
    assert db.synced == db.committed
    table.put(keys.connection("c2"), {})
    table.put(("S", "later"), {})  # a later durable write's sync covers the earlier commits too
    assert db.synced == db.committed


def test_many_writers_share_syncs_and_lose_nothing(db: Database) -> None:
    table = SqliteTable(db)
    errors: list[BaseException] = []

    def write(index: int) -> None:
        try:
            for n in range(25):
                table.put((f"W#{index}", f"{n}"), {"n": n}, condition=cond.not_exists("PK"))
                table.next_counter(("W", "count"))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert db.synced == db.committed
    assert all(table.count(f"W#{i}") == 25 for i in range(8))
    assert table.get(("W", "count")).attrs["n"] == 200


def test_transactions_nest_as_savepoints(db: Database) -> None:
    table = SqliteTable(db)
    db.schema("objects", 1, ["CREATE TABLE objects (key TEXT PRIMARY KEY, size INTEGER NOT NULL)"])
    committed = db.committed
    with db.transaction() as conn:  # a component's row and a table item in one commit
        conn.execute("INSERT INTO objects VALUES ('a.md', 3)")
        table.put(("OBJ", "a.md"), {"size": 3})
        with db.reading() as reader:  # inside the transaction: its own connection, which sees its writes
            assert reader is conn
            assert reader.execute("SELECT size FROM objects WHERE key = 'a.md'").fetchone() == (3,)
        assert table.get(("OBJ", "a.md")).data == {"size": 3}
        with pytest.raises(ConflictError):  # a refused write inside leaves the rest of the transaction alone
            table.put(("OBJ", "a.md"), {}, condition=cond.not_exists("PK"))
    assert db.committed == committed + 1 and db.synced == db.committed
    with pytest.raises(RuntimeError), db.transaction() as conn:  # one that fails writes nothing at all
        conn.execute("INSERT INTO objects VALUES ('b.md', 4)")
        table.put(("OBJ", "b.md"), {"size": 4})
        raise RuntimeError("the component failed")
    assert table.get(("OBJ", "b.md")) is None
    with db.reading() as reader:
        assert reader.execute("SELECT key FROM objects").fetchall() == [("a.md",)]


def test_a_component_schema_is_created_once_and_a_newer_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "orbital.db"
    with Database(path) as db:
        assert db.schema("index", 1, ["CREATE TABLE idx (k TEXT)"]) == 0
        assert db.schema("index", 1, ["CREATE TABLE idx (k TEXT)"]) == 1  # not run again
        with db.transaction() as conn:
            conn.execute("UPDATE orbital_schema SET version = 7 WHERE component = 'index'")
    with Database(path) as db, pytest.raises(DatabaseError, match="newer"):
        db.schema("index", 1, [])


def test_a_closed_database_refuses_work(tmp_path: Path) -> None:
    db = Database(tmp_path / "orbital.db")
    table = SqliteTable(db)
    table.put(("C", "a"), {})
    db.close()
    db.close()  # twice is fine
    with pytest.raises(DatabaseError, match="closed"):
        table.put(("C", "b"), {})
    with pytest.raises(DatabaseError, match="closed"):
        table.get(("C", "a"))


def test_reads_run_while_another_thread_writes(db: Database) -> None:
    table = SqliteTable(db)
    table.put(("R", "x"), {"n": 0})
    stop = threading.Event()
    seen: list[list[int]] = [[], [], []]
    errors: list[BaseException] = []

    def read(mine: list[int]) -> None:
        try:
            while not stop.is_set():
                rec = table.get(("R", "x"))
                assert rec is not None
                mine.append(rec.data["n"])
        except BaseException as exc:
            errors.append(exc)

    readers = [threading.Thread(target=read, args=(mine,)) for mine in seen]
    for reader in readers:
        reader.start()
    for n in range(1, 60):
        table.put(("R", "x"), {"n": n})
    stop.set()
    for reader in readers:
        reader.join(30)
    assert errors == [] and all(seen)
    assert all(mine == sorted(mine) for mine in seen)  # each reader sees the commits in order, never an older one
    assert table.get(("R", "x")).data == {"n": 59}


CHILD = textwrap.dedent(
    """
    import os, sys
    from orbital.store.backends.database import Database
    from orbital.store.backends.sqlite import SqliteTable

    path, mode = sys.argv[1], sys.argv[2]
    db = Database(path, checkpoint_interval_s=None)  # the WAL only grows here (fewer commits than a checkpoint's)
    table = SqliteTable(db)
    wal = path + "-wal"
    n = 0
    while True:
        table.put(("ACK", f"{n:06d}"), {"n": n})
        print(n, os.path.getsize(wal), flush=True)
        n += 1
        if mode == "last" and n == 40:  # one more write, whose frames the test tears; then wait to be killed
            table.put(("ACK", "torn"), {})
            print("torn", os.path.getsize(wal), flush=True)
            sys.stdin.read()
    """
)


def _child(path: Path, mode: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "layers" / "orbital"), str(ROOT)])}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_an_acknowledged_write_survives_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "orbital.db"
    child = _child(path, "stream")
    acknowledged = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            acknowledged.append(int(line.split()[0]))
            if len(acknowledged) == 30:
                child.send_signal(signal.SIGKILL)  # right after an acknowledged write, with the next under way
                break
    finally:
        child.kill()
        child.wait(30)
    assert child.returncode == -signal.SIGKILL
    assert (tmp_path / "orbital.db-wal").exists()  # nothing was checkpointed at a close: the WAL is recovered
    with Database(path) as db:
        stored = {int(r.sk) for r in SqliteTable(db).query("ACK")}
    assert set(acknowledged) <= stored
    assert stored == set(range(len(stored)))  # whatever came after is whole, in order


def test_a_torn_write_loses_only_the_unacknowledged_tail(tmp_path: Path) -> None:
    path = tmp_path / "orbital.db"
    child = _child(path, "last")
    sizes: dict[str, int] = {}
    try:
        assert child.stdout is not None
        for line in child.stdout:
            label, size = line.split()
            sizes[label] = int(size)
            if label == "torn":
                break
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait(30)
    acknowledged, torn = sizes["39"], sizes["torn"]
    assert torn > acknowledged
    with open(f"{path}-wal", "r+b") as wal:  # the crash cut the last write's frames short
        wal.truncate(acknowledged + (torn - acknowledged) // 2)
    with Database(path) as db:
        table = SqliteTable(db)
        assert [int(r.sk) for r in table.query("ACK", limit=40)] == list(range(40))
        assert table.get(("ACK", "torn")) is None
        with db.reading() as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "orbital.db"
    path.write_bytes(b"not a database at all, " * 100)
    with pytest.raises(DatabaseError, match="cannot open"):
        Database(path)
