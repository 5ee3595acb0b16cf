"""The table port: what the gateway stores its items in, on DynamoDB (AWS) or SQLite (the local gateway).

Every item has a key (`PK`, `SK`), a JSON payload (`data`), optional flat attributes used in conditions and atomic
counters (`attrs`: strings, numbers, bools, null), an optional expiry (`ttl`, epoch seconds) and optional keys in the
one secondary index (`gsi`: `GSI1PK`/`GSI1SK`). Every key is built in `orbital.store.keys`.

The contract both implementations keep (`tests/contract` runs the same tests against each):

- Items whose `ttl` has passed (`ttl < now`) are absent to every read, and a `limit` counts only live items. A
  condition, though, sees the item as stored until it is deleted (as DynamoDB's does: its TTL process deletes lazily);
  `delete_expired` deletes them.
- Conditions are `orbital.store.conditions` values; one that does not hold raises `ConflictError` and changes nothing
  (`ConditionFailedError` with the item as it stood, when `current_on_conflict` asks for it).
- A query returns items in sort-key order (`forward=False`: reversed; `limit` after that, so the last N), an index
  query in index sort-key order.
- `update` creates the item when there is none (its payload is then empty); `add` counts from 0.

`Table` is a template: its public methods check their arguments once (the `check_*` functions below) and hand
them, checked and normalized, to the few methods a backend implements (`_get`, `_get_many`, `_query`,
`_query_index`, `_put`, `_update`, `_delete`, `_write_batch`, `_delete_expired`; `_view` and `_count` when it can do
better than a read). The backends: `orbital.store.backends.dynamo.DynamoTable` and
`orbital.store.backends.sqlite.SqliteTable`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from orbital.errors import ConflictError
from orbital.store.conditions import Condition

__all__ = ["ConditionFailedError", "ConflictError", "Record", "ReturnValues", "Table"]

RESERVED = frozenset({"PK", "SK", "GSI1PK", "GSI1SK", "ttl", "d"})
"""Attribute names an item's flat attributes cannot use (they hold its key, index keys, expiry and payload)."""

ReturnValues = Literal["ALL_NEW", "ALL_OLD", "NONE"]
RETURN_VALUES: frozenset[str] = frozenset({"ALL_NEW", "ALL_OLD", "NONE"})

T = TypeVar("T")
Key = tuple[str, str]


class ConditionFailedError(ConflictError):
    """A conditional update did not apply; `current` is the item as it stood (None: there is none, or it expired),
    when the update asked for it."""

    def __init__(self, message: str, current: Record | None) -> None:
        super().__init__(message)
        self.current = current


@dataclass(frozen=True)
class Update:
    """What an update changes, checked (`check_update`): attributes set, counters added to, the new `ttl` (None:
    kept as it is) and whether the item leaves the secondary index."""

    assigns: dict[str, Any]
    adds: dict[str, int]
    ttl: int | None
    unindex: bool


@dataclass
class Record:
    pk: str
    sk: str
    data: dict[str, Any]
    attrs: dict[str, Any] = field(default_factory=dict)
    ttl: int | None = None


