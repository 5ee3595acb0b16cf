"""The table port on SQLite: the local gateway's items, one row each, in the data directory's database.

A row holds the key (`pk`, `sk`), the JSON payload (`d`; NULL for an item an `update` created), the flat attributes
as one JSON object (`a`; NULL for none), `ttl` and the index keys (`g1pk`, `g1sk`). The primary key orders a
partition by sort key (prefix and range queries, the last N with `ORDER BY sk DESC`); a partial index on
(`g1pk`, `g1sk`) holds the items that are in the secondary index, one on `ttl` those that expire.

Every write is one transaction of the `Database` (`orbital.store.backends.database`): the item as it stands is read, the
condition (`orbital.store.conditions`) evaluated against it in Python, and the new row written, all under the
database's write lock, so conditional writes are atomic (of two racing claims exactly one wins). A write returns
once it is on disk, except for items bound to the process (`keys.process_bound`: connections, registries of
connected clients, pending calls), which do not outlive it. Reads use the pool of read connections and see every
acknowledged write.

Rows read between two commits: a point read (`get`, `view`) keeps the stored row it found together with the
database's `state()` (the WAL index's header, which every commit of any process changes), and answers from it while
the state is the same: no SQL and no lock (two small system calls), until anything at all is committed. Nothing has
to be invalidated by a write: a commit changes the state, and every row kept before it is dropped at the next read.
A read inside a transaction of its own thread goes to that transaction (it sees its uncommitted writes) and keeps
nothing. Partition, index and count reads always run their query. `view` keeps what it made of an item with the
stored row it made it from, and hands it out again while a read finds the same row (ADR 0030).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from orbital.errors import ConflictError
from orbital.protocol.jsontext import compact, loads
from orbital.store import keys
from orbital.store.backends.database import Database
from orbital.store.conditions import MISSING, Condition
from orbital.store.table import ConditionFailedError, Record, ReturnValues, Table, Update

COMPONENT = "table"
SCHEMA_VERSION = 1
SCHEMA = (
    """CREATE TABLE IF NOT EXISTS items (
        pk TEXT NOT NULL,
        sk TEXT NOT NULL,
        d TEXT,
        a TEXT,
        ttl INTEGER,
        g1pk TEXT,
        g1sk TEXT,
        PRIMARY KEY (pk, sk)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS items_gsi1 ON items (g1pk, g1sk) WHERE g1pk IS NOT NULL AND g1sk IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS items_ttl ON items (ttl) WHERE ttl IS NOT NULL",
)

_json = compact(ensure_ascii=False)

_ROW = "SELECT d, a, ttl, g1pk, g1sk FROM items WHERE pk = ? AND sk = ?"
_GET = "SELECT d, a, ttl FROM items WHERE pk = ? AND sk = ?"
_PUT = "INSERT OR REPLACE INTO items (pk, sk, d, a, ttl, g1pk, g1sk) VALUES (?, ?, ?, ?, ?, ?, ?)"
_DELETE = "DELETE FROM items WHERE pk = ? AND sk = ?"
_LIVE = "(ttl IS NULL OR ttl >= ?)"

T = TypeVar("T")
VIEWS_KEPT = 4096
"""Items whose `view` is kept at most (then they are all dropped and made again as they are read)."""
ROWS_KEPT = 4096
"""Rows kept between two commits at most (then they are all dropped and read again)."""

Row = tuple[Any, ...]
"""(d, a, ttl, g1pk, g1sk) of a stored item."""


def prefix_end(prefix: str) -> str | None:
    """The least string greater than every string that starts with `prefix` (None: there is none), so that
    `prefix <= s < prefix_end(prefix)` is `s.startswith(prefix)` in code-point order, SQLite's for UTF-8 text."""
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        if last < 0x10FFFF:
            nxt = last + 1
            if 0xD800 <= nxt <= 0xDFFF:  # surrogates are no characters of UTF-8 text
                nxt = 0xE000
            return "".join(chars) + chr(nxt)
    return None


