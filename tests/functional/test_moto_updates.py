"""The local stack's fast `UpdateItem` (orbital.local.moto_updates) against moto's own: the same script of updates
runs through both on twin tables, and every answer, every error and the tables after each step are the same. The
plain expressions the repositories send take the fast way; the rest are handed to moto."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
import pytest
from moto.dynamodb.models import dynamodb_backends
from orbital.local import moto_updates

INDEX_KEYS = ("GSI1PK", "GSI1SK")
BIG = "x" * 250_000


def _table(client: Any, name: str) -> None:
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": a, "AttributeType": "S"} for a in ("PK", "SK", *INDEX_KEYS)],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "GSI1",
                "KeySchema": [
                    {"AttributeName": "GSI1PK", "KeyType": "HASH"},
                    {"AttributeName": "GSI1SK", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )


def _key(pk: str, sk: str = "META") -> dict[str, Any]:
    return {"PK": {"S": pk}, "SK": {"S": sk}}


# (key, expression, names, values, condition, return values on a failed condition, expected way)
Step = tuple[dict[str, Any], str, dict[str, str], dict[str, Any], str | None, str | None, str]

PLAIN = "SET #s0 = :s0, #s1 = :s1 REMOVE GSI1PK, GSI1SK"
CLAIM_VALUES = {":pending": {"S": "pending"}, ":s0": {"S": "done"}, ":s1": {"S": '{"result":1}'}}
SCRIPT: list[Step] = [
    # upserts, overwrites, the claim shape of a deferred call (its condition passing, then failing)
    (
        _key("a"),
        "SET #s0 = :s0, #s1 = :s1",
        {"#s0": "st", "#s1": "GSI1PK"},
        {":s0": {"S": "pending"}, ":s1": {"S": "node#1"}},
        None,
        None,
        "fast",
    ),
    (_key("a"), "SET #s0 = :s0", {"#s0": "GSI1SK"}, {":s0": {"S": "2026"}}, "attribute_exists(PK)", None, "fast"),
    (_key("a"), PLAIN, {"#s0": "st", "#s1": "out"}, CLAIM_VALUES, "st = :pending", None, "fast"),
    (_key("a"), PLAIN, {"#s0": "st", "#s1": "out"}, CLAIM_VALUES, "st = :pending", None, "fast"),
    (_key("a"), PLAIN, {"#s0": "st", "#s1": "out"}, CLAIM_VALUES, "st = :pending", "ALL_OLD", "fast"),
    (_key("absent"), PLAIN, {"#s0": "st", "#s1": "out"}, CLAIM_VALUES, "st = :pending", "ALL_OLD", "fast"),
    (_key("b"), "SET #s0 = :s0", {"#s0": "n"}, {":s0": {"S": "x"}}, "attribute_not_exists(PK)", None, "fast"),
    (_key("b"), "SET #s0 = :s0", {"#s0": "n"}, {":s0": {"S": "y"}}, "attribute_not_exists(PK)", None, "fast"),
    # counters: absent, present, decimals, with a SET beside
    (_key("c"), "ADD #a0 :a0", {"#a0": "n"}, {":a0": {"N": "1"}}, None, None, "fast"),
    (_key("c"), "ADD #a0 :a0", {"#a0": "n"}, {":a0": {"N": "41"}}, None, None, "fast"),
    (
        _key("c"),
        "SET #s0 = :s0 ADD #a0 :a0",
        {"#s0": "at", "#a0": "f"},
        {":s0": {"N": "7"}, ":a0": {"N": "1.5"}},
        None,
        None,
        "fast",
    ),
    (_key("c"), "ADD #a0 :a0", {"#a0": "f"}, {":a0": {"N": "-0.25"}}, None, None, "fast"),
    # every kind of value; removing what is not there; a name written in the expression
    (
        _key("d"),
        "SET #s0 = :s0, #s1 = :s1, #s2 = :s2, #s3 = :s3, #s4 = :s4",
        {"#s0": "m", "#s1": "l", "#s2": "nul", "#s3": "yes", "#s4": "ss"},
        {
            ":s0": {"M": {"k": {"S": "v"}, "n": {"M": {"d": {"N": "1"}}}}},
            ":s1": {"L": [{"S": "x"}, {"N": "2"}]},
            ":s2": {"NULL": True},
            ":s3": {"BOOL": False},
            ":s4": {"SS": ["p", "q"]},
        },
        None,
        None,
        "fast",
    ),
    (_key("d"), "REMOVE gone, GSI1PK", {}, {}, None, None, "fast"),
    (_key("d"), "SET blank = :v", {}, {":v": {"S": ""}}, None, None, "fast"),
    # what moto refuses, from the text: two SET clauses, a key attribute, overlapping paths, a reserved word
    (
        _key("e"),
        "SET #a = :a SET #b = :b",
        {"#a": "a", "#b": "b"},
        {":a": {"S": "1"}, ":b": {"S": "2"}},
        None,
        None,
        "moto",
    ),
    (_key("e"), "SET #s0 = :s0", {"#s0": "PK"}, {":s0": {"S": "moved"}}, None, None, "moto"),
    (
        _key("e"),
        "SET #s0 = :s0, #s1 = :s1",
        {"#s0": "x", "#s1": "x"},
        {":s0": {"S": "1"}, ":s1": {"S": "2"}},
        None,
        None,
        "moto",
    ),
    (_key("e"), "REMOVE size", {}, {}, None, None, "moto"),
    # … and from the values: an index key of the wrong type or empty, a placeholder without a value or a name
    (_key("f"), "SET #s0 = :s0", {"#s0": "GSI1PK"}, {":s0": {"N": "1"}}, None, None, "moto"),
    (_key("f"), "SET #s0 = :s0", {"#s0": "GSI1SK"}, {":s0": {"S": ""}}, None, None, "moto"),
    (_key("f"), "SET #s0 = :s0", {"#s0": "a"}, {":other": {"S": "1"}}, None, None, "moto"),
    (_key("f"), "SET #s0 = :s0", {"#zz": "a"}, {":s0": {"S": "1"}}, None, None, "moto"),
    # ADD of something that is not a number, or to something that is not one (after a SET: moto keeps the SET)
    (_key("c"), "ADD #a0 :a0", {"#a0": "tags"}, {":a0": {"SS": ["t"]}}, None, None, "moto"),
    (
        _key("c"),
        "SET #s0 = :s0 ADD #a0 :a0",
        {"#s0": "z", "#a0": "at2"},
        {":s0": {"S": "q"}, ":a0": {"N": "1"}},
        None,
        None,
        "fast",
    ),
    (_key("c"), "SET #s0 = :s0", {"#s0": "word"}, {":s0": {"S": "w"}}, None, None, "fast"),
    (
        _key("c"),
        "SET #s0 = :s0 ADD #a0 :a0",
        {"#s0": "z", "#a0": "word"},
        {":s0": {"S": "r"}, ":a0": {"N": "1"}},
        None,
        None,
        "moto",
    ),
    # shapes that are not plain
    (_key("g"), "SET n = :one", {}, {":one": {"N": "1"}}, None, None, "fast"),
    (_key("g"), "SET n = n + :one", {}, {":one": {"N": "1"}}, None, None, "moto"),
    (
        _key("g"),
        "SET l = list_append(if_not_exists(l, :e), :v)",
        {},
        {":e": {"L": []}, ":v": {"L": [{"S": "1"}]}},
        None,
        None,
        "moto",
    ),
    (_key("g"), "SET m = :m", {}, {":m": {"M": {}}}, None, None, "fast"),
    (_key("g"), "SET m.x = :v", {}, {":v": {"S": "deep"}}, None, None, "moto"),
    (_key("g"), "SET a = if_not_exists(a, :v)", {}, {":v": {"S": "first"}}, None, None, "moto"),
    (_key("g"), "SET a = n", {}, {}, None, None, "moto"),
    (_key("g"), "DELETE tags :t", {}, {":t": {"SS": ["t"]}}, None, None, "moto"),
    # the size limit: the first big value fits, the second does not (moto keeps what it set before failing)
    (_key("h"), "SET #s0 = :s0", {"#s0": "big"}, {":s0": {"S": BIG}}, None, None, "fast"),
    (
        _key("h"),
        "SET #s0 = :s0, #s1 = :s1",
        {"#s0": "small", "#s1": "big2"},
        {":s0": {"S": "s"}, ":s1": {"S": BIG}},
        None,
        None,
        "fast",
    ),
    # a key without its sort key
    ({"PK": {"S": "a"}}, "SET #s0 = :s0", {"#s0": "x"}, {":s0": {"S": "1"}}, None, None, "moto"),
]


def _contents(backend: Any, name: str) -> list[dict[str, Any]]:
    table = backend.get_table(name)
    items = [item.to_json()["Attributes"] for part in table.items.values() for item in part.values()]
    return sorted(items, key=lambda item: (item["PK"]["S"], item["SK"]["S"]))


def _outcome(update: Callable[..., Any], backend: Any, name: str, step: Step) -> tuple[str, Any]:
    key, expression, names, values, condition, on_failure, _ = step
    try:
        item = update(
            backend,
            name,
            key,
            update_expression=expression,
            expression_attribute_names=names,
            expression_attribute_values=values,
            condition_expression=condition,
            return_values_on_condition_check_failure=on_failure,
        )
    except Exception as exc:
        return "error", (type(exc).__name__, str(exc), getattr(exc, "item", None))
    return "item", item.to_json()


def test_fast_update_answers_as_moto(aws: None) -> None:
    client = boto3.client("dynamodb", region_name="us-east-1")
    _table(client, "fast")
    _table(client, "moto")
    backend = dynamodb_backends["123456789012"]["us-east-1"]
    original = moto_updates.moto_update_item()
    handed: list[str] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        handed.append(kwargs["update_expression"])
        return original(*args, **kwargs)

    fast = moto_updates.fast_update_item(counted)
    for step in SCRIPT:
        before = len(handed)
        got = _outcome(fast, backend, "fast", step)
        want = _outcome(original, backend, "moto", step)
        assert got == want, step[1]
        assert _contents(backend, "fast") == _contents(backend, "moto"), step[1]
        assert ("moto" if len(handed) > before else "fast") == step[-1], step[1]
    # the script covers what it means to: failures of both kinds on both ways
    outcomes = [_outcome(original, backend, "moto", step)[0] for step in SCRIPT]
    assert "error" in outcomes and "item" in outcomes


def test_installed_under_the_lock_and_the_journal(aws: None) -> None:
    """The stack's patches call it first, so `update_item` on the class is a wrapper whose innermost call is the
    fast one, and installing again changes nothing."""
    from moto.dynamodb.models import DynamoDBBackend
    from orbital.local import stack

    stack.make_moto_atomic(step_functions=False)
    installed = DynamoDBBackend.update_item
    moto_updates.fast_update_items()
    stack.make_moto_atomic(step_functions=False)
    assert DynamoDBBackend.update_item is installed
    inner = installed
    while not getattr(inner, "_orbital_fast", False):
        defaults = inner.__defaults__ or ()  # the wrappers keep what they wrap as their `_method` default
        wrapped = [d for d in defaults if callable(d)] + [
            v for v in (inner.__kwdefaults__ or {}).values() if callable(v)
        ]
        assert wrapped, "no fast update_item under the wrappers"
        inner = wrapped[0]
    assert moto_updates.moto_update_item() is not inner


@pytest.mark.parametrize(
    ("expression", "plan"),
    [
        (
            PLAIN,
            [
                ("set", ("#", "#s0"), ":s0"),
                ("set", ("#", "#s1"), ":s1"),
                ("remove", ("", "GSI1SK"), None),
                ("remove", ("", "GSI1PK"), None),
            ],
        ),
        ("SET #s0 = :s0 ADD #a0 :a0", [("set", ("#", "#s0"), ":s0"), ("add", ("#", "#a0"), ":a0")]),
        ("REMOVE #r", [("remove", ("#", "#r"), None)]),
    ],
)
def test_plain_expressions_have_a_plan(expression: str, plan: list[Any]) -> None:
    assert moto_updates.plan_of(expression) == plan


def test_other_expressions_have_none() -> None:
    for expression in ("SET a = a + :x", "SET a.b = :x", "SET a[0] = :x", "SET a = :x DELETE s :y", "SET = oops", ""):
        assert moto_updates.plan_of(expression) is None, expression
