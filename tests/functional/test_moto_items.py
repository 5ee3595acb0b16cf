"""The local stack's `PutItem` and `UpdateItem` at moto's backend (orbital.local.moto_items) against moto's own
response handler: the same script runs both ways on twin tables, and every answer, every error, the tables after
each step and the journal records are the same. The shapes the repositories send take the plain way; everything
else is left to moto's handler before anything is read or changed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.dynamodb.models import dynamodb_backends
from moto.dynamodb.responses import DynamoHandler
from orbital.local import journal as jr
from orbital.local import moto_items
from orbital.local.direct import moto_action
from orbital.local.persistence import Persistence, whole_operation
from orbital.local.template import load_template, table_definition

from tests.conftest import BUCKET, ROOT, TABLE

TWIN = f"{TABLE}-twin"
ACCOUNT, REGION = "123456789012", "us-east-1"
BIG = "x" * 250_000


def _key(pk: str, sk: str = "CALL") -> dict[str, Any]:
    return {"PK": {"S": pk}, "SK": {"S": sk}}


def _call(pk: str, **more: Any) -> dict[str, Any]:
    """An item as `Table._encode` writes a pending call."""
    return {
        **_key(pk),
        "d": {"S": json.dumps({"callId": pk, "args": {"x": 1}})},
        "ttl": {"N": "1767225600"},
        "GSI1PK": {"S": "NODECALLS#n1"},
        "GSI1SK": {"S": pk},
        "st": {"S": "pending"},
        **more,
    }


CLAIM = {
    "UpdateExpression": "SET #s0 = :s0, #s1 = :s1 REMOVE GSI1PK, GSI1SK",
    "ConditionExpression": "st = :pending",
    "ExpressionAttributeNames": {"#s0": "st", "#s1": "out"},
    "ExpressionAttributeValues": {":pending": {"S": "pending"}, ":s0": {"S": "done"}, ":s1": {"S": '{"r":1}'}},
}
NEW = "attribute_not_exists(PK)"

# (operation, parameters without TableName, the way it must take)
SCRIPT: list[tuple[str, dict[str, Any], str]] = [
    # what the repositories send: a pending call, its due marker, counters, overwrites, conditions passing/failing
    ("put_item", {"Item": _call("c1"), "ConditionExpression": NEW}, "plain"),
    ("put_item", {"Item": _call("c1"), "ConditionExpression": NEW}, "plain"),
    ("put_item", {"Item": {**_key("DUE#1", "c1"), "d": {"S": "{}"}, "ttl": {"N": "9"}}}, "plain"),
    ("put_item", {"Item": _call("c2", flag={"BOOL": True}, gone={"NULL": True}, blank={"S": ""})}, "plain"),
    ("put_item", {"Item": _call("c2", n={"N": "-12.50"}), "ReturnValues": "ALL_OLD"}, "plain"),
    ("put_item", {"Item": _call("c3"), "ReturnValues": "ALL_OLD"}, "plain"),
    (
        "put_item",
        {
            "Item": _call("c3", v={"N": "2"}),
            "ConditionExpression": "v = :v",
            "ExpressionAttributeValues": {":v": {"N": "1"}},
        },
        "plain",
    ),
    (
        "put_item",
        {
            "Item": _call("c3", v={"N": "2"}),
            "ConditionExpression": "attribute_exists(#p) AND st = :p",
            "ExpressionAttributeNames": {"#p": "PK"},
            "ExpressionAttributeValues": {":p": {"S": "pending"}},
            "ReturnValues": "ALL_OLD",
        },
        "plain",
    ),
    ("put_item", {"Item": _call("big", blob={"S": BIG})}, "plain"),
    ("update_item", {"Key": _key("c1"), **CLAIM, "ReturnValues": "ALL_OLD"}, "plain"),
    ("update_item", {"Key": _key("c1"), **CLAIM, "ReturnValues": "ALL_OLD"}, "plain"),
    ("update_item", {"Key": _key("absent"), **CLAIM, "ReturnValues": "ALL_OLD"}, "plain"),
    (
        "update_item",
        {
            "Key": _key("COUNTER", "n"),
            "UpdateExpression": "ADD #a0 :a0",
            "ExpressionAttributeNames": {"#a0": "n"},
            "ExpressionAttributeValues": {":a0": {"N": "1"}},
            "ReturnValues": "ALL_NEW",
        },
        "plain",
    ),
    (
        "update_item",
        {
            "Key": _key("COUNTER", "n"),
            "UpdateExpression": "ADD #a0 :a0",
            "ExpressionAttributeNames": {"#a0": "n"},
            "ExpressionAttributeValues": {":a0": {"N": "41"}},
            "ReturnValues": "ALL_NEW",
        },
        "plain",
    ),
    (
        "update_item",
        {
            "Key": _key("c2"),
            "UpdateExpression": "SET #s0 = :s0",
            "ConditionExpression": "attribute_exists(PK)",
            "ExpressionAttributeNames": {"#s0": "seen"},
            "ExpressionAttributeValues": {":s0": {"S": "yes"}},
        },
        "plain",
    ),
    (
        "update_item",
        {
            "Key": _key("c2"),
            "UpdateExpression": "SET #s0 = :s0",
            "ExpressionAttributeNames": {"#s0": "seen"},
            "ExpressionAttributeValues": {":s0": {"M": {"a": {"L": [{"S": "x"}]}}}},
        },
        "moto",  # only plain values (what `Table` sends)
    ),
    ("update_item", {"Key": _key("c2"), "UpdateExpression": "REMOVE seen, blank", "ReturnValues": "ALL_NEW"}, "plain"),
    (
        "update_item",
        {
            "Key": _key("big"),
            "UpdateExpression": "SET #s0 = :s0, #s1 = :s1",
            "ExpressionAttributeNames": {"#s0": "small", "#s1": "blob2"},
            "ExpressionAttributeValues": {":s0": {"S": "s"}, ":s1": {"S": BIG}},
            "ReturnValues": "ALL_NEW",
        },
        "plain",  # too large after the first SET: moto keeps it and fails, as moto's own update does
    ),
    # what moto's handler answers (or refuses) itself
    ("put_item", {"Item": _call("h1"), "ReturnValues": "ALL_NEW"}, "moto"),
    ("put_item", {"Item": _call("h1"), "ReturnConsumedCapacity": "TOTAL"}, "moto"),
    ("put_item", {"Item": _call("h2"), "Expected": {"PK": {"Exists": False}}}, "moto"),
    ("put_item", {"Item": _call("h3"), "ConditionExpression": NEW, "ExpressionAttributeNames": {"#x": "x"}}, "moto"),
    ("put_item", {"Item": _call("h3"), "ConditionExpression": NEW, "ExpressionAttributeValues": {}}, "moto"),
    (
        "put_item",
        {"Item": _call("h3"), "ConditionExpression": "v = v1", "ExpressionAttributeValues": {"v1": {"N": "1"}}},
        "moto",
    ),
    ("put_item", {"Item": _call("h3"), "ConditionExpression": "v = :missing"}, "moto"),
    ("put_item", {"Item": _call("h3"), "ConditionExpression": "v = = 1"}, "moto"),
    ("put_item", {"Item": {**_call("h4"), "PK": {"S": ""}}}, "moto"),
    ("put_item", {"Item": {**_call("h4"), "PK": {"S": "p" * 2100}}}, "moto"),
    ("put_item", {"Item": {**_call("h4"), "GSI1PK": {"S": ""}}}, "moto"),
    ("put_item", {"Item": {**_call("h4"), "GSI1PK": {"NULL": True}}}, "moto"),
    ("put_item", {"Item": {**_call("h4"), "GSI1SK": {"N": "1"}}}, "moto"),
    ("put_item", {"Item": {k: v for k, v in _call("h5").items() if k != "SK"}}, "moto"),
    ("put_item", {"Item": _call("h6", m={"M": {"k": {"S": "v"}}}, l={"L": [{"N": "1"}]}, ss={"SS": ["a"]})}, "moto"),
    ("put_item", {"Item": _call("h7", n={"N": "1e5"})}, "moto"),
    ("put_item", {"Item": _call("h7", n={"N": "abc"})}, "moto"),
    ("put_item", {"Item": _call("h7", n={"N": " 1"})}, "moto"),
    ("put_item", {"Item": _call("h7", n={"S": 5})}, "moto"),
    ("put_item", {"Item": _call("h8", blob={"S": BIG}, blob2={"S": BIG})}, "moto"),
    ("update_item", {"Key": _key("c3"), **CLAIM, "ReturnValues": "UPDATED_NEW"}, "moto"),
    # a failed condition answers with the item as it was when asked to (and only then)
    ("update_item", {"Key": _key("c3"), **CLAIM, "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}, "plain"),
    ("update_item", {"Key": _key("absent"), **CLAIM, "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}, "plain"),
    ("update_item", {"Key": _key("c2"), **CLAIM, "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}, "plain"),
    ("update_item", {"Key": _key("c2"), **CLAIM, "ReturnValuesOnConditionCheckFailure": "NONE"}, "plain"),
    ("update_item", {"Key": _key("c2"), **CLAIM, "ReturnValuesOnConditionCheckFailure": "ALL_NEW"}, "moto"),
    ("update_item", {"Key": {"PK": {"S": "c3"}}, **CLAIM}, "moto"),
    ("update_item", {"Key": {**_key("c3"), "st": {"S": "x"}}, **CLAIM}, "moto"),
    ("update_item", {"Key": _key("c3"), **CLAIM, "UpdateExpression": " " + CLAIM["UpdateExpression"]}, "moto"),
    (
        "update_item",
        {"Key": _key("c3"), **CLAIM, "ExpressionAttributeNames": {**CLAIM["ExpressionAttributeNames"], "#z": "z"}},
        "moto",
    ),
    (
        "update_item",
        {
            "Key": _key("c3"),
            **CLAIM,
            "ExpressionAttributeValues": {**CLAIM["ExpressionAttributeValues"], ":z": {"S": "z"}},
        },
        "moto",
    ),
    (
        "update_item",
        {"Key": _key("c3"), "UpdateExpression": "SET n = n + :one", "ExpressionAttributeValues": {":one": {"N": "1"}}},
        "moto",
    ),
    (
        "update_item",
        {
            "Key": _key("c3"),
            "UpdateExpression": "SET #s0 = :s0",
            "ExpressionAttributeNames": {"#s0": "GSI1PK"},
            "ExpressionAttributeValues": {":s0": {"S": ""}},
        },
        "moto",
    ),
    # empty maps of placeholders
    ("put_item", {"Item": _call("e1"), "ConditionExpression": NEW, "ExpressionAttributeNames": {}}, "plain"),
    ("update_item", {"Key": _key("e1"), **CLAIM, "ExpressionAttributeValues": {}}, "moto"),
    # the claim once more, after moto's way changed nothing of it
    ("update_item", {"Key": _key("c3"), **CLAIM, "ReturnValues": "ALL_OLD"}, "plain"),
    # shapes seen before (their plan is kept): each call's own values are checked all the same
    (
        "update_item",
        {
            "Key": _key("c3"),
            **CLAIM,
            "ExpressionAttributeValues": {**CLAIM["ExpressionAttributeValues"], ":pending": {"S": "done"}},
            "ReturnValues": "ALL_OLD",
        },
        "plain",  # another value in the condition: another condition (it holds now)
    ),
    ("update_item", {"Key": _key("c3"), **CLAIM, "ReturnValues": "ALL_OLD"}, "plain"),  # and the first fails again
    (
        "update_item",
        {
            "Key": _key("c3"),
            **CLAIM,
            "ExpressionAttributeValues": {**CLAIM["ExpressionAttributeValues"], ":s1": {"M": {"k": {"S": "v"}}}},
            "ReturnValues": "ALL_OLD",
        },
        "moto",
    ),
    ("update_item", {"Key": {**_key("c3"), "PK": {"S": ""}}, **CLAIM, "ReturnValues": "ALL_OLD"}, "moto"),
    ("update_item", {"Key": {**_key("c3"), "SK": {"N": "1"}}, **CLAIM, "ReturnValues": "ALL_OLD"}, "moto"),
    (
        "update_item",
        {
            "Key": _key("COUNTER", "n"),
            "UpdateExpression": "ADD #a0 :a0",
            "ExpressionAttributeNames": {"#a0": "n"},
            "ExpressionAttributeValues": {":a0": {"S": "1"}},
            "ReturnValues": "ALL_NEW",
        },
        "moto",
    ),
    ("put_item", {"Item": _call("c4", n={"N": "1e5"})}, "moto"),
    ("put_item", {"Item": _call("c4", n={"N": "7"})}, "plain"),
    ("put_item", {"Item": {**_call("c5"), "GSI1PK": {"S": "q" * 2100}}}, "moto"),
    (
        "put_item",
        {
            "Item": _call("c3", v={"N": "3"}),
            "ConditionExpression": "v = :v",
            "ExpressionAttributeValues": {":v": {"N": "2"}},
        },
        "plain",  # the condition's value differs from its first use: it holds now
    ),
]


@pytest.fixture
def twins(aws: None, tmp_path: Path) -> Iterator[Persistence]:
    """The template's table and a twin of it, with the journal of a data directory recording both."""
    _, kwargs = table_definition(load_template(ROOT / "template.yaml"))
    boto3.client("dynamodb", region_name=REGION).create_table(TableName=TWIN, **kwargs)
    store = Persistence(tmp_path, TABLE, BUCKET)
    store.lock()
    store.recover()
    store.start(background=False)
    yield store
    store.stop()
    store.unlock()


