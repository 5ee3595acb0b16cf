"""The gateway's own `PutItem` and `UpdateItem` answered at moto's backend, without moto's response handler.

`orbital.local.direct` hands a DynamoDB call's parameters to moto's `DynamoHandler`, which for the writes the
repositories send most does far more than the table needs: a `PutItem` validates the item three times over, builds
moto's item through a size-checked map that sums every attribute again on each insert, renders the new item to JSON
and drops it; an `UpdateItem` parses the update expression once more to find its placeholders, walks the tree for
them, deep-copies the stored item and renders it twice to work out what changed. Measured here on the claim of a
deferred call and the two puts of `tool.invoke`: 0.3-0.4 ms and 0.1-0.17 ms, most of a tool call's cost in the
gateway (docs/adr/0021).

`put_item` and `update_item` below answer the shapes `orbital.store.table.Table` sends, and only those:

- `PutItem` of an item whose every attribute is a string, a plain decimal number, a boolean or a null (what
  `Table._encode` writes), with string keys that are not empty and within moto's key size limits, an index key
  only as a non-empty value of its declared type, no more than 400,000 bytes in all; an optional condition whose
  every name placeholder it uses; `ReturnValues` `NONE` or `ALL_OLD`.
- `UpdateItem` of an expression `orbital.local.moto_updates` applies itself (top-level `SET`, `ADD`, `REMOVE`) on a
  key of exactly the table's key attributes, every name and value placeholder used by the expression or the
  condition; `ReturnValues` `NONE`, `ALL_NEW` or `ALL_OLD`. The update itself is moto's backend's
  (`DynamoDBBackend.update_item`, that is `moto_updates` under the lock and the journal).

Anything else returns None before anything is read or changed, and the caller hands the call to moto's handler,
which answers (or refuses) it as it always has. The condition is moto's parser's (parsed once, `stack.
cache_conditions`), the stored item is moto's `Item` of moto's `DynamoType`s, the journal records the item as moto
stores it, and the answer is the handler's to the letter; `tests/functional/test_moto_items.py` runs the same
script both ways on twin tables and compares every answer, error, stored item and journal record.
"""

from __future__ import annotations

import re
import threading
from typing import Any

PUT_PARAMETERS = frozenset({"TableName", "Item", "ConditionExpression", "ExpressionAttributeNames",
                            "ExpressionAttributeValues", "ReturnValues"})  # fmt: skip
UPDATE_PARAMETERS = frozenset({"TableName", "Key", "UpdateExpression", "ConditionExpression",
                               "ExpressionAttributeNames", "ExpressionAttributeValues", "ReturnValues",
                               "ReturnValuesOnConditionCheckFailure"})  # fmt: skip
# A number moto takes as it is and DynamoDB stores exactly: at most 38 digits each side of the point, no exponent,
# no sign but a leading minus, no spaces (within DynamoDB's range by construction).
PLAIN_NUMBER = re.compile(r"-?[0-9]{1,38}(\.[0-9]{1,38})?")
MAX_ITEM_BYTES = 400_000  # DynamoDB's limit; moto's own check sits a little above it, so bigger items go to moto
HASH_KEY_MAX_BYTES = 2048
RANGE_KEY_MAX_BYTES = 1024


class _Shape:
    """What a table's key schema says about items, worked out once per table object."""

    def __init__(self, table: Any) -> None:
        self.table = table
        self.hash_attr: str = table.hash_key_attr
        self.range_attr: str | None = table.range_key_attr
        self.types: dict[str, str] = {d["AttributeName"]: d["AttributeType"] for d in table.attr}
        self.max_bytes: dict[str, int] = {}
        for name in table.range_key_names:
            self.max_bytes[name] = RANGE_KEY_MAX_BYTES
        for name in table.hash_key_names:
            self.max_bytes[name] = HASH_KEY_MAX_BYTES
        self.key_attrs = set(table.attribute_keys)
        self.table_keys = {self.hash_attr} | ({self.range_attr} if self.range_attr else set())


_shapes: dict[int, _Shape] = {}
_shapes_lock = threading.Lock()


def _shape(table: Any) -> _Shape:
    known = _shapes.get(id(table))
    if known is not None and known.table is table:
        return known
    shape = _Shape(table)
    with _shapes_lock:
        if len(_shapes) > 64:
            _shapes.clear()
        _shapes[id(table)] = shape
    return shape


