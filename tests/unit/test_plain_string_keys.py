"""The local stack hashes, compares and orders moto's string values directly (`stack.plain_string_keys`): every pair of
typed values must hash, compare and order exactly as moto's own methods say, errors included."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from moto.dynamodb.models.dynamo_type import DynamoType
from orbital.local.stack import plain_string_keys

VALUES: list[dict[str, Any]] = [
    {"S": "a"},
    {"S": "b"},
    {"S": ""},
    {"S": "1"},
    {"S": "é"},
    {"S": "CALL#1"},
    {"N": "1"},
    {"N": "1.0"},
    {"N": "2"},
    {"B": b"a"},
    {"SS": ["a", "b"]},
    {"NS": ["1"]},
    {"NULL": True},
    {"BOOL": True},
    {"BOOL": False},
    {"L": [{"S": "a"}]},
    {"M": {"k": {"S": "a"}}},
]


def _outcome(method: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    try:
        return "value", method(*args)
    except Exception as exc:
        return "raises", type(exc)


def test_strings_hash_compare_and_order_as_moto_does() -> None:
    plain_string_keys()
    plain_string_keys()  # idempotent: the originals are kept once
    ours = {name: getattr(DynamoType, name) for name in ("__hash__", "__eq__", "__lt__")}
    moto = {name: method._orbital_original for name, method in ours.items()}
    assert all(ours[name] is not moto[name] for name in ours)
    assert not hasattr(moto["__hash__"], "_orbital_original")
    for left in VALUES:
        a = DynamoType(left)
        assert _outcome(ours["__hash__"], a) == _outcome(moto["__hash__"], a), left
        for right in VALUES:
            b = DynamoType(right)
            for name in ("__eq__", "__lt__"):
                assert _outcome(ours[name], a, b) == _outcome(moto[name], a, b), (name, left, right)
        assert _outcome(ours["__eq__"], a, None) == _outcome(moto["__eq__"], a, None), left


def test_string_keys_find_their_items_in_a_dictionary() -> None:
    plain_string_keys()
    stored = {DynamoType({"S": f"CALL#{i}"}): i for i in range(100)}
    stored[DynamoType({"N": "7"})] = "number"
    assert [stored[DynamoType({"S": f"CALL#{i}"})] for i in range(100)] == list(range(100))
    assert stored[DynamoType({"N": "7.0"})] == "number"
    assert DynamoType({"S": "7"}) not in stored
    assert sorted([DynamoType({"S": "b"}), DynamoType({"S": "a"})])[0].value == "a"