def _contents(name: str) -> list[dict[str, Any]]:
    table = dynamodb_backends[ACCOUNT][REGION].get_table(name)
    items = [item.to_json()["Attributes"] for part in table.items.values() for item in part.values()]
    return sorted(items, key=lambda item: (item["PK"]["S"], item["SK"]["S"]))


def _outcome(run: Any, operation: str, params: dict[str, Any], table: str) -> tuple[str, Any]:
    try:
        answer = run(operation, {**params, "TableName": table})
    except Exception as exc:
        return "error", (type(exc).__name__, str(exc).replace(table, "<table>"))
    return "answer", json.loads(json.dumps(answer).replace(table, "<table>"))


def _records(store: Persistence, table: str) -> list[Any]:
    assert store.journal is not None
    store.journal.flush()
    records = jr.iter_generation_records(store.dir, store.journal.generation)
    return [{k: v for k, v in record.items() if k != "t"} for record in records if record.get("t") == table]


def test_plain_writes_answer_as_moto_handler(twins: Persistence) -> None:
    handler = moto_action(DynamoHandler, REGION, ACCOUNT, whole_operation)
    backend = dynamodb_backends[ACCOUNT][REGION]
    ways: list[str] = []

    def plain_first(operation: str, params: dict[str, Any]) -> Any:
        ways.append("plain")  # an error raised on the way is the plain way's
        answer = getattr(moto_items, operation)(backend, params)
        if answer is None:
            ways[-1] = "moto"
            return handler(operation, params)
        return answer

    for operation, params, way in SCRIPT:
        label = f"{operation} {sorted(params)} {params.get('Item', params.get('Key', {})).get('PK')}"
        got = _outcome(plain_first, operation, params, TABLE)
        want = _outcome(handler, operation, params, TWIN)
        assert got == want, label
        assert ways[-1] == way, label
        assert _contents(TABLE) == _contents(TWIN), label
    assert _records(twins, TABLE) == _records(twins, TWIN)
    # the script covers what it means to: answers and errors both ways
    kinds = {(way, _outcome(handler, op, params, TWIN)[0]) for op, params, way in SCRIPT}
    assert {("plain", "answer"), ("plain", "error"), ("moto", "answer"), ("moto", "error")} <= kinds


