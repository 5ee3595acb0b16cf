"""Point reads of the SQLite table between two commits (orbital/store/backends/sqlite.py, `Database.state`): a row read
once is answered again without SQL until anything is committed, and every commit is seen by the next read, whoever
made it (this thread, another one, another connection, another process) and whatever it did (put, update, delete,
a rollback that committed nothing)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.store.backends import sqlite as sqlite_table
from orbital.store.backends.database import Database
from orbital.store.backends.sqlite import SqliteTable

from tests.conftest import ROOT


class Statements:
    """The SELECTs the database's connections run (SQLite's trace callback on every connection it opens)."""

    def __init__(self) -> None:
        self.selects: list[str] = []
        self._lock = threading.Lock()

    def trace(self, sql: str) -> None:
        if sql.lstrip().upper().startswith("SELECT"):
            with self._lock:
                self.selects.append(sql)


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Statements:
    seen = Statements()
    connect = Database._connect

    def traced(self: Database) -> sqlite3.Connection:
        conn = connect(self)
        conn.set_trace_callback(seen.trace)
        return conn

    monkeypatch.setattr(Database, "_connect", traced)
    return seen


@pytest.fixture
def db(tmp_path: Path, statements: Statements) -> Iterator[Database]:
    with Database(tmp_path / "orbital.db") as opened:
        yield opened


def test_a_point_read_repeated_with_no_commit_between_runs_no_statement(db: Database, statements: Statements) -> None:
    table = SqliteTable(db)
    table.put(("CONN#a", "META"), {"mode": "client"})
    before = len(statements.selects)
    for _ in range(20):
        rec = table.get(("CONN#a", "META"))
        assert rec is not None and rec.data == {"mode": "client"}
        assert table.get(("CONFIG", "OVERRIDES")) is None  # an item that is not there is kept as such too
        assert table.view(("CONN#a", "META"), lambda r: r.data["mode"]) == "client"
    assert len(statements.selects) - before == 2  # one read of each item; none after


def test_each_read_after_a_commit_reads_again_and_sees_it(db: Database, statements: Statements) -> None:
    table = SqliteTable(db)
    key = ("S", "x")
    assert table.get(key) is None
    table.put(key, {"n": 1})
    assert table.get(key).data == {"n": 1}
    table.update(key, set_attrs={"a": 2})
    assert table.get(key).attrs == {"a": 2}
    assert table.view(key, lambda r: r.attrs["a"]) == 2
    table.delete(key)
    assert table.get(key) is None
    assert table.view(key, lambda r: r) is None
    table.put(("S", "other"), {})  # a commit of another item: the kept row is read again, and is the same
    before = len(statements.selects)
    assert table.get(key) is None
    assert len(statements.selects) == before + 1


def test_a_commit_of_another_thread_is_seen_by_the_next_read(db: Database) -> None:
    table = SqliteTable(db)
    key = ("T", "x")
    table.put(key, {"n": 0})
    assert table.get(key).data == {"n": 0}
    for n in range(1, 30):
        writer = threading.Thread(target=table.put, args=(key, {"n": n}))
        writer.start()
        writer.join(30)
        assert table.get(key).data == {"n": n}


def test_a_commit_of_another_connection_in_this_process_is_seen(db: Database, tmp_path: Path) -> None:
    table = SqliteTable(db)
    key = ("CONFIG", "OVERRIDES")
    assert table.get(key) is None
    with Database(tmp_path / "orbital.db") as beside:  # a tool opened beside the gateway
        SqliteTable(beside).put(key, {"model": "beside"})
        assert table.get(key).data == {"model": "beside"}
        SqliteTable(beside).delete(key)
    assert table.get(key) is None


WRITER = textwrap.dedent(
    """
    import sys
    from orbital.store.backends.database import Database
    from orbital.store.backends.sqlite import SqliteTable

    with Database(sys.argv[1]) as db:
        table = SqliteTable(db)
        for line in sys.stdin:
            table.put(("P", "x"), {"n": int(line)})
            print("written", flush=True)
    """
)


def test_a_commit_of_another_process_is_seen_by_the_next_read(db: Database) -> None:
    table = SqliteTable(db)
    key = ("P", "x")
    assert table.get(key) is None
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "layers" / "orbital"), str(ROOT)])}
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        for n in range(5):
            child.stdin.write(f"{n}\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "written"  # acknowledged there
            assert table.get(key).data == {"n": n}
            assert table.get(key).data == {"n": n}
    finally:
        child.stdin.close()
        assert child.wait(timeout=60) == 0


def test_a_read_inside_a_transaction_sees_its_writes_and_keeps_nothing_of_them(db: Database) -> None:
    table = SqliteTable(db)
    key = ("X", "x")
    table.put(key, {"n": 1})
    assert table.get(key).data == {"n": 1}
    with pytest.raises(RuntimeError, match="rolled back"), db.transaction():
        table.put(key, {"n": 2})
        assert table.get(key).data == {"n": 2}  # the transaction's own write, not yet committed
        raise RuntimeError("rolled back")
    assert table.get(key).data == {"n": 1}


def test_a_kept_row_still_expires_with_its_ttl(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    table = SqliteTable(db)
    now = 1_900_000_000.0
    monkeypatch.setattr(sqlite_table.time, "time", lambda: now)
    table.put(("E", "x"), {"v": 1}, ttl=int(now) + 10)
    assert table.get(("E", "x")) is not None
    assert table.view(("E", "x"), lambda r: r.data["v"]) == 1
    now += 20  # no commit: the kept row is the answer, and it has expired
    assert table.get(("E", "x")) is None
    assert table.view(("E", "x"), lambda r: r.data["v"]) is None


def test_the_state_changes_with_every_commit_and_only_then(db: Database, tmp_path: Path) -> None:
    table = SqliteTable(db)
    first = db.state()
    assert first is not None
    table.put(("ST", "a"), {})
    second = db.state()
    assert second != first
    table.get(("ST", "a"))
    list(table.query("ST"))
    assert db.state() == second  # reads commit nothing
    table.put(("CONN#s", "META"), {})  # a commit that does not wait for the disk changes it as well
    third = db.state()
    assert third not in (first, second)
    with Database(tmp_path / "orbital.db") as beside:
        assert beside.state() == db.state()
        SqliteTable(beside).put(("ST", "c"), {})
        assert db.state() == beside.state() != third


def test_a_closed_database_tells_no_state(tmp_path: Path) -> None:
    db = Database(tmp_path / "closed.db")
    assert db.state() is not None
    db.close()
    assert db.state() is None


def test_a_removed_or_replaced_wal_index_tells_no_state(tmp_path: Path) -> None:
    """A `-shm` file removed under the gateway (or replaced by another file at its path) is no longer the one every
    commit writes: the state cannot be told, and readers keep nothing rather than trust a header that never moves."""
    db = Database(tmp_path / "moved.db")
    try:
        assert db.state() is not None
        shm = tmp_path / "moved.db-shm"
        shm.rename(tmp_path / "elsewhere")
        shm.write_bytes(bytes(32768))
        assert db.state() is not None  # still linked, under another name
        (tmp_path / "elsewhere").unlink()
        assert db.state() is None
    finally:
        db.close()


def test_a_read_does_not_wait_for_a_writer_holding_the_lock(db: Database) -> None:
    table = SqliteTable(db)
    table.put(("W", "x"), {"n": 1})
    holding, release = threading.Event(), threading.Event()

    def write() -> None:
        with db.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO items (pk, sk, d) VALUES ('W', 'y', '{}')")
            holding.set()
            release.wait(60)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert holding.wait(30)
        seen: list[Any] = []
        reader = threading.Thread(target=lambda: seen.append(table.get(("W", "x"))))
        reader.start()
        reader.join(30)
        assert not reader.is_alive() and seen[0].data == {"n": 1}  # answered while the write lock is held
        assert table.get(("W", "y")) is None  # nothing uncommitted is seen
    finally:
        release.set()
        writer.join(30)
    assert table.get(("W", "y")) is not None