def _table(backend: Any, name: Any) -> Any | None:
    if not isinstance(name, str):
        return None
    table = backend.tables.get(name)
    if table is None or table.stream_shard is not None:
        return None
    return table


def _plain_key_value(shape: _Shape, name: str, value: Any) -> bool:
    """A key or index-key attribute moto stores without a word: a non-empty value of its declared type, in size."""
    if not isinstance(value, dict) or len(value) != 1:
        return False
    ((type_, content),) = value.items()
    if type_ != shape.types.get(name) or not content:
        return False
    if type_ == "S":
        return isinstance(content, str) and len(content.encode("utf-8")) <= shape.max_bytes.get(name, 0)
    if type_ == "N":
        return isinstance(content, str) and PLAIN_NUMBER.fullmatch(content) is not None
    return False


def _plain_value(value: Any) -> bool:
    if not isinstance(value, dict) or len(value) != 1:
        return False
    ((type_, content),) = value.items()
    if type_ == "S":
        return isinstance(content, str)
    if type_ == "N":
        return isinstance(content, str) and PLAIN_NUMBER.fullmatch(content) is not None
    if type_ == "BOOL":
        return isinstance(content, bool)
    return type_ == "NULL" and content is True


def _placeholders(params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The name and value maps, or None where moto's handler has something to say about them."""
    names = params.get("ExpressionAttributeNames", {})
    values = params.get("ExpressionAttributeValues", {})
    if not isinstance(names, dict) or not isinstance(values, dict):
        return None
    if "ExpressionAttributeValues" in params and not values:
        return None
    for placeholder, value in values.items():
        if not (isinstance(placeholder, str) and placeholder.startswith(":") and _plain_value(value)):
            return None
    return names, values


def _condition(
    params: dict[str, Any], names: dict[str, Any], values: dict[str, Any]
) -> tuple[Any, tuple[str, ...], tuple[str, ...]] | None:
    """moto's parsed condition and the name and value placeholders its parser found, or None when moto would refuse
    the text. Parsed by moto's parser, whose results the local stack keeps per text, names and the values the
    condition uses (`stack.cache_conditions`): not per every value of the request, which would keep (and miss on)
    the values an update sets, such as a stored tool outcome of up to 256 KB."""
    from moto.dynamodb.comparisons import create_condition_expression_parser

    text = params.get("ConditionExpression")
    if text is not None and not isinstance(text, str):
        return None
    parser = create_condition_expression_parser(text, names, values)
    try:
        return parser.parse(), tuple(parser.expr_attr_names_found), tuple(parser.expr_attr_values_found)
    except Exception:
        return None


def _typed_item(shape: _Shape, item: dict[str, Any]) -> dict[str, Any] | None:
    """The item's attributes as moto's `DynamoType`s, or None unless every attribute is plain (keys as
    `_plain_key_value` says) and the item is within `MAX_ITEM_BYTES` as moto counts it. A plain value's type is its
    one key and its value that key's content, which is all `DynamoType(value)` sets for one; its size is counted
    only when a bound of it (four bytes a character) could pass the limit."""
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.utilities import bytesize

    new = object.__new__
    key_attrs = shape.key_attrs
    attrs: dict[str, Any] = {}
    bound = 0
    for name, value in item.items():
        if not isinstance(name, str) or not name:
            return None
        if name in key_attrs:
            if not _plain_key_value(shape, name, value):
                return None
        elif not _plain_value(value):
            return None
        ((type_, content),) = value.items()
        typed = new(DynamoType)
        typed.type = type_
        typed.value = content
        attrs[name] = typed
        bound += len(name) + (len(content) if type_ == "S" or type_ == "N" else 1)
    if 4 * bound > MAX_ITEM_BYTES and sum(bytesize(n) + v.size() for n, v in attrs.items()) > MAX_ITEM_BYTES:
        return None
    return attrs


def put_item(backend: Any, params: dict[str, Any]) -> dict[str, Any] | None:
    """Answer a plain `PutItem` as moto's handler would, or None (nothing done) for moto's handler to answer."""
    from moto.dynamodb.exceptions import ConditionalCheckFailed
    from moto.dynamodb.models.dynamo_type import Item, LimitedSizeDict

    from orbital.local import moto_updates
    from orbital.local.persistence import recorded_put, whole_operation

    if not PUT_PARAMETERS.issuperset(params):
        return None
    return_values = params.get("ReturnValues", "NONE")
    if return_values not in ("NONE", "ALL_OLD"):
        return None
    table = _table(backend, params.get("TableName"))
    item = params.get("Item")
    if table is None or not isinstance(item, dict):
        return None
    shape = _shape(table)
    if shape.hash_attr not in item or (shape.range_attr is not None and shape.range_attr not in item):
        return None
    attrs = _typed_item(shape, item)
    if attrs is None:
        return None
    maps = _placeholders(params)
    parsed = _condition(params, *maps) if maps is not None else None
    if maps is None or parsed is None:
        return None
    names = maps[0]
    condition, names_found, _ = parsed
    if any(name not in names_found for name in names):
        return None
    hash_value = attrs[shape.hash_attr]
    range_value = attrs[shape.range_attr] if shape.range_attr is not None else None
    stored: Any = Item.__new__(Item)  # moto's Item, its attribute map filled at once (the size is checked above)
    stored.hash_key = hash_value
    stored.range_key = range_value
    stored.attrs = LimitedSizeDict.__new__(LimitedSizeDict)
    dict.update(stored.attrs, attrs)
    key = {shape.hash_attr: item[shape.hash_attr]}
    if shape.range_attr is not None:
        key[shape.range_attr] = item[shape.range_attr]
    with whole_operation() as store:
        current = moto_updates.stored_item(table, hash_value, range_value)
        if params.get("ConditionExpression") and not condition.expr(current):
            raise ConditionalCheckFailed
        if range_value is not None:
            table.items[hash_value][range_value] = stored
        else:
            table.items[hash_value] = stored
        if store is not None:  # the item as moto stores it is the one given (plain values only)
            recorded_put(store, table.name, key, item)
        if return_values == "ALL_OLD" and current is not None:
            return {"Attributes": current.to_json()["Attributes"]}
    return {}


def update_item(backend: Any, params: dict[str, Any]) -> dict[str, Any] | None:
    """Answer a plain `UpdateItem` as moto's handler would, or None (nothing done) for moto's handler to answer."""
    from orbital.local import moto_updates
    from orbital.local.persistence import recorded_put, whole_operation

    if not UPDATE_PARAMETERS.issuperset(params):
        return None
    return_values = params.get("ReturnValues", "NONE")
    if return_values not in ("NONE", "ALL_NEW", "ALL_OLD"):
        return None
    on_failure = params.get("ReturnValuesOnConditionCheckFailure", "NONE")
    if on_failure not in ("NONE", "ALL_OLD"):
        return None
    table = _table(backend, params.get("TableName"))
    key = params.get("Key")
    expression = params.get("UpdateExpression")
    if table is None or not isinstance(key, dict) or not isinstance(expression, str):
        return None
    shape = _shape(table)
    if len(key) != len(shape.table_keys) or not shape.table_keys.issuperset(key):
        return None
    for name, value in key.items():
        if not _plain_key_value(shape, name, value):
            return None
    if expression != expression.strip():
        return None
    plan = moto_updates.plan_for(expression)
    if plan is None:
        return None
    maps = _placeholders(params)
    parsed = _condition(params, *maps) if maps is not None else None
    if maps is None or parsed is None:
        return None
    names, values = maps
    condition, names_found, values_found = parsed
    names_used = {written for _, (how, written), _ in plan if how == "#"}
    names_used.update(names_found)
    values_used = {placeholder for _, _, placeholder in plan if placeholder is not None}
    values_used.update(values_found)
    if not names_used.issuperset(names) or not values_used.issuperset(values):
        return None
    plain = moto_updates.prepare(backend, table.name, key, expression, names, values, table=table)
    if plain is None:
        return None
    with whole_operation() as store:
        current = moto_updates.stored_item(table, plain.hash_value, plain.range_value)
        old = current.to_json()["Attributes"] if return_values == "ALL_OLD" and current is not None else None
        item = moto_updates.apply(plain, lambda: condition, on_failure, current)
        if item is None:
            return None
        new = item.to_json()["Attributes"]
        if store is not None:
            recorded_put(store, table.name, key, new)
        answer: dict[str, Any] = {"ConsumedCapacity": {"TableName": table.name, "CapacityUnits": 0.5}}
        if return_values == "ALL_NEW":
            answer["Attributes"] = new  # fresh dicts (the journal has already encoded its record)
        elif return_values == "ALL_OLD" and old:
            answer["Attributes"] = old
    return answer
