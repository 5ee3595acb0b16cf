"""Random sequences of table operations applied to every implementation of the port: each operation has the same
result everywhere (the same records, or the same error with the same item), and so has the final state.

Operations work on a few keys, attributes and index partitions so that conditions, counters, expiry and the index
meet often. Values keep one type per attribute (`st` a string, `n` a number, `f` anything, only tested for
existence): moto raises on comparisons across types, where DynamoDB says false (`tests/unit/test_conditions.py`
checks our evaluation of those against DynamoDB's documented rules).

The number of sequences comes from `ORBITAL_FUZZ_TABLE` (default 10, some seconds); they derive from a fixed seed,
so a run is repeatable.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from orbital.errors import ConflictError
from orbital.store import conditions as cond
from orbital.store.table import ConditionFailedError, Record

from tests.contract.conftest import KINDS, open_table, plain_moto

SEQUENCES = int(os.environ.get("ORBITAL_FUZZ_TABLE", "10"))
FUZZ = settings(
    max_examples=SEQUENCES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

PKS = ["P0", "P1"]
SKS = ["a", "a#1", "é"]
GSIS = ["G0", "G1"]

keys = st.tuples(st.sampled_from(PKS), st.sampled_from(SKS))
st_values = st.sampled_from(["pending", "done"])
n_values = st.integers(min_value=-1, max_value=3)
f_values = st.sampled_from([True, None, "x", 2])
attrs = st.fixed_dictionaries({}, optional={"st": st_values, "n": n_values, "f": f_values})
ttls = st.sampled_from([None, None, "past", "future"])
gsis = st.none() | st.tuples(st.sampled_from(GSIS), st.sampled_from(["1", "2", "3"]))

leaves = st.one_of(
    st.builds(cond.exists, st.sampled_from(["PK", "st", "n", "f", "GSI1PK"])),
    st.builds(cond.not_exists, st.sampled_from(["PK", "st", "n", "f", "GSI1PK"])),
    st.builds(cond.eq, st.just("st"), st_values),
    st.builds(cond.eq, st.just("n"), n_values),
    st.builds(cond.lt, st.just("n"), n_values),
    st.builds(cond.le, st.just("n"), n_values),
    st.builds(cond.gt, st.just("n"), n_values),
    st.builds(cond.gt, st.just("st"), st_values),
    st.builds(cond.eq, st.just("GSI1PK"), st.sampled_from(GSIS)),
)
conditions = st.none() | st.recursive(
    leaves,
    lambda inner: st.builds(lambda a, b: a & b, inner, inner) | st.builds(lambda a, b: a | b, inner, inner),
    max_leaves=4,
)

operations = st.one_of(
    st.tuples(
        st.just("put"),
        st.fixed_dictionaries(
            {
                "key": keys,
                "data": st.fixed_dictionaries({"v": st.integers(0, 9)}),
                "ttl": ttls,
                "gsi": gsis,
                "attrs": attrs,
                "condition": conditions,
                "return_old": st.booleans(),
            }
        ),
    ),
    st.tuples(
        st.just("update"),
        st.fixed_dictionaries(
            {
                "key": keys,
                "set_attrs": st.fixed_dictionaries({}, optional={"st": st_values, "f": f_values}),
                "add": st.fixed_dictionaries({}, optional={"n": n_values, "m": n_values}),
                "ttl": ttls,
                "unindex": st.booleans(),
                "condition": conditions,
                "return_values": st.sampled_from(["ALL_NEW", "ALL_OLD", "NONE"]),
                "current_on_conflict": st.booleans(),
            }
        ),
    ),
    st.tuples(
        st.just("delete"),
        st.fixed_dictionaries({"key": keys, "condition": conditions, "return_old": st.booleans()}),
    ),
    st.tuples(
        st.just("write_batch"),
        st.fixed_dictionaries(
            {
                "puts": st.lists(keys, max_size=3, unique=True),
                "deletes": st.lists(keys, max_size=3, unique=True),
            }
        ),
    ),
    st.tuples(st.just("get"), st.fixed_dictionaries({"key": keys})),
    st.tuples(st.just("get_many"), st.fixed_dictionaries({"keys": st.lists(keys, max_size=4)})),
    st.tuples(
        st.just("query"),
        st.fixed_dictionaries(
            {
                "pk": st.sampled_from(PKS),
                "sk_prefix": st.sampled_from([None, "a", "a#", "é", "c"]),
                "forward": st.booleans(),
                "limit": st.sampled_from([None, 1, 2]),
            }
        ),
    ),
    st.tuples(
        st.just("count"), st.fixed_dictionaries({"pk": st.sampled_from(PKS), "sk_prefix": st.sampled_from([None, "a"])})
    ),
    st.tuples(
        st.just("query_index"),
        st.fixed_dictionaries(
            {
                "gsi_pk": st.sampled_from(GSIS),
                "range": st.sampled_from([None, ("sk_prefix", "2"), ("sk_max", "2#~"), ("sk_max", "1")]),
                "limit": st.sampled_from([None, 1, 2]),
            }
        ),
    ),
    st.tuples(st.just("next_counter"), st.fixed_dictionaries({"key": keys, "amount": st.integers(-2, 3)})),
    st.tuples(st.just("delete_expired"), st.just({})),
)

WRITES = {"put", "update", "delete", "write_batch", "next_counter", "delete_expired"}

_runs = itertools.count()


class Run:
    """One sequence on one table: keys and index partitions prefixed with the sequence's number, times fixed."""

    def __init__(self, table: Any, number: int, now: int) -> None:
        self.table = table
        self.prefix = f"R{number}#"
        self.now = now

    def key(self, key: tuple[str, str]) -> tuple[str, str]:
        return self.prefix + key[0], key[1]

    def ttl(self, ttl: str | None) -> int | None:
        return {None: None, "past": self.now - 100, "future": self.now + 3600}[ttl]

    def gsi(self, gsi: tuple[str, str] | None, key: tuple[str, str]) -> tuple[str, str] | None:
        if gsi is None:
            return None
        return self.prefix + gsi[0], f"{gsi[1]}#{key[0]}#{key[1]}"  # unique in the index: no ties to order

    def record(self, rec: Record | None) -> Any:
        if rec is None:
            return None
        return (rec.pk.removeprefix(self.prefix), rec.sk, rec.data, rec.attrs, rec.ttl)

    def apply(self, name: str, args: dict[str, Any]) -> Any:
        t = self.table
        try:
            if name == "put":
                old = t.put(
                    self.key(args["key"]),
                    args["data"],
                    ttl=self.ttl(args["ttl"]),
                    gsi=self.gsi(args["gsi"], args["key"]),
                    attrs=args["attrs"],
                    condition=args["condition"],
                    return_old=args["return_old"],
                )
                return self.record(old)
            if name == "update":
                return self.record(
                    t.update(
                        self.key(args["key"]),
                        set_attrs=args["set_attrs"],
                        add=args["add"] or ({} if args["set_attrs"] or args["ttl"] else {"n": 1}),
                        condition=args["condition"],
                        return_values=args["return_values"],
                        unindex=args["unindex"],
                        current_on_conflict=args["current_on_conflict"],
                        ttl=self.ttl(args["ttl"]),
                    )
                )
            if name == "delete":
                old = t.delete(self.key(args["key"]), condition=args["condition"], return_old=args["return_old"])
                return self.record(old)
            if name == "write_batch":
                deletes = [k for k in args["deletes"] if k not in args["puts"]]
                t.write_batch(
                    puts=[(self.key(k), {"batch": True}) for k in args["puts"]], deletes=[self.key(k) for k in deletes]
                )
                return None
            if name == "get":
                return self.record(t.get(self.key(args["key"])))
            if name == "get_many":
                found = t.get_many([self.key(k) for k in args["keys"]])
                return sorted(self.record(rec) for rec in found.values())
            if name == "query":
                recs = t.query(
                    self.prefix + args["pk"],
                    sk_prefix=args["sk_prefix"],
                    forward=args["forward"],
                    limit=args["limit"],
                )
                return [self.record(r) for r in recs]
            if name == "count":
                return t.count(self.prefix + args["pk"], sk_prefix=args["sk_prefix"])
            if name == "query_index":
                options = dict([args["range"]]) if args["range"] else {}
                recs = t.query_index(self.prefix + args["gsi_pk"], limit=args["limit"], **options)
                return [self.record(r) for r in recs]
            if name == "next_counter":
                return t.next_counter(self.key(args["key"]), args["amount"])
            if name == "delete_expired":
                return t.delete_expired(time.time())
        except ConditionFailedError as exc:
            return ("ConditionFailed", self.record(exc.current))
        except ConflictError as exc:
            return ("ConflictError", str(exc).replace(self.prefix, ""))
        except ValueError as exc:  # a counter added to a value that is no number, e.g.
            return ("ValueError", type(exc).__name__)
        raise AssertionError(f"unknown operation {name}")

    def state(self) -> Any:
        parts = {pk: [self.record(r) for r in self.table.query(self.prefix + pk)] for pk in PKS}
        index = {g: [self.record(r) for r in self.table.query_index(self.prefix + g)] for g in GSIS}
        return parts, index