def _record(pk: str, sk: str, d: str | None, a: str | None, ttl: int | None, now: float) -> Record | None:
    if ttl is not None and ttl < now:
        return None
    return Record(pk=pk, sk=sk, data=loads(d) if d else {}, attrs=loads(a) if a else {}, ttl=ttl)


def _lookup(pk: str, sk: str, row: Row | None) -> Any:
    """An item's attributes by name, as a condition sees them (the stored item, expired or not)."""
    if row is None:
        return lambda _name: MISSING
    d, a, ttl, g1pk, g1sk = row
    attrs = loads(a) if a else {}
    columns = {"PK": pk, "SK": sk, "d": d, "ttl": ttl, "GSI1PK": g1pk, "GSI1SK": g1sk}

    def lookup(name: str) -> Any:
        if name in columns:
            value = columns[name]
            return MISSING if value is None else value
        return attrs.get(name, MISSING)

    return lookup


class SqliteTable(Table):
    """The items of the local gateway in `db` (its tables are created on first use). Thread-safe."""

    def __init__(self, db: Database) -> None:
        self.db = db
        db.schema(COMPONENT, SCHEMA_VERSION, SCHEMA)
        self._views: dict[tuple[str, str], tuple[Row, Callable[[Record], Any], Any]] = {}
        """What `view` made of an item: (the stored d, a and ttl it was made from, the function, what it made)."""
        self._kept: tuple[bytes | None, dict[tuple[str, str], Row | None]] = (None, {})
        """The database's state, and the rows (d, a, ttl; None for no item) read since it was that."""

    # --- reads ------------------------------------------------------------------------------------------------

    def _fetch(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        db = self.db
        conn = db.reader()
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            db.give_back(conn)

    def _row(self, pk: str, sk: str) -> Any:
        """The stored row of one item (expired or not), None when there is none: kept from an earlier read while
        nothing was committed since (see the module's docstring)."""
        db = self.db
        if db.in_transaction():
            return self._read_row(pk, sk)
        state = db.state()  # before the read: the row read is of this state or a later one
        if state is None:
            return self._read_row(pk, sk)
        kept_state, rows = self._kept
        if kept_state != state:
            rows = {}
            self._kept = (state, rows)
        else:
            try:
                return rows[(pk, sk)]
            except KeyError:
                pass
        row = self._read_row(pk, sk)
        # kept under `state` even if a commit came between: the state then differs from it at every later read
        if len(rows) >= ROWS_KEPT:
            rows.clear()
        rows[(pk, sk)] = row
        return row

    def _read_row(self, pk: str, sk: str) -> Any:
        db = self.db
        conn = db.reader()
        try:
            return conn.execute(_GET, (pk, sk)).fetchone()
        finally:
            db.give_back(conn)

    def _get(self, pk: str, sk: str) -> Record | None:
        row = self._row(pk, sk)
        if row is None:
            return None
        return _record(pk, sk, row[0], row[1], row[2], time.time())

    def _view(self, pk: str, sk: str, make: Callable[[Record], T]) -> T | None:
        """The same object again while the stored item is the same (callers share it and must not change it)."""
        key = (pk, sk)
        row = self._row(pk, sk)
        if row is None:
            self._views.pop(key, None)
            return None
        memo = self._views.get(key)
        if memo is not None and memo[1] == make and memo[0] == row:
            if row[2] is None or row[2] >= time.time():
                made: T = memo[2]
                return made
            return None
        rec = _record(pk, sk, row[0], row[1], row[2], time.time())
        if rec is None:
            return None
        made = make(rec)
        if len(self._views) >= VIEWS_KEPT:
            self._views.clear()
        self._views[key] = (row, make, made)
        return made

    def _get_many(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], Record]:
        found: dict[tuple[str, str], Record] = {}
        now = time.time()
        db = self.db
        conn = db.reader()
        try:
            for pk, sk in keys:
                row = conn.execute(_GET, (pk, sk)).fetchone()
                rec = _record(pk, sk, row[0], row[1], row[2], now) if row is not None else None
                if rec is not None:
                    found[(pk, sk)] = rec
        finally:
            db.give_back(conn)
        return found

    def _query(
        self, pk: str, *, sk_prefix: str | None, sk_between: tuple[str, str] | None, forward: bool, limit: int | None
    ) -> list[Record]:
        now = time.time()
        params: tuple[str, ...]
        if sk_between is not None:
            where, params = " AND sk BETWEEN ? AND ?", tuple(sk_between)
        else:
            where, params = self._range("sk", sk_prefix, None)
        sql = (
            f"SELECT sk, d, a, ttl FROM items WHERE pk = ?{where} AND {_LIVE}"
            f" ORDER BY sk {'ASC' if forward else 'DESC'} LIMIT ?"
        )
        rows = self._fetch(sql, (pk, *params, now, -1 if limit is None else limit))
        return [
            Record(pk=pk, sk=sk, data=loads(d) if d else {}, attrs=loads(a) if a else {}, ttl=ttl)
            for sk, d, a, ttl in rows
        ]

    @staticmethod
    def _range(column: str, prefix: str | None, maximum: str | None) -> tuple[str, tuple[str, ...]]:
        if prefix is not None:
            end = prefix_end(prefix)
            if end is None:
                return f" AND {column} >= ?", (prefix,)
            return f" AND {column} >= ? AND {column} < ?", (prefix, end)
        if maximum is not None:
            return f" AND {column} <= ?", (maximum,)
        return "", ()

    def _query_index(
        self, gsi_pk: str, *, sk_prefix: str | None, sk_max: str | None, limit: int | None
    ) -> list[Record]:
        now = time.time()
        where, params = self._range("g1sk", sk_prefix, sk_max)
        sql = (
            f"SELECT pk, sk, d, a, ttl FROM items WHERE g1pk = ? AND g1sk IS NOT NULL{where} AND {_LIVE}"
            " ORDER BY g1sk, pk, sk LIMIT ?"
        )
        rows = self._fetch(sql, (gsi_pk, *params, now, -1 if limit is None else limit))
        return [
            Record(pk=pk, sk=sk, data=loads(d) if d else {}, attrs=loads(a) if a else {}, ttl=ttl)
            for pk, sk, d, a, ttl in rows
        ]

    def _count(self, pk: str, sk_prefix: str | None) -> int:
        where, params = self._range("sk", sk_prefix, None)
        rows = self._fetch(f"SELECT count(*) FROM items WHERE pk = ?{where} AND {_LIVE}", (pk, *params, time.time()))
        return int(rows[0][0])

    # --- writes -----------------------------------------------------------------------------------------------

    def _durable(self, pk: str, sk: str) -> bool:
        return not keys.process_bound(pk, sk)

    @staticmethod
    def _old(conn: sqlite3.Connection, pk: str, sk: str) -> Row | None:
        row: Row | None = conn.execute(_ROW, (pk, sk)).fetchone()
        return row

    @staticmethod
    def _decode_row(pk: str, sk: str, row: Row | None) -> Record | None:
        if row is None:
            return None
        return _record(pk, sk, row[0], row[1], row[2], time.time())

    def _put(
        self,
        pk: str,
        sk: str,
        data: Mapping[str, Any],
        *,
        ttl: int | None,
        gsi: tuple[str, str] | None,
        attrs: dict[str, Any],
        condition: Condition | None,
        return_old: bool,
    ) -> Record | None:
        values = (
            pk,
            sk,
            _json(data),
            _json(attrs) if attrs else None,
            ttl,
            gsi[0] if gsi else None,
            gsi[1] if gsi else None,
        )
        old: Row | None = None
        with self.db.transaction(durable=self._durable(pk, sk)) as conn:
            if condition is not None or return_old:
                old = self._old(conn, pk, sk)
                if condition is not None and not condition.holds(_lookup(pk, sk, old)):
                    raise ConflictError(f"write conflict on {pk}/{sk}")
            conn.execute(_PUT, values)
        return self._decode_row(pk, sk, old) if return_old else None

    def _update(
        self,
        pk: str,
        sk: str,
        change: Update,
        *,
        condition: Condition | None,
        return_values: ReturnValues,
        current_on_conflict: bool,
    ) -> Record | None:
        with self.db.transaction(durable=self._durable(pk, sk)) as conn:
            old = self._old(conn, pk, sk)
            if condition is not None and not condition.holds(_lookup(pk, sk, old)):
                if current_on_conflict:
                    raise ConditionFailedError(f"update conflict on {pk}/{sk}", self._decode_row(pk, sk, old))
                raise ConflictError(f"update conflict on {pk}/{sk}")
            d, a, stored_ttl, g1pk, g1sk = old if old is not None else (None, None, None, None, None)
            flat: dict[str, Any] = loads(a) if a else {}
            flat.update(change.assigns)
            for name, amount in change.adds.items():
                current = flat.get(name, 0)
                if isinstance(current, bool) or not isinstance(current, int | float):
                    raise ValueError(f"cannot add to {name} of {pk}/{sk}: it is not a number")
                flat[name] = current + amount
            if change.ttl is not None:
                stored_ttl = change.ttl
            if change.unindex:
                g1pk = g1sk = None
            new_a = _json(flat) if flat else None
            conn.execute(_PUT, (pk, sk, d, new_a, stored_ttl, g1pk, g1sk))
        if return_values == "ALL_NEW":
            return _record(pk, sk, d, new_a, stored_ttl, time.time())
        if return_values == "ALL_OLD":
            return self._decode_row(pk, sk, old)
        return None

    def _delete(self, pk: str, sk: str, *, condition: Condition | None, return_old: bool) -> Record | None:
        old: Row | None = None
        with self.db.transaction(durable=self._durable(pk, sk)) as conn:
            if condition is not None or return_old:
                old = self._old(conn, pk, sk)
                if condition is not None and not condition.holds(_lookup(pk, sk, old)):
                    raise ConflictError(f"delete conflict on {pk}/{sk}")
            conn.execute(_DELETE, (pk, sk))
        return self._decode_row(pk, sk, old) if return_old else None

    def _write_batch(
        self, put_list: list[tuple[tuple[str, str], Mapping[str, Any]]], delete_list: list[tuple[str, str]]
    ) -> None:
        rows = [(pk, sk, _json(data), None, None, None, None) for (pk, sk), data in put_list]
        durable = any(self._durable(pk, sk) for pk, sk in [k for k, _ in put_list] + delete_list)
        with self.db.transaction(durable=durable) as conn:
            if rows:
                conn.executemany(_PUT, rows)
            if delete_list:
                conn.executemany(_DELETE, delete_list)

    def _delete_expired(self, now: float, limit: int | None) -> int:
        """One transaction; not waited for (an expired item that came back after a crash is still expired)."""
        with self.db.transaction(durable=False) as conn:
            cur = conn.execute(
                "DELETE FROM items WHERE (pk, sk) IN"
                " (SELECT pk, sk FROM items WHERE ttl IS NOT NULL AND ttl < ? ORDER BY ttl LIMIT ?)",
                (now, -1 if limit is None else limit),
            )
            return int(cur.rowcount)

    # --- whole items, as DynamoDB JSON (moving state in and out: `orbital.local.upgrade`, export and import) ----

    def scan_items(self) -> Iterator[dict[str, Any]]:
        """Every stored item (expired ones too) as DynamoDB JSON, in key order."""
        after: tuple[str, str] = ("", "")
        while True:
            rows = self._fetch(
                "SELECT pk, sk, d, a, ttl, g1pk, g1sk FROM items WHERE (pk, sk) > (?, ?) ORDER BY pk, sk LIMIT 500",
                after,
            )
            for row in rows:
                yield _item_json(*row)
            if len(rows) < 500:
                return
            after = (rows[-1][0], rows[-1][1])

    def get_items(self, wanted: Iterable[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
        """The stored items (expired ones too) of `wanted` as DynamoDB JSON, by key."""
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for pk, sk in wanted:
            rows = self._fetch("SELECT pk, sk, d, a, ttl, g1pk, g1sk FROM items WHERE pk = ? AND sk = ?", (pk, sk))
            if rows:
                found[(pk, sk)] = _item_json(*rows[0])
        return found

    def put_items(self, items: Iterable[Mapping[str, Any]], *, unless_smaller: str | None = None) -> int:
        """Store whole items given as DynamoDB JSON, in one transaction. With `unless_smaller` (an attribute), an item
        whose stored copy holds a number at least as large there is kept instead. Returns how many were written."""
        rows = [_item_row(item) for item in items]
        written = 0
        with self.db.transaction() as conn:
            for row in rows:
                if unless_smaller is not None:
                    old = self._old(conn, row[0], row[1])
                    stored = loads(old[1]).get(unless_smaller) if old is not None and old[1] else None
                    new = loads(row[3]).get(unless_smaller) if row[3] else None
                    if isinstance(stored, int | float) and isinstance(new, int | float) and stored >= new:
                        continue
                conn.execute(_PUT, row)
                written += 1
        return written


_COLUMNS = {"PK", "SK", "d", "ttl", "GSI1PK", "GSI1SK"}


def _attr_json(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, int | float):
        return {"N": str(value)}
    if value is None:
        return {"NULL": True}
    return {"S": str(value)}


def _item_json(
    pk: str, sk: str, d: str | None, a: str | None, ttl: int | None, g1pk: str | None, g1sk: str | None
) -> dict[str, Any]:
    item: dict[str, Any] = {"PK": {"S": pk}, "SK": {"S": sk}}
    if d is not None:
        item["d"] = {"S": d}
    if ttl is not None:
        item["ttl"] = {"N": str(ttl)}
    if g1pk is not None and g1sk is not None:
        item["GSI1PK"] = {"S": g1pk}
        item["GSI1SK"] = {"S": g1sk}
    for name, value in (loads(a) if a else {}).items():
        item[name] = _attr_json(value)
    return item


def _attr_value(attr: Mapping[str, Any]) -> Any:
    if "S" in attr:
        return str(attr["S"])
    if "N" in attr:
        text = str(attr["N"])
        try:
            return int(text)
        except ValueError:
            return float(text)
    if "BOOL" in attr:
        return bool(attr["BOOL"])
    if "NULL" in attr:
        return None
    raise ValueError(f"an attribute of a type the table does not keep: {sorted(attr)}")


def _item_row(item: Mapping[str, Any]) -> tuple[Any, ...]:
    """The row of an item given as DynamoDB JSON (as `DynamoTable` writes them)."""
    try:
        pk, sk = str(item["PK"]["S"]), str(item["SK"]["S"])
    except (KeyError, TypeError):
        raise ValueError("an item without a string PK and SK") from None
    d = item.get("d")
    ttl = item.get("ttl")
    flat = {name: _attr_value(value) for name, value in item.items() if name not in _COLUMNS}
    g1pk, g1sk = item.get("GSI1PK"), item.get("GSI1SK")
    return (
        pk,
        sk,
        str(d["S"]) if d is not None else None,
        _json(flat) if flat else None,
        int(float(ttl["N"])) if ttl is not None else None,
        str(g1pk["S"]) if g1pk is not None and g1sk is not None else None,
        str(g1sk["S"]) if g1pk is not None and g1sk is not None else None,
    )
