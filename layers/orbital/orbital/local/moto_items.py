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

What depends only on a write's shape (its table, parameter names, attribute or key names, expressions, name map,
value placeholders and return options) is checked once per shape and kept as a plan (docs/adr/0023); each call
checks its own values. Anything else returns None before anything is read or changed, and the caller hands the call
to moto's handler, which answers (or refuses) it as it always has. The condition is moto's parser's (parsed once per
the values it uses), the stored item is moto's `Item` of moto's `DynamoType`s, the journal records the item as moto
stores it, and the answer is the handler's to the letter; `tests/functional/test_moto_items.py` runs the same
script both ways on twin tables and compares every answer, error, stored item and journal record.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from moto.dynamodb.comparisons import create_condition_expression_parser
from moto.dynamodb.exceptions import ConditionalCheckFailed
from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict
from moto.dynamodb.models.utilities import bytesize

from orbital.local import moto_updates
from orbital.local.persistence import recorded_put, whole_operation

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
    text = params.get("ConditionExpression")
    if text is not None and not isinstance(text, str):
        return None
    parser = create_condition_expression_parser(text, names, values)
    try:
        return parser.parse(), tuple(parser.expr_attr_names_found), tuple(parser.expr_attr_values_found)
    except Exception:
        return None


# --- plans: what a write's shape allows, worked out once per shape ----------------------------------------------


class _Plan:
    """What the shape of a write (its table, parameter names, expressions, name map, value placeholders, and the
    attribute names of an item or a key) allows, checked once: only its values are checked on each call. A plan is
    for one backend and one table object; a table created again makes a new one."""

    __slots__ = ("actions", "attrs", "backend", "cond_values", "conditions", "on_failure", "return_values", "shape",
                 "table")  # fmt: skip

    def __init__(self, backend: Any, table: Any, shape: _Shape) -> None:
        self.backend = backend
        self.table = table
        self.shape = shape
        self.return_values = "NONE"
        self.on_failure = "NONE"
        self.attrs: list[tuple[str, str | None, int]] = []
        """An item's attributes in order: (name, the declared type of a key attribute or None, its size limit)."""
        self.actions: list[tuple[str, str, str | None]] = []
        """An update's actions with their names filled in: (kind, attribute name, value placeholder)."""
        self.cond_values: tuple[str, ...] = ()
        """The value placeholders the condition uses."""
        self.conditions: dict[tuple[Any, ...], Any] = {}
        """The parsed condition per values of `cond_values` (evaluating it changes nothing)."""


PLANS_KEPT = 256
CONDITIONS_KEPT = 64
CONDITION_KEY_CHARS = 1024
_plans: dict[tuple[Any, ...], _Plan] = {}
_plans_lock = threading.Lock()


def _signature(kind: str, backend: Any, params: dict[str, Any], fields: Any) -> tuple[Any, ...] | None:
    """The shape of a write: everything its plan depends on. None if it has no hashable shape (moto's handler)."""
    names = params.get("ExpressionAttributeNames")
    values = params.get("ExpressionAttributeValues")
    try:
        signature = (
            kind,
            id(backend),
            params.get("TableName"),
            tuple(params),
            tuple(fields) if type(fields) is dict else fields,
            params.get("UpdateExpression"),
            params.get("ConditionExpression"),
            tuple(names.items()) if type(names) is dict else names,
            tuple(values) if type(values) is dict else values,
            params.get("ReturnValues"),
            params.get("ReturnValuesOnConditionCheckFailure"),
        )
        hash(signature)
    except TypeError:
        return None
    return signature


def _planned(kind: str, backend: Any, params: dict[str, Any], fields: Any, make: Any) -> _Plan | None:
    """The plan of this write's shape (made by `make` the first time), or None where moto's handler answers."""
    signature = _signature(kind, backend, params, fields)
    if signature is None:
        return None
    plan = _plans.get(signature)
    if plan is not None and plan.backend is backend:
        table = plan.table
        if backend.tables.get(table.name) is table and table.stream_shard is None:
            return plan
    plan = make(backend, params)
    if plan is not None:
        with _plans_lock:
            if len(_plans) >= PLANS_KEPT:
                _plans.clear()
            _plans[signature] = plan
    return plan