def test_a_shape_is_planned_once_and_again_for_a_table_created_anew(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks of a write's shape run once per shape and table; a table deleted and created again (another
    object in moto) gets a plan of its own, and the write lands in it."""
    backend = dynamodb_backends[ACCOUNT][REGION]
    planned: list[str] = []
    for name in ("_put_plan", "_update_plan"):
        real = getattr(moto_items, name)
        monkeypatch.setattr(moto_items, name, lambda b, p, _real=real, _n=name: planned.append(_n) or _real(b, p))
    claim = {"TableName": TABLE, "Key": _key("p1"), **CLAIM, "ReturnValues": "ALL_OLD"}
    for n in range(3):
        assert moto_items.put_item(backend, {"TableName": TABLE, "Item": _call("p1", n={"N": str(n)})}) == {}
        assert moto_items.update_item(backend, claim)["Attributes"]["n"] == {"N": str(n)}
    assert planned == ["_put_plan", "_update_plan"]
    client = boto3.client("dynamodb", region_name=REGION)
    _, kwargs = table_definition(load_template(ROOT / "template.yaml"))
    client.delete_table(TableName=TABLE)
    client.create_table(TableName=TABLE, **kwargs)
    assert moto_items.put_item(backend, {"TableName": TABLE, "Item": _call("p1")}) == {}
    assert moto_items.update_item(backend, claim)["Attributes"]["st"] == {"S": "pending"}
    assert planned == ["_put_plan", "_update_plan"] * 2
    assert client.get_item(TableName=TABLE, Key=_key("p1"))["Item"]["st"] == {"S": "done"}


def test_a_missing_table_is_moto_handlers_to_refuse(aws: None) -> None:
    backend = dynamodb_backends[ACCOUNT][REGION]
    assert moto_items.put_item(backend, {"TableName": "nope", "Item": _call("x")}) is None
    assert moto_items.update_item(backend, {"TableName": "nope", "Key": _key("x"), **CLAIM}) is None


def test_the_gateway_client_takes_the_plain_way(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """`orbital.local.direct` asks moto_items first for PutItem and UpdateItem, and moto's handler for the rest."""
    from orbital.local import direct

    calls: list[str] = []
    for name in ("put_item", "update_item"):
        real = getattr(moto_items, name)
        monkeypatch.setattr(
            moto_items, name, lambda backend, params, _real=real, _n=name: calls.append(_n) or _real(backend, params)
        )
    handled: list[str] = []

    def handler(method: str, params: dict[str, Any]) -> Any:
        handled.append(method)
        return {}

    for method in ("put_item", "update_item", "get_item"):
        direct._plain_first(handler, method, ACCOUNT, REGION)(method, {"TableName": "nope"})
    assert calls == ["put_item", "update_item"]
    assert handled == ["put_item", "update_item", "get_item"]  # the missing table: each left to the handler


