"""Conditions as values (orbital/store/conditions.py): what DynamoDB is sent, and how the local table evaluates them
(DynamoDB's rules: a missing attribute fails every comparison, values of different types are never equal nor
ordered)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from orbital.store import conditions as cond


def holds(condition: cond.Condition, item: dict[str, Any] | None) -> bool:
    return condition.holds_for(item)


def test_rendered_for_dynamodb_behind_placeholders() -> None:
    claim = cond.eq("st", "pending") & cond.eq("ck", "tool") & cond.eq("GSI1PK", "NODE#a")
    assert claim.render() == (
        "#c0 = :c0 AND #c1 = :c1 AND #c2 = :c2",
        {"#c0": "st", "#c1": "ck", "#c2": "GSI1PK"},
        {":c0": "pending", ":c1": "tool", ":c2": "NODE#a"},
    )
    assert cond.not_exists("PK").render() == ("attribute_not_exists(#c0)", {"#c0": "PK"}, {})
    lease = cond.not_exists("PK") | cond.lt("lu", 5)
    assert lease.render() == ("attribute_not_exists(#c0) OR #c1 < :c0", {"#c0": "PK", "#c1": "lu"}, {":c0": 5})


def test_grouping_follows_the_tree() -> None:
    chunk = (cond.eq("xs", "streaming") | cond.eq("xs", "completing")) & cond.eq("sc", "c1")
    expression, names, values = chunk.render()
    assert expression == "(#c0 = :c0 OR #c0 = :c1) AND #c1 = :c2"  # one name placeholder per attribute
    assert names == {"#c0": "xs", "#c1": "sc"}
    assert values == {":c0": "streaming", ":c1": "completing", ":c2": "c1"}
    other = cond.eq("a", 1) | (cond.eq("b", 2) & cond.gt("c", 3))
    assert other.render()[0] == "#c0 = :c0 OR (#c1 = :c1 AND #c2 > :c2)"
    flat = cond.eq("a", 1) & cond.eq("b", 2) & cond.le("c", 3)
    assert isinstance(flat, cond.And) and len(flat.items) == 3  # a chain of ANDs is one AND
    assert cond.all_of() is None
    assert cond.all_of(cond.exists("PK")) == cond.exists("PK")
    assert cond.all_of(cond.exists("a"), cond.exists("b")) == cond.exists("a") & cond.exists("b")


def test_existence() -> None:
    item = {"PK": "p", "SK": "s", "dl": 0, "nul": None}
    assert holds(cond.exists("PK"), item) and not holds(cond.exists("PK"), None)
    assert holds(cond.not_exists("PK"), None) and not holds(cond.not_exists("PK"), item)
    assert holds(cond.exists("dl"), item) and holds(cond.not_exists("rv"), item)
    assert holds(cond.exists("nul"), item)  # a NULL attribute exists


def test_a_missing_attribute_fails_every_comparison() -> None:
    for condition in (cond.eq("v", 1), cond.lt("v", 1), cond.le("v", 1), cond.gt("v", 1), cond.eq("v", "")):
        assert not holds(condition, {"PK": "p"})
        assert not holds(condition, None)


def test_numbers_compare_by_value_and_strings_by_code_point() -> None:
    item = {"n": 5, "f": 1.0, "s": "é"}
    assert holds(cond.eq("n", 5.0), item) and holds(cond.eq("f", 1), item)
    assert holds(cond.lt("n", 5.5), item) and holds(cond.le("n", 5), item) and holds(cond.gt("n", 4.9), item)
    assert not holds(cond.lt("n", 5), item) and not holds(cond.gt("n", 5), item)
    assert holds(cond.gt("s", "z"), item)  # U+00E9 after "z", as UTF-8 bytes sort
    assert holds(cond.lt("s", "中"), item)
    assert holds(cond.gt("s", "é\x00") | cond.eq("s", "é"), item)


def test_values_of_different_types_are_never_equal_nor_ordered() -> None:
    item = {"n": 6, "s": "6", "b": True, "z": None}
    for condition in (cond.eq("n", "6"), cond.eq("s", 6), cond.lt("s", 7), cond.gt("n", "5")):
        assert not holds(condition, item)
    for condition in (cond.eq("b", 1), cond.gt("b", 0), cond.eq("z", 0), cond.eq("z", "")):
        assert not holds(condition, item)  # a bool or a null is neither a number nor a string


def test_and_or() -> None:
    item = {"xs": "completing", "sc": "c1"}
    assert holds((cond.eq("xs", "streaming") | cond.eq("xs", "completing")) & cond.eq("sc", "c1"), item)
    assert not holds((cond.eq("xs", "streaming") | cond.eq("xs", "completing")) & cond.eq("sc", "c2"), item)
    assert holds(cond.eq("xs", "x") | cond.eq("sc", "c1"), item)
    assert not holds(cond.eq("xs", "x") & cond.eq("sc", "c1"), item)


def test_bad_conditions_are_refused_when_built() -> None:
    for value in (True, None, [1], {"a": 1}, math.nan, math.inf):
        with pytest.raises(ValueError):
            cond.eq("a", value)  # type: ignore[arg-type]
    for name in ("", None, 3):
        with pytest.raises(ValueError):
            cond.exists(name)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        cond.exists("a") & "b = :b"  # type: ignore[operator]
    with pytest.raises(TypeError):
        cond.exists("a") | None  # type: ignore[operator]


def test_conditions_are_plain_values() -> None:
    assert cond.eq("st", "pending") == cond.eq("st", "pending")
    assert cond.eq("st", "pending") != cond.eq("st", "done")
    assert len({cond.eq("a", 1), cond.eq("a", 1), cond.exists("a")}) == 2