def _value_maps(params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A planned write's name and value maps (their placeholders are the plan's), or None unless every value is
    plain."""
    values = params.get("ExpressionAttributeValues", {})
    if values and not _plain_values(values):
        return None
    return params.get("ExpressionAttributeNames", {}), values


def _plain_values(values: dict[str, Any]) -> bool:
    for value in values.values():
        if type(value) is not dict or len(value) != 1:
            return False
        ((type_, content),) = value.items()
        if type_ == "S":
            if type(content) is not str:
                return False
        elif not _plain_value(value):
            return False
    return True


def _parsed_condition(plan: _Plan, params: dict[str, Any], names: dict[str, Any], values: dict[str, Any]) -> Any:
    """The write's parsed condition (moto's), kept per the values it uses; None where moto would refuse it."""
    if not plan.cond_values:
        found = plan.conditions.get(())
        if found is not None:
            return found
        key: tuple[Any, ...] | None = ()
    else:
        key = tuple(next(iter(values[p].items())) for p in plan.cond_values)
        if sum(len(str(content)) for _, content in key) > CONDITION_KEY_CHARS:
            key = None
        else:
            found = plan.conditions.get(key)
            if found is not None:
                return found
    parsed = _condition(params, names, values)
    if parsed is None:
        return None
    if key is not None:
        if len(plan.conditions) >= CONDITIONS_KEPT:
            plan.conditions.clear()
        plan.conditions[key] = parsed[0]
    return parsed[0]


def _plan_condition(plan: _Plan, params: dict[str, Any], names: dict[str, Any], values: dict[str, Any],
                    names_used: set[str], values_used: set[str] | None) -> bool:  # fmt: skip
    """Parse the condition once to learn the placeholders it uses; False unless every name placeholder given (and,
    with `values_used`, every value placeholder) is used by the condition or the expression: moto refuses unused
    ones."""
    parsed = _condition(params, names, values)
    if parsed is None:
        return False
    _, names_found, values_found = parsed
    if not names_used.union(names_found).issuperset(names):
        return False
    if values_used is not None and not values_used.union(values_found).issuperset(values):
        return False
    plan.cond_values = tuple(dict.fromkeys(values_found))
    return True


def _typed(type_: str, content: Any) -> Any:
    """moto's `DynamoType` of a plain value: its type is the value's one key and its value that key's content, which
    is all `DynamoType(value)` sets for one."""
    typed = object.__new__(DynamoType)
    typed.type = type_
    typed.value = content
    return typed


def _attributes(item: Any) -> dict[str, Any]:
    """`item.to_json()["Attributes"]` (moto's rendering of a stored item), directly for an item of plain values (a
    string or a number is a `str`, a boolean or a null a `bool`): a value of another kind renders the whole item
    moto's way."""
    out: dict[str, Any] = {}
    for name, value in item.attrs.items():
        content = value.value
        kind = type(content)
        if kind is not str and kind is not bool:
            return item.to_json()["Attributes"]
        out[name] = {value.type: content}
    return out


# --- PutItem ----------------------------------------------------------------------------------------------------


def _put_plan(backend: Any, params: dict[str, Any]) -> _Plan | None:
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
    maps = _placeholders(params)
    if maps is None:
        return None
    names, values = maps
    plan = _Plan(backend, table, shape)
    plan.return_values = return_values
    for name in item:
        if not isinstance(name, str) or not name:
            return None
        if name in shape.key_attrs:
            plan.attrs.append((name, shape.types.get(name), shape.max_bytes.get(name, 0)))
        else:
            plan.attrs.append((name, None, 0))
    if not _plan_condition(plan, params, names, values, set(), None):
        return None
    return plan


