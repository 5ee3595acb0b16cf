"""Conditions of conditional writes, as values: rendered for DynamoDB, evaluated in Python by the local table.

A condition is built from attribute tests and combined with `&` (AND) and `|` (OR); grouping follows the tree, so
`(xs == a OR xs == b) AND sc == c` is `(eq("xs", a) | eq("xs", b)) & eq("sc", c)`:

    not_exists("PK")                      the item does not exist (`attribute_not_exists(PK)`)
    exists("PK")                          the item exists
    not_exists("dl") | eq("dl", 0)        a flat attribute is missing, or is 0
    eq / lt / le / gt (name, value)       a comparison with a string or a number

`render` gives DynamoDB's `ConditionExpression` with its `ExpressionAttributeNames` and `ExpressionAttributeValues`
(every name and value behind a placeholder, so no attribute name can clash with a reserved word). `holds` evaluates
the same condition against an item's attributes, with DynamoDB's rules: a missing attribute makes every comparison
false; values of different types (a string and a number) are never equal nor ordered; numbers compare by value (1 =
1.0), strings by code point (which is UTF-8 byte order, as DynamoDB compares them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Value = str | int | float
"""What a comparison compares with: a string or a number (not a bool)."""

MISSING: Any = object()
"""What a lookup returns for an attribute the item does not have."""

Lookup = Callable[[str], Any]
"""An item's attribute by name (`MISSING` when absent); the item's key attributes (`PK`, `SK`) included."""

_Op = Literal["=", "<", "<=", ">"]


class Condition:
    """A condition on the item a write is about to change (see the module's docstring)."""

    __slots__ = ()

    def __and__(self, other: Condition) -> Condition:
        return And(_parts(self, And) + _parts(_checked(other), And))

    def __or__(self, other: Condition) -> Condition:
        return Or(_parts(self, Or) + _parts(_checked(other), Or))

    def holds(self, lookup: Lookup) -> bool:
        raise NotImplementedError

    def _render(self, names: dict[str, str], values: dict[str, Value]) -> str:
        raise NotImplementedError

    def render(self) -> tuple[str, dict[str, str], dict[str, Value]]:
        """(ConditionExpression, ExpressionAttributeNames, ExpressionAttributeValues with plain values).
        Placeholders are `#c0…` and `:c0…`, so they do not clash with those of an update expression."""
        names: dict[str, str] = {}
        values: dict[str, Value] = {}
        return self._render(names, values), names, values

    def holds_for(self, item: Mapping[str, Any] | None) -> bool:
        """Evaluate against an item given as a mapping of its attributes (None: there is no item)."""
        if item is None:
            return self.holds(lambda _name: MISSING)
        return self.holds(lambda name: item.get(name, MISSING))


def _checked(other: object) -> Condition:
    if not isinstance(other, Condition):
        raise TypeError(f"a condition combines only with another condition, not {type(other).__name__}")
    return other


def _parts(cond: Condition, kind: type) -> tuple[Condition, ...]:
    return cond.items if isinstance(cond, kind) and isinstance(cond, And | Or) else (cond,)


def _name(names: dict[str, str], name: str) -> str:
    for placeholder, known in names.items():
        if known == name:
            return placeholder
    placeholder = f"#c{len(names)}"
    names[placeholder] = name
    return placeholder


def _value(values: dict[str, Value], value: Value) -> str:
    placeholder = f":c{len(values)}"
    values[placeholder] = value
    return placeholder


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"an attribute name must be a non-empty string, not {name!r}")
    return name


def _check_value(value: object) -> Value:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"a condition compares with a string or a number, not {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"a condition cannot compare with {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Exists(Condition):
    name: str

    def holds(self, lookup: Lookup) -> bool:
        return lookup(self.name) is not MISSING

    def _render(self, names: dict[str, str], values: dict[str, Value]) -> str:
        return f"attribute_exists({_name(names, self.name)})"


@dataclass(frozen=True, slots=True)
class NotExists(Condition):
    name: str

    def holds(self, lookup: Lookup) -> bool:
        return lookup(self.name) is MISSING

    def _render(self, names: dict[str, str], values: dict[str, Value]) -> str:
        return f"attribute_not_exists({_name(names, self.name)})"


def _kind(value: Any) -> str | None:
    """DynamoDB's type of a stored value, as far as comparisons go: S, N, or something else (None)."""
    if isinstance(value, str):
        return "S"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "N"
    return None


@dataclass(frozen=True, slots=True)
class Compare(Condition):
    name: str
    op: _Op
    value: Value

    def holds(self, lookup: Lookup) -> bool:
        stored = lookup(self.name)
        if stored is MISSING or _kind(stored) is None or _kind(stored) != _kind(self.value):
            return False
        if self.op == "=":
            return bool(stored == self.value)
        if self.op == "<":
            return bool(stored < self.value)
        if self.op == "<=":
            return bool(stored <= self.value)
        return bool(stored > self.value)

    def _render(self, names: dict[str, str], values: dict[str, Value]) -> str:
        return f"{_name(names, self.name)} {self.op} {_value(values, self.value)}"


@dataclass(frozen=True, slots=True)
class And(Condition):
    items: tuple[Condition, ...]

    def holds(self, lookup: Lookup) -> bool:
        return all(item.holds(lookup) for item in self.items)

    def _render(self, names: dict[str, str], values: dict[str, Value]) -> str:
        return " AND ".join(_grouped(item, names, values) for item in self.items)


@dataclass(frozen=True, slots=True)
class Or(Condition):
    items: tuple[Condition, ...]

    def holds(self, lookup: Lookup) -> bool:
        return any(item.holds(lookup) for item in self.items)

    def _render(self, names: dict[str, str], values: dict[str, Value]) -> str:
        return " OR ".join(_grouped(item, names, values) for item in self.items)


def _grouped(item: Condition, names: dict[str, str], values: dict[str, Value]) -> str:
    text = item._render(names, values)
    return f"({text})" if isinstance(item, And | Or) else text


def exists(name: str) -> Condition:
    """The attribute is present (`exists("PK")`: the item exists)."""
    return Exists(_check_name(name))


def not_exists(name: str) -> Condition:
    """The attribute is absent (`not_exists("PK")`: there is no such item)."""
    return NotExists(_check_name(name))


def eq(name: str, value: Value) -> Condition:
    return Compare(_check_name(name), "=", _check_value(value))


def lt(name: str, value: Value) -> Condition:
    return Compare(_check_name(name), "<", _check_value(value))


def le(name: str, value: Value) -> Condition:
    return Compare(_check_name(name), "<=", _check_value(value))


def gt(name: str, value: Value) -> Condition:
    return Compare(_check_name(name), ">", _check_value(value))


def all_of(*conditions: Condition) -> Condition | None:
    """Every one of `conditions` (None for none: no condition at all)."""
    if not conditions:
        return None
    result = _checked(conditions[0])
    for cond in conditions[1:]:
        result = result & cond
    return result
