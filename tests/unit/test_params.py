from __future__ import annotations

import math
from typing import Any

import pytest
from orbital.methods import registry
from orbital.protocol.params import Count, Flag, Id, Items, Json, Number, Object, Text, Whole
from orbital.protocol.registry import Params
from pydantic import BaseModel


class Loose(Params):
    text: Text = None
    flag: Flag = None
    number: Number = None
    count: Count = None
    whole: Whole = None
    obj: Object = None
    items: Items = None
    sender: Id = None
    value: Json = None


@pytest.mark.parametrize(
    ("field", "given", "read"),
    [
        ("text", "a", "a"),
        ("text", "", ""),
        ("text", 5, None),
        ("text", ["a"], None),
        ("flag", True, True),
        ("flag", False, False),
        ("flag", "true", None),
        ("flag", 1, None),
        ("number", 1.5, 1.5),
        ("number", 3, 3),
        ("number", True, None),
        ("number", "3", None),
        ("count", 10.7, 10),
        ("count", -2.5, -3),
        ("count", True, None),
        ("count", "10", None),
        ("whole", 1, 1),
        ("whole", 1.0, 1),
        ("whole", 1.5, None),
        ("whole", False, None),
        ("obj", {"a": 1}, {"a": 1}),
        ("obj", [1], None),
        ("items", [1, "a"], [1, "a"]),
        ("items", {"a": 1}, None),
        ("sender", 12345, "12345"),
        ("sender", "u1", "u1"),
        ("sender", True, None),
        ("sender", 1.5, None),
        ("value", {"any": ["json"]}, {"any": ["json"]}),
    ],
)
def test_a_value_of_the_wrong_type_reads_as_absent(field: str, given: Any, read: Any) -> None:
    assert getattr(Loose.model_validate({field: given}), field) == read


def test_non_finite_numbers_read_as_absent() -> None:
    for field in ("number", "count", "whole"):
        assert getattr(Loose.model_validate({field: math.inf}), field) is None
        assert getattr(Loose.model_validate({field: math.nan}), field) is None


def test_missing_fields_are_absent_and_unknown_fields_ignored() -> None:
    parsed = Loose.model_validate({"other": 1})
    assert parsed.model_dump() == dict.fromkeys(Loose.model_fields)


def _untyped_fields(model: type[BaseModel]) -> list[str]:
    schema = model.model_json_schema()
    untyped = []
    for name, prop in (schema.get("properties") or {}).items():
        if not any(k in prop for k in ("type", "anyOf", "$ref", "enum")):
            untyped.append(name)
    return untyped


# fields that really are any JSON value: tool arguments and results, config values, errors given as text or object
ANY_JSON = {
    "tool.invoke": {"args"},
    "tool.request": {"args"},
    "tool.result": {"result", "error"},
    "logs.result": {"error"},
    "config.set": {"value"},
    "transfer.meta": {"error"},
    "transfer.accept": {"error"},
    "transfer.complete": {"error"},
    "transfer.done": {"error"},
}


def test_every_param_is_documented_with_its_type() -> None:
    """docs/protocol.md shows real types: no params field is untyped but those that take any JSON value."""
    found = {spec.name: set(_untyped_fields(spec.params)) for spec in registry()}
    assert {name: fields for name, fields in found.items() if fields} == ANY_JSON