def flat_value(value: Any) -> Any:
    """A flat attribute's value as the table stores it: a string, an int, a float, a bool or None; anything else
    becomes its `str()`."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def check_key(key: tuple[str, str]) -> tuple[str, str]:
    pk, sk = key
    if not isinstance(pk, str) or not isinstance(sk, str) or not pk or not sk:
        raise ValueError(f"an item's key is two non-empty strings, not {key!r}")
    return pk, sk


def check_attrs(attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    """The flat attributes of a write, checked (no reserved name) and normalized (`flat_value`)."""
    out: dict[str, Any] = {}
    for name, value in (attrs or {}).items():
        if name in RESERVED:
            raise ValueError(f"reserved attribute: {name}")
        if not isinstance(name, str) or not name:
            raise ValueError(f"an attribute name must be a non-empty string, not {name!r}")
        out[name] = flat_value(value)
    return out


def check_update(
    set_attrs: Mapping[str, Any] | None,
    add: Mapping[str, int] | None,
    ttl: int | None,
    unindex: bool,
    return_values: str,
) -> tuple[dict[str, Any], dict[str, int]]:
    """An update's assignments and additions, checked; raises ValueError for one that would do nothing or names an
    attribute twice."""
    if return_values not in RETURN_VALUES:
        raise ValueError(f"return_values must be one of {sorted(RETURN_VALUES)}, not {return_values!r}")
    assigns = check_attrs(set_attrs)
    adds: dict[str, int] = {}
    for name, amount in (add or {}).items():
        if name in RESERVED:
            raise ValueError(f"reserved attribute: {name}")
        if isinstance(amount, bool) or not isinstance(amount, int):
            raise ValueError(f"an addition is a whole number, not {amount!r}")
        if name in assigns:
            raise ValueError(f"attribute {name} is both set and added to")
        adds[name] = int(amount)
    if not assigns and not adds and ttl is None and not unindex:
        raise ValueError("an update must set, add, set the ttl or unindex something")
    return assigns, adds


def check_ttl(ttl: int | float | None) -> int | None:
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl):
        raise ValueError(f"a ttl is epoch seconds, not {ttl!r}")
    return int(ttl)


def check_gsi(gsi: tuple[str, str] | None) -> tuple[str, str] | None:
    if gsi is None:
        return None
    if len(gsi) != 2 or not all(isinstance(part, str) and part for part in gsi):
        raise ValueError(f"index keys are two non-empty strings, not {gsi!r}")
    return gsi[0], gsi[1]


def check_batch(
    puts: Iterable[tuple[tuple[str, str], Mapping[str, Any]]], deletes: Iterable[tuple[str, str]]
) -> tuple[list[tuple[tuple[str, str], Mapping[str, Any]]], list[tuple[str, str]]]:
    put_list = [(check_key(key), data) for key, data in puts]
    delete_list = [check_key(key) for key in deletes]
    seen: set[tuple[str, str]] = set()
    for key in [k for k, _ in put_list] + delete_list:
        if key in seen:
            raise ValueError(f"a batch names {key[0]}/{key[1]} twice")
        seen.add(key)
    return put_list, delete_list


def check_query(
    sk_prefix: str | None, sk_max: str | None, limit: int | None, sk_between: tuple[str, str] | None = None
) -> str | None:
    """Checks a query's options; returns its sort-key prefix (None for none: an empty prefix matches everything)."""
    if sum(option is not None for option in (sk_prefix, sk_max, sk_between)) > 1:
        raise ValueError("a query takes one of a sort-key prefix, a maximum or a range")
    if sk_between is not None and (
        len(sk_between) != 2 or not all(isinstance(b, str) for b in sk_between) or sk_between[0] > sk_between[1]
    ):
        raise ValueError(f"a sort-key range is two strings, the lower first, not {sk_between!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"a limit is a whole number, 0 or more, not {limit!r}")
    return sk_prefix or None


def check_condition(condition: Condition | None) -> Condition | None:
    if condition is not None and not isinstance(condition, Condition):
        raise TypeError(f"a condition is an orbital.store.conditions value, not {type(condition).__name__}")
    return condition


class Table(ABC):
    """The port (see the module's docstring): the public methods check, the backends' `_` methods do."""

    # --- reads ------------------------------------------------------------------------------------------------

    def get(self, key: tuple[str, str]) -> Record | None:
        """The item at `key`, None if there is none (or it expired)."""
        return self._get(key[0], key[1])

    def view(self, key: tuple[str, str], make: Callable[[Record], T]) -> T | None:
        """`make(record)` of the item at `key`, None if there is none. A backend may hand out the same object again
        while the stored item is the same: callers share it and must not change it."""
        return self._view(key[0], key[1], make)

    def get_many(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Record]:
        """The items of `keys` that exist, by key."""
        return self._get_many(list(dict.fromkeys(keys)))

    def query(
        self,
        pk: str,
        *,
        sk_prefix: str | None = None,
        sk_between: tuple[str, str] | None = None,
        forward: bool = True,
        limit: int | None = None,
    ) -> list[Record]:
        """The items of partition `pk` (those whose sort key starts with `sk_prefix`, or lies between the two bounds
        of `sk_between`, both included), in sort-key order, or reversed (`forward=False`); at most `limit` of
        them."""
        prefix = check_query(sk_prefix, None, limit, sk_between)
        return self._query(pk, sk_prefix=prefix, sk_between=sk_between, forward=forward, limit=limit)

    def query_index(
        self, gsi_pk: str, *, sk_prefix: str | None = None, limit: int | None = None, sk_max: str | None = None
    ) -> list[Record]:
        """Items of an index partition, in index sort-key order: all, those whose index sort key starts with
        `sk_prefix`, or those up to `sk_max` (e.g. everything due by now)."""
        prefix = check_query(sk_prefix, sk_max, limit)
        return self._query_index(gsi_pk, sk_prefix=prefix, sk_max=sk_max, limit=limit)

    def count(self, pk: str, *, sk_prefix: str | None = None) -> int:
        """How many live items partition `pk` holds (those whose sort key starts with `sk_prefix`)."""
        return self._count(pk, sk_prefix or None)

    # --- writes -----------------------------------------------------------------------------------------------

    def put(
        self,
        key: tuple[str, str],
        data: Mapping[str, Any],
        *,
        ttl: int | None = None,
        gsi: tuple[str, str] | None = None,
        attrs: Mapping[str, Any] | None = None,
        condition: Condition | None = None,
        return_old: bool = False,
    ) -> Record | None:
        """Store the whole item (replacing any). With `return_old`, the item it replaced (None: none, or expired)."""
        pk, sk = check_key(key)
        return self._put(
            pk,
            sk,
            data,
            ttl=check_ttl(ttl),
            gsi=check_gsi(gsi),
            attrs=check_attrs(attrs),
            condition=check_condition(condition),
            return_old=return_old,
        )

    def update(
        self,
        key: tuple[str, str],
        *,
        set_attrs: Mapping[str, Any] | None = None,
        add: Mapping[str, int] | None = None,
        condition: Condition | None = None,
        return_values: ReturnValues = "ALL_NEW",
        unindex: bool = False,
        current_on_conflict: bool = False,
        ttl: int | None = None,
    ) -> Record | None:
        """Set flat attributes and/or atomically add to counters. With `unindex`, the item also leaves the secondary
        index (its GSI keys are removed). With `current_on_conflict`, a failed condition raises `ConditionFailedError`
        holding the item as it stood. `ttl` (epoch seconds) is set in the same write. Returns the item after the
        update (`ALL_NEW`), before it (`ALL_OLD`; None if there was none), or None (`NONE`)."""
        pk, sk = check_key(key)
        check_condition(condition)
        assigns, adds = check_update(set_attrs, add, ttl, unindex, return_values)
        return self._update(
            pk,
            sk,
            Update(assigns, adds, check_ttl(ttl), unindex),
            condition=condition,
            return_values=return_values,
            current_on_conflict=current_on_conflict,
        )

    def next_counter(self, key: tuple[str, str], amount: int = 1) -> int:
        """Add `amount` to the counter at `key` (an item of its own, without a `ttl`) and return the new value."""
        rec = self.update(key, add={"n": amount})
        if rec is None:
            raise ValueError(f"the counter at {key[0]}/{key[1]} has expired")
        return int(rec.attrs["n"])

    def delete(
        self,
        key: tuple[str, str],
        *,
        condition: Condition | None = None,
        return_old: bool = False,
    ) -> Record | None:
        """Delete the item (nothing to delete is fine). With `return_old`, the item deleted (None: none, or
        expired)."""
        pk, sk = check_key(key)
        return self._delete(pk, sk, condition=check_condition(condition), return_old=return_old)

    def write_batch(
        self,
        puts: Iterable[tuple[tuple[str, str], Mapping[str, Any]]] = (),
        deletes: Iterable[tuple[str, str]] = (),
    ) -> None:
        """Store payload-only items and delete others, unconditionally (no key twice)."""
        put_list, delete_list = check_batch(puts, deletes)
        if put_list or delete_list:
            self._write_batch(put_list, delete_list)

    def delete_expired(self, now: float, *, limit: int | None = None) -> int:
        """Delete up to `limit` items whose `ttl` is before `now` (an item written again meanwhile with a later `ttl`
        is kept). Returns how many were deleted."""
        return self._delete_expired(now, limit)

    # --- what a backend implements ----------------------------------------------------------------------------

    @abstractmethod
    def _get(self, pk: str, sk: str) -> Record | None: ...

    def _view(self, pk: str, sk: str, make: Callable[[Record], T]) -> T | None:
        """By default `make` of a fresh read each time."""
        rec = self._get(pk, sk)
        return make(rec) if rec is not None else None

    @abstractmethod
    def _get_many(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], Record]:
        """`keys`: no key twice."""

    @abstractmethod
    def _query(
        self, pk: str, *, sk_prefix: str | None, sk_between: tuple[str, str] | None, forward: bool, limit: int | None
    ) -> list[Record]:
        """`sk_prefix`: None for none (never empty); at most one of `sk_prefix` and `sk_between`."""

    @abstractmethod
    def _query_index(
        self, gsi_pk: str, *, sk_prefix: str | None, sk_max: str | None, limit: int | None
    ) -> list[Record]:
        """`sk_prefix`: None for none (never empty); at most one of `sk_prefix` and `sk_max`."""

    def _count(self, pk: str, sk_prefix: str | None) -> int:
        """By default the length of the query."""
        return len(self._query(pk, sk_prefix=sk_prefix, sk_between=None, forward=True, limit=None))

    @abstractmethod
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
        """`attrs`: flat and normalized (`check_attrs`)."""

    @abstractmethod
    def _update(
        self,
        pk: str,
        sk: str,
        change: Update,
        *,
        condition: Condition | None,
        return_values: ReturnValues,
        current_on_conflict: bool,
    ) -> Record | None: ...

    @abstractmethod
    def _delete(self, pk: str, sk: str, *, condition: Condition | None, return_old: bool) -> Record | None: ...

    @abstractmethod
    def _write_batch(
        self, puts: list[tuple[tuple[str, str], Mapping[str, Any]]], deletes: list[tuple[str, str]]
    ) -> None:
        """At least one put or delete; no key twice."""

    @abstractmethod
    def _delete_expired(self, now: float, limit: int | None) -> int: ...