@pytest.fixture
def tables(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with ExitStack() as stack:
        client = stack.enter_context(plain_moto())
        yield {kind: stack.enter_context(open_table(kind, tmp_path, client)) for kind in KINDS}


@pytest.mark.timeout(max(120, SEQUENCES * 3))
@FUZZ
@given(sequence=st.lists(operations, min_size=15, max_size=40))
def test_every_implementation_does_the_same(tables: dict[str, Any], sequence: list[tuple[str, dict[str, Any]]]) -> None:
    number, now = next(_runs), int(time.time())
    runs = {kind: Run(table, number, now) for kind, table in tables.items()}
    for run in runs.values():
        run.table.delete_expired(time.time())  # what earlier sequences left to expire
    for step, (name, args) in enumerate(sequence):
        results = {kind: run.apply(name, args) for kind, run in runs.items()}
        first = results[KINDS[0]]
        assert all(result == first for result in results.values()), (step, name, args, results)
        if name in WRITES:  # the state after every write, before a later one can cover a difference up
            states = {kind: run.state() for kind, run in runs.items()}
            assert all(state == states[KINDS[0]] for state in states.values()), (step, name, args, states)
    expired = {kind: run.table.delete_expired(time.time()) for kind, run in runs.items()}
    assert len(set(expired.values())) == 1, expired
