"""moto's `UpdateItem` without its update-expression validator, for the plain expressions the repositories send.

Every `UpdateExpression` the gateway sends is built by `orbital.store.table.Table.update`: top-level
`SET #sN = :sN`, `ADD #aN :aN` and `REMOVE GSI1PK, GSI1SK`. moto applies one by deep-copying the expression's syntax
tree and walking it ten times (validators and resolvers with `isinstance` checks at every node): about three
quarters of the 1 ms an `UpdateItem` costs moto's backend here (0.07 ms this way), twice per `tool.invoke` (the
claim, and the execution's register step).

`fast_update_items` puts a narrower `DynamoDBBackend.update_item` in front of moto's. For an expression made only of
top-level assignments of a value, additions of a number and removals (no paths into maps or lists, no functions, no
arithmetic) it applies the actions to the stored item itself, in moto's order and through moto's own item types, so
the item, the answer and the size limit are moto's. Whatever depends on the expression's text alone (one clause of
each kind, no overlapping paths, no key attribute updated, no reserved word) is checked by moto's own validators,
once per expression, table and name map. Anything else — another shape, a placeholder without a value, a type
that does not match an index key's definition, an empty string for an index key, an `ADD` to something that is not
a number, the legacy `Expected` or `AttributeUpdates` parameters, a table with a stream — goes to moto's
`update_item` unchanged, which gives the same error or result it always has. The condition is moto's parser's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

from moto.dynamodb.exceptions import ConditionalCheckFailed, ItemSizeTooLarge, ItemSizeToUpdateTooLarge
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.utilities import bytesize

_install_lock = threading.Lock()
_moto_update_item: Callable[..., Any] | None = None  # moto's own, once the fast one is installed
PLANS_KEPT = 1024
SIZE_BOUND = 400_000
"""Below moto's item size limit (a little above DynamoDB's 400 KB): an update that could come near it is applied
value by value through moto's size-limited map."""

# One action of a plain update expression: (kind, target, value placeholder). `target` is ("#", placeholder) for a
# name given in ExpressionAttributeNames, ("", name) for a name written in the expression.
Action = tuple[str, tuple[str, str], str | None]


def fast_update_items() -> None:
    """Install the fast `update_item` under every other patch of it. The patches that wrap it (the atomic lock, the
    journal) call this first, so it is always the innermost; it is installed once per process."""
    global _moto_update_item
    with _install_lock:
        if _moto_update_item is not None:
            return
        from moto.dynamodb.models import DynamoDBBackend

        _moto_update_item = DynamoDBBackend.update_item
        DynamoDBBackend.update_item = fast_update_item(_moto_update_item)  # type: ignore[method-assign]


_plans: dict[str, list[Action] | None] = {}


def plan_for(expression: str) -> list[Action] | None:
    """`plan_of(expression)`, worked out once per text (for the first `PLANS_KEPT` texts)."""
    if expression in _plans:
        return _plans[expression]
    plan = plan_of(expression)
    if len(_plans) < PLANS_KEPT:
        _plans[expression] = plan
    return plan


def moto_update_item() -> Callable[..., Any]:
    """moto's `DynamoDBBackend.update_item`, as it was before `fast_update_items`."""
    fast_update_items()
    assert _moto_update_item is not None
    return _moto_update_item


def plan_of(expression: str) -> list[Action] | None:
    """The actions of `expression` in the order moto runs them, or None if it is not a plain expression (or does
    not parse: moto's update_item raises the error)."""
    from moto.dynamodb.parsing.ast_nodes import (  # type: ignore[attr-defined]
        ExpressionAttribute,
        ExpressionAttributeName,
        ExpressionAttributeValue,
        UpdateExpressionAddAction,
        UpdateExpressionPath,
        UpdateExpressionRemoveAction,
        UpdateExpressionSetAction,
        UpdateExpressionValue,
    )
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]
    from moto.dynamodb.parsing.reserved_keywords import ReservedKeywords

    try:
        tree = UpdateExpressionParser.make(expression)
    except Exception:
        return None
    tree.normalize()
    reserved = ReservedKeywords.get_reserved_keywords()

    def target(path: Any) -> tuple[str, str] | None:
        if type(path) is not UpdateExpressionPath or len(path.children) != 1:
            return None
        element = path.children[0]
        if type(element) is ExpressionAttributeName:
            return ("#", element.get_attribute_name_placeholder())
        if type(element) is ExpressionAttribute:
            name = element.get_attribute_name()
            return None if name.upper() in reserved else ("", name)
        return None

    def value(node: Any) -> str | None:
        return node.get_value_name() if type(node) is ExpressionAttributeValue else None

    actions: list[Action] = []
    for action in tree.children or []:
        kids = action.children
        kind = type(action)
        if kind is UpdateExpressionSetAction and len(kids) == 2:
            where, what = target(kids[0]), kids[1]
            placeholder = (
                value(what.children[0]) if type(what) is UpdateExpressionValue and len(what.children) == 1 else None
            )
            if where is None or placeholder is None:
                return None
            actions.append(("set", where, placeholder))
        elif kind is UpdateExpressionAddAction and len(kids) == 2:
            where, placeholder = target(kids[0]), value(kids[1])
            if where is None or placeholder is None:
                return None
            actions.append(("add", where, placeholder))
        elif kind is UpdateExpressionRemoveAction and len(kids) == 1:
            where = target(kids[0])
            if where is None:
                return None
            actions.append(("remove", where, None))
        else:
            return None
    return actions or None


