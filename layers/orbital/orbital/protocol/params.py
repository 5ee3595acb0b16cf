"""Lenient field types for method params: what GSV accepts loosely, typed once.

GSV answers a missing or wrongly typed field with the method's own message ("sessionKey and message required"),
never with a schema error, and it ignores what it does not understand in optional fields. These types keep that:
a value of the wrong JSON type reads as absent (`None`), so the handler's own check for the field decides the
answer, and the model still documents the real type in docs/protocol.md.

The `Given*` types are for fields whose value goes to a service that checks it with its own messages (the cron
service, a node's runtime): passed on untouched, documented with the type the service expects.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _finite(value: Any) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if math.isfinite(value) else None


def _count(value: Any) -> int | None:
    number = _finite(value)
    return None if number is None else math.floor(number)


def _whole(value: Any) -> int | None:
    number = _finite(value)
    if number is None or (isinstance(number, float) and not number.is_integer()):
        return None
    return int(number)


def _object(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _items(value: Any) -> list[Any] | None:
    return value if isinstance(value, list) else None


def _id(value: Any) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return _text(value)


Text = Annotated[str | None, BeforeValidator(_text)]
"""A string; anything else is absent."""
Flag = Annotated[bool | None, BeforeValidator(_flag)]
"""`true` or `false`; anything else is absent."""
Number = Annotated[int | float | None, BeforeValidator(_finite), WithJsonSchema({"type": "number"})]
"""A finite number (not a boolean); anything else is absent."""
Count = Annotated[int | None, BeforeValidator(_count)]
"""A finite number, rounded down (paging and sizes: `limit: 10.7` is 10); anything else is absent."""
Whole = Annotated[int | None, BeforeValidator(_whole)]
"""An integral number (`1` or `1.0`); anything else, `1.5` included, is absent."""
Object = Annotated[dict[str, Any] | None, BeforeValidator(_object)]
"""A JSON object; anything else is absent."""
Items = Annotated[list[Any] | None, BeforeValidator(_items)]
"""A JSON array; anything else is absent."""
Id = Annotated[str | None, BeforeValidator(_id)]
"""A string, or an integer taken as its decimal text (chat platforms' numeric ids); anything else is absent."""
Json = Annotated[Any, WithJsonSchema({})]
"""Any JSON value, passed on as it is (tool arguments and results, config values)."""

GivenText = Annotated[Any, WithJsonSchema({"type": "string"})]
GivenFlag = Annotated[Any, WithJsonSchema({"type": "boolean"})]
GivenCount = Annotated[Any, WithJsonSchema({"type": "integer"})]
GivenObject = Annotated[Any, WithJsonSchema({"type": "object"})]