def test_a_claims_condition_is_parsed_once_whatever_outcome_it_stores(
    aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parsed condition of a write is kept per text, names and the values the condition uses: claims that store a
    different (large) outcome each time share one parse, and no outcome is kept for it."""
    import gc
    import tracemalloc

    from moto.dynamodb.comparisons import ConditionExpressionParser
    from orbital.local import stack

    stack.cache_conditions()
    stack.untrack_models()  # as the local stack does: moto would keep every item it ever built
    backend = dynamodb_backends[ACCOUNT][REGION]
    lexed: list[str] = []
    lex = ConditionExpressionParser._lex_condition_expression
    monkeypatch.setattr(
        ConditionExpressionParser, "_lex_condition_expression", lambda self: lexed.append("x") or lex(self)
    )

    def claim(n: int) -> None:
        assert moto_items.put_item(backend, {"TableName": TABLE, "Item": _call("o1")}) == {}
        values = {**CLAIM["ExpressionAttributeValues"], ":s1": {"S": f"{n:06d}" + "x" * 100_000}}
        params = {"TableName": TABLE, "Key": _key("o1"), **CLAIM, "ExpressionAttributeValues": values}
        assert moto_items.update_item(backend, params) is not None

    claim(0)
    claim(1)
    warm = len(lexed)
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for n in range(2, 42):
            claim(n)
        gc.collect()  # the items replaced are garbage in cycles (moto's own)
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(lexed) == warm  # no parse after the first ones
    assert kept < 1_000_000, kept  # 40 outcomes of 100 KB were stored one over the other, and none is kept beside
    stored = boto3.client("dynamodb", region_name=REGION).get_item(TableName=TABLE, Key=_key("o1"))["Item"]
    assert stored["out"]["S"].startswith("000041") and stored["st"]["S"] == "done"