def _size_bound(pairs: Iterable[tuple[str, Any]], bytesize: Callable[[str], int]) -> int:
    """At least what moto counts for these attributes: a string's characters are at most 4 bytes each in UTF-8."""
    bound = 0
    for name, value in pairs:
        kind = value.type
        if (kind == "S" or kind == "N") and isinstance(value.value, str):
            bound += 4 * (len(name) + len(value.value))
        elif kind == "BOOL" or kind == "NULL":
            bound += 4 * len(name) + 1
        else:
            bound += int(bytesize(name) + value.size())
    return bound


def _set_at_once(attrs: Any, actions: list[Any], dynamo_type: Any) -> bool:
    """Apply `actions` made only of `SET` and `REMOVE` without moto's size-limited map summing the whole item again
    for every value set, when no such sum could reach the item size limit: the item's size now plus every value
    set is a bound on each. False (nothing changed) otherwise, or if a value does not convert: the caller then
    applies them one by one through the map, which raises where moto does."""
    if any(kind == "add" for kind, _, _ in actions):
        return False
    try:
        staged = [(name, dynamo_type(raw) if kind == "set" else None) for kind, name, raw in actions]
        bound = _size_bound(attrs.items(), bytesize)
        bound += _size_bound(((name, value) for name, value in staged if value is not None), bytesize)
    except Exception:
        return False
    if bound > SIZE_BOUND:
        return False
    for name, value in staged:
        if value is None:
            attrs.pop(name, None)
        else:
            dict.__setitem__(attrs, name, value)
    return True


_checked: set[tuple[Any, ...]] = set()  # (expression, names, table key attributes) moto's checks passed for


def passes_text_checks(expression: str, names: dict[str, str], table: Any) -> bool:
    """moto's checks of what the expression's text says, run once for this text, name map and table."""
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]
    from moto.dynamodb.parsing.validators import (
        ActionCountValidator,
        OverlappingPathsValidator,
        UpdateHashRangeKeyValidator,
    )

    key_attrs = _key_facts(table)[2]
    mark = (expression, tuple(names.items()), key_attrs)
    if mark in _checked:
        return True
    tree = UpdateExpressionParser.make(expression)
    try:
        for check in (
            ActionCountValidator(),
            OverlappingPathsValidator(names),
            UpdateHashRangeKeyValidator(list(key_attrs), names),
        ):
            tree = check.traverse(tree)
    except Exception:
        return False  # moto's update_item raises it
    if len(_checked) < PLANS_KEPT:
        _checked.add(mark)
    return True


_facts: dict[int, tuple[Any, dict[str, str], frozenset[str], tuple[str, ...]]] = {}


def _key_facts(table: Any) -> tuple[dict[str, str], frozenset[str], tuple[str, ...]]:
    """The declared type of each key attribute of `table`, the names of its index keys and its own key attributes
    (moto lists them anew on every call), worked out once per table object."""
    known = _facts.get(id(table))
    if known is not None and known[0] is table:
        return known[1], known[2], known[3]
    key_types = {d["AttributeName"]: d["AttributeType"] for d in table.attr}
    index_keys = frozenset(table.attribute_keys)
    key_attrs = tuple(table.table_key_attrs)
    if len(_facts) >= PLANS_KEPT:
        _facts.clear()
    _facts[id(table)] = (table, key_types, index_keys, key_attrs)
    return key_types, index_keys, key_attrs


def _resolved(plan: list[Action], names: dict[str, str], values: dict[str, Any], table: Any) -> list[Any] | None:
    """The plan with names and values filled in, or None where moto has something to say about them."""
    key_types, index_keys, _ = _key_facts(table)
    out: list[Any] = []
    for kind, (how, written), placeholder in plan:
        name = names.get(written) if how == "#" else written
        if name is None:
            return None
        if placeholder is None:
            out.append((kind, name, None))
            continue
        raw = values.get(placeholder)
        if not isinstance(raw, dict) or len(raw) != 1:
            return None
        ((type_, content),) = raw.items()
        if refuses_value(kind, name, type_, content, key_types, index_keys):
            return None
        out.append((kind, name, raw))
    return out


def refuses_value(
    kind: str, name: str, type_: str, content: Any, key_types: dict[str, str], index_keys: Collection[str]
) -> bool:
    """Whether moto has something to say about an action's value: an `ADD` of something else than a number, a key
    attribute set to another type than its declared one, an index key set to an empty string or binary."""
    if kind == "add":
        return type_ != "N"
    if kind != "set":
        return False
    if name in key_types and key_types[name] != type_:
        return True
    return not content and type_ in ("S", "B") and name in index_keys


_UNREAD: Any = object()