def _typed_item(plan: _Plan, item: dict[str, Any]) -> dict[str, Any] | None:
    """The item's attributes as moto's `DynamoType`s, or None unless every attribute is plain (a key attribute a
    non-empty value of its declared type, in size) and the item is within `MAX_ITEM_BYTES` as moto counts it. Its
    size is counted only when a bound of it (four bytes a character) could pass the limit."""
    new = object.__new__
    attrs: dict[str, Any] = {}
    bound = 0
    for (name, key_type, max_bytes), value in zip(plan.attrs, item.values(), strict=True):
        if type(value) is not dict or len(value) != 1:
            return None
        ((type_, content),) = value.items()
        if key_type is not None:
            if type_ != key_type or not content:
                return None
            if type_ == "S":
                if type(content) is not str or (4 * len(content) > max_bytes and len(content.encode()) > max_bytes):
                    return None
            elif type_ != "N" or type(content) is not str or PLAIN_NUMBER.fullmatch(content) is None:
                return None
        elif (type_ != "S" or type(content) is not str) and not _plain_value(value):
            return None
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
    item = params.get("Item")
    plan = _planned("put", backend, params, item, _put_plan)
    if plan is None:
        return None
    assert isinstance(item, dict)
    attrs = _typed_item(plan, item)
    if attrs is None:
        return None
    maps = _value_maps(params)
    if maps is None:
        return None
    names, values = maps
    text = params.get("ConditionExpression")
    condition = _parsed_condition(plan, params, names, values) if text else None
    if text and condition is None:
        return None
    table, shape = plan.table, plan.shape
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
        if condition is not None and not condition.expr(current):
            raise ConditionalCheckFailed
        if range_value is not None:
            table.items[hash_value][range_value] = stored
        else:
            table.items[hash_value] = stored
        if store is not None:  # the item as moto stores it is the one given (plain values only)
            recorded_put(store, table.name, key, item)
        if plan.return_values == "ALL_OLD" and current is not None:
            return {"Attributes": _attributes(current)}
    return {}


# --- UpdateItem -------------------------------------------------------------------------------------------------


def _update_plan(backend: Any, params: dict[str, Any]) -> _Plan | None:
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
    if expression != expression.strip():
        return None
    steps = moto_updates.plan_for(expression)
    maps = _placeholders(params)
    if steps is None or maps is None:
        return None
    names, values = maps
    plan = _Plan(backend, table, shape)
    plan.return_values, plan.on_failure = return_values, on_failure
    for kind, (how, written), placeholder in steps:
        name = names.get(written) if how == "#" else written
        if not isinstance(name, str) or (placeholder is not None and placeholder not in values):
            return None
        plan.actions.append((kind, name, placeholder))
    if not moto_updates.passes_text_checks(expression, names, table):
        return None
    names_used = {written for _, (how, written), _ in steps if how == "#"}
    values_used = {placeholder for _, _, placeholder in steps if placeholder is not None}
    if not _plan_condition(plan, params, names, values, names_used, values_used):
        return None
    return plan


def _update_actions(plan: _Plan, values: dict[str, Any]) -> list[Any] | None:
    """The plan's actions with their values, or None where moto has something to say about a value
    (`moto_updates.refuses_value`)."""
    types, key_attrs = plan.shape.types, plan.shape.key_attrs
    out: list[Any] = []
    for kind, name, placeholder in plan.actions:
        if placeholder is None:
            out.append((kind, name, None))
            continue
        raw = values[placeholder]
        ((type_, content),) = raw.items()
        if moto_updates.refuses_value(kind, name, type_, content, types, key_attrs):
            return None
        out.append((kind, name, raw))
    return out


def update_item(backend: Any, params: dict[str, Any]) -> dict[str, Any] | None:
    """Answer a plain `UpdateItem` as moto's handler would, or None (nothing done) for moto's handler to answer."""
    key = params.get("Key")
    plan = _planned("update", backend, params, key, _update_plan)
    if plan is None:
        return None
    assert isinstance(key, dict)
    shape = plan.shape
    for name, value in key.items():
        if not _plain_key_value(shape, name, value):
            return None
    maps = _value_maps(params)
    if maps is None:
        return None
    names, values = maps
    actions = _update_actions(plan, values)
    if actions is None:
        return None
    condition = _parsed_condition(plan, params, names, values)
    if condition is None:
        return None
    table = plan.table
    hash_value = _typed(*next(iter(key[shape.hash_attr].items())))
    range_value = _typed(*next(iter(key[shape.range_attr].items()))) if shape.range_attr is not None else None
    plain = moto_updates.Plain(table, hash_value, range_value, actions)
    return_values = plan.return_values
    with whole_operation() as store:
        current = moto_updates.stored_item(table, hash_value, range_value)
        old = _attributes(current) if return_values == "ALL_OLD" and current is not None else None
        item = moto_updates.apply(plain, lambda: condition, plan.on_failure, current)
        if item is None:
            return None
        new = _attributes(item)
        if store is not None:
            recorded_put(store, table.name, key, new)
        answer: dict[str, Any] = {"ConsumedCapacity": {"TableName": table.name, "CapacityUnits": 0.5}}
        if return_values == "ALL_NEW":
            answer["Attributes"] = new  # fresh dicts (the journal has already encoded its record)
        elif return_values == "ALL_OLD" and old:
            answer["Attributes"] = old
    return answer
