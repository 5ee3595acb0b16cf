"""What the local stack parses once and copies for each use: update expressions and state machine programs. Each use
gets its own copy (moto rewrites both while it works), and the answers are moto's."""

from __future__ import annotations

import pickle
import threading
import uuid
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from orbital.local import stack

from tests.conftest import ROOT, TABLE


def _update(client: Any, key: str, expression: str, values: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    return client.update_item(
        TableName=TABLE,
        Key={"PK": {"S": key}, "SK": {"S": "META"}},
        UpdateExpression=expression,
        ExpressionAttributeNames=names,
        ExpressionAttributeValues=values,
        ReturnValues="ALL_NEW",
    )["Attributes"]


def test_one_update_expression_many_values(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    stack.cache_update_expressions()
    stack.cache_update_expressions()  # idempotent
    client = boto3.client("dynamodb", region_name="us-east-1")
    expression = "SET #a = :a, #b = :b REMOVE #c"
    names = {"#a": "a", "#b": "b", "#c": "c"}
    for i in range(3):
        client.put_item(TableName=TABLE, Item={"PK": {"S": f"K{i}"}, "SK": {"S": "META"}, "c": {"S": "gone"}})
    got = [_update(client, f"K{i}", expression, {":a": {"N": str(i)}, ":b": {"S": f"b{i}"}}, names) for i in range(3)]
    assert [(g["a"]["N"], g["b"]["S"], "c" in g) for g in got] == [(str(i), f"b{i}", False) for i in range(3)]
    # values of another type through the same text; and the list form of a value
    listed = _update(client, "K0", expression, {":a": {"L": [{"S": "x"}]}, ":b": {"N": "7"}}, names)
    assert listed["a"] == {"L": [{"S": "x"}]} and listed["b"] == {"N": "7"}
    # and the text was parsed once: more updates through it tokenize nothing
    from moto.dynamodb.parsing.tokens import ExpressionTokenizer

    tokenized: list[str] = []
    make_list = ExpressionTokenizer.make_list

    def counting(cls: Any, text: str) -> Any:
        tokenized.append(text)
        return make_list(text)

    with monkeypatch.context() as patched:
        patched.setattr(ExpressionTokenizer, "make_list", classmethod(counting))
        _update(client, "K2", expression, {":a": {"N": "5"}, ":b": {"S": "again"}}, names)
        fresh = f"SET #{uuid.uuid4().hex} = :a"  # a text no other test has sent: parsed (then kept)
        _update(client, "K2", fresh, {":a": {"N": "6"}}, {fresh.split()[1]: "a"})
    assert expression not in tokenized and fresh in tokenized
    # an invalid expression is refused every time, as before
    for _ in range(2):
        with pytest.raises(ClientError) as refused:
            _update(client, "K1", "SET #a = :a,,", {":a": {"N": "1"}}, {"#a": "a"})
        assert refused.value.response["Error"]["Code"] == "ValidationException"
    # a placeholder the request does not define is still found
    with pytest.raises(ClientError) as missing:
        _update(client, "K1", expression, {":a": {"N": "1"}}, names)
    assert missing.value.response["Error"]["Code"] == "ValidationException"


def test_concurrent_updates_through_one_expression(aws: None) -> None:
    stack.cache_update_expressions()
    client = boto3.client("dynamodb", region_name="us-east-1")
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(20):
                _update(client, f"T{n}-{i}", "SET #v = :v", {":v": {"S": f"{n}-{i}"}}, {"#v": "v"})
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    for n in range(4):
        for i in range(20):
            item = client.get_item(TableName=TABLE, Key={"PK": {"S": f"T{n}-{i}"}, "SK": {"S": "META"}})["Item"]
            assert item["v"] == {"S": f"{n}-{i}"}


def test_program_copies_are_independent() -> None:
    stack.skip_batch_models()
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

    text = (ROOT / "statemachines" / "deferred_call.asl.json").read_text()
    text = text.replace("${WorkflowStepsFunctionArn}", "arn:aws:lambda:us-east-1:123456789012:function:WorkflowSteps")
    program, _ = AmazonStateLanguageParser.parse(text)
    copy_of = stack._program_copier(program)
    first, second = copy_of(), copy_of()
    assert first is not program and second is not first
    assert first.states is not second.states
    assert pickle.dumps(first) == pickle.dumps(second) == pickle.dumps(program)


def test_a_program_that_does_not_pickle_is_deep_copied() -> None:
    class Unpicklable:
        def __init__(self) -> None:
            self.hook = lambda: None
            self.items = [1, 2, 3]

    original = Unpicklable()
    made = stack._program_copier(original)()
    assert made is not original and made.items == [1, 2, 3] and made.items is not original.items


def test_conditions_parsed_once_per_text_names_and_values(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    stack.cache_conditions()
    stack.cache_conditions()  # idempotent
    client = boto3.client("dynamodb", region_name="us-east-1")
    for i in range(4):
        client.put_item(TableName=TABLE, Item={"PK": {"S": f"C{i}"}, "SK": {"S": "META"}, "st": {"S": "pending"}})

    def claim(pk: str, expected: str, outcome: str, name: str = "st") -> bool:
        try:
            client.update_item(
                TableName=TABLE,
                Key={"PK": {"S": pk}, "SK": {"S": "META"}},
                UpdateExpression="SET #o = :o",
                ConditionExpression="#f = :expected",
                ExpressionAttributeNames={"#o": "out", "#f": name},
                # :o differs every time and is not in the condition: the parsed condition is shared all the same
                ExpressionAttributeValues={":expected": {"S": expected}, ":o": {"S": outcome}},
            )
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "ConditionalCheckFailedException"
            return False
        return True

    from moto.dynamodb.comparisons import ConditionExpressionParser

    lexed: list[str] = []
    lex = ConditionExpressionParser._lex_condition_expression

    def counting(self: Any) -> Any:
        lexed.append(self.condition_expression)
        return lex(self)

    monkeypatch.setattr(ConditionExpressionParser, "_lex_condition_expression", counting)
    # the same text, names and used values again and again: right answers (the placeholders it found are still
    # reported, or moto would refuse :expected as unused), and after the first two requests no parsing
    assert [claim(f"C{i}", "pending", f"o{i}") for i in range(3)] == [True, True, True]
    warm = len(lexed)
    assert claim("C3", "pending", "o3") and claim("C3", "pending", "again") and len(lexed) == warm
    # another value for the placeholder, another name for #f: answered for what they are
    assert not claim("C0", "done", "x") and not claim("C0", "done", "x")
    assert claim("C0", "pending", "y", name="st") and not claim("C0", "pending", "y", name="other")
    client.put_item(TableName=TABLE, Item={"PK": {"S": "C9"}, "SK": {"S": "META"}, "st": {"S": "done"}})
    assert claim("C9", "done", "z") and not claim("C9", "pending", "z")
    # an invalid condition is refused every time (moto's parser raises ValueError)
    for _ in range(3):
        with pytest.raises(ValueError, match="Bad comparison"):
            client.update_item(
                TableName=TABLE,
                Key={"PK": {"S": "C0"}, "SK": {"S": "META"}},
                UpdateExpression="SET #o = :o",
                ConditionExpression="#f = = :expected",
                ExpressionAttributeNames={"#o": "out", "#f": "st"},
                ExpressionAttributeValues={":expected": {"S": "pending"}, ":o": {"S": "x"}},
            )