def stored_item(table: Any, hash_value: Any, range_value: Any) -> Any:
    """moto's `Table.get_item` for a whole item (no projection): the item stored at the key, or None; read from its
    partitions without adding an empty one for a key that has none."""
    if table.range_key_attr is None:
        return table.items.get(hash_value)
    if range_value is None:
        return table.get_item(hash_value, range_value)  # moto's error for a key without its range part
    part = table.items.get(hash_value)
    return part.get(range_value) if part is not None else None


@dataclass
class Plain:
    """A plain update of one item, its names and values filled in, ready to `apply`."""

    table: Any
    hash_value: Any
    range_value: Any
    actions: list[Any]


def prepare(
    backend: Any,
    table_name: str,
    key: dict[str, Any],
    expression: str,
    names: dict[str, Any],
    values: dict[str, Any],
    *,
    table: Any = None,
) -> Plain | None:
    """The plain update `expression` makes of the item at `key`, or None (nothing read or changed) where moto's own
    `update_item` must answer. Raises moto's error for a table that does not exist. `table`: moto's table of that
    name, if the caller has it already."""
    plan = plan_for(expression) if expression else None
    if plan is None:
        return None
    if table is None:
        table = backend.get_table(table_name)
    if table.stream_shard is not None:
        return None
    hash_attr, range_attr = table.hash_key_attr, table.range_key_attr
    if hash_attr not in key or (range_attr and range_attr not in key):
        return None
    actions = _resolved(plan, names, values, table)
    if actions is None or not passes_text_checks(expression, names, table):
        return None
    range_value = DynamoType(key[range_attr]) if range_attr else None
    return Plain(table, DynamoType(key[hash_attr]), range_value, actions)


def apply(
    plain: Plain,
    condition: Callable[[], Any],
    return_values_on_condition_check_failure: str | None,
    stored: Any = _UNREAD,
) -> Any:
    """Apply a prepared update to the stored item (creating it if absent) if `condition()` (moto's parsed condition)
    holds for it, and return the item; None (nothing changed) where moto's own `update_item` must answer. Raises
    moto's `ConditionalCheckFailed`, or its size error after the actions before the one too large, as moto does.
    `stored` is the item as the caller just read it under the table's lock (None: there is none), if it did."""
    table, hash_value, range_value, actions = plain.table, plain.hash_value, plain.range_value, plain.actions
    item = stored_item(table, hash_value, range_value) if stored is _UNREAD else stored
    if item is not None:
        for kind, name, _ in actions:
            current = item.attrs.get(name) if kind == "add" else None
            if current is not None and current.type != "N":
                return None
    if not condition().expr(item):
        if return_values_on_condition_check_failure == "ALL_OLD" and item is not None:
            raise ConditionalCheckFailed(item=item.to_json()["Attributes"])
        raise ConditionalCheckFailed
    if item is None:
        data = {table.hash_key_attr: {hash_value.type: hash_value.value}}
        if range_value:
            data[table.range_key_attr] = {range_value.type: range_value.value}
        table.put_item(data)
        item = table.get_item(hash_value, range_value)
    attrs = item.attrs
    if _set_at_once(attrs, actions, DynamoType):
        return item
    try:
        for kind, name, raw in actions:
            if kind == "set":
                attrs[name] = DynamoType(raw)
            elif kind == "add":
                current = attrs.get(name)
                attrs[name] = (current if current is not None else DynamoType({"N": "0"})) + DynamoType(raw)
            else:
                attrs.pop(name, None)
    except ItemSizeTooLarge:
        raise ItemSizeToUpdateTooLarge() from None
    return item


def fast_update_item(original: Callable[..., Any]) -> Callable[..., Any]:
    """A `DynamoDBBackend.update_item` that applies plain expressions itself and hands the rest to `original`."""
    from moto.dynamodb.comparisons import create_condition_expression_parser

    def update_item(
        self: Any,
        table_name: str,
        key: dict[str, dict[str, Any]],
        update_expression: str,
        expression_attribute_names: dict[str, Any],
        expression_attribute_values: dict[str, Any],
        attribute_updates: dict[str, Any] | None = None,
        expected: dict[str, Any] | None = None,
        condition_expression: str | None = None,
        return_values_on_condition_check_failure: str | None = None,
    ) -> Any:
        def moto() -> Any:
            return original(
                self,
                table_name,
                key,
                update_expression=update_expression,
                expression_attribute_names=expression_attribute_names,
                expression_attribute_values=expression_attribute_values,
                attribute_updates=attribute_updates,
                expected=expected,
                condition_expression=condition_expression,
                return_values_on_condition_check_failure=return_values_on_condition_check_failure,
            )

        if not update_expression or attribute_updates or expected:
            return moto()
        names = expression_attribute_names or {}
        values = expression_attribute_values or {}
        plain = prepare(self, table_name, key, update_expression, names, values)
        if plain is None:
            return moto()
        item = apply(
            plain,
            lambda: create_condition_expression_parser(condition_expression, names, values).parse(),
            return_values_on_condition_check_failure,
        )
        return moto() if item is None else item

    update_item._orbital_fast = True  # type: ignore[attr-defined]
    return update_item
