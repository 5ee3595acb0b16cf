"""DynamoDB batches that come back in part (`UnprocessedItems`, `UnprocessedKeys`, as a throttled table answers) are
sent again for what was left, with exponential backoff and a bounded number of sends, and a clear retryable error
when that is exhausted (`orbital.store.backends.dynamo`, one tenacity loop for both).

The partial answers are real boto3 answers on moto: a handler on the client's own events (`before-call` answers a
send without moto, leaving the whole batch unprocessed; `after-call` moves found items into `UnprocessedKeys`), so
the table's code runs unchanged. The waits go to a recorder given to the table, so no test sleeps.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from orbital.errors import ConflictError
from orbital.store.backends.dynamo import UNPROCESSED_ATTEMPTS, DynamoTable

from tests.contract.conftest import create_table, plain_moto

NAME = "orbital-batches"


@pytest.fixture
def client() -> Iterator[Any]:
    with plain_moto() as client:
        create_table(client, NAME)
        yield client


class Throttled:
    """The first `times` sends of `operation` are answered without reaching moto: nothing done, all unprocessed."""

    def __init__(self, client: Any, operation: str, times: int) -> None:
        self.times = times
        self.sends = 0
        self.request: dict[str, Any] = {}
        self.field = "UnprocessedItems" if operation == "BatchWriteItem" else "UnprocessedKeys"
        client.meta.events.register(f"provide-client-params.dynamodb.{operation}", self._params)
        client.meta.events.register(f"before-call.dynamodb.{operation}", self._answer)

    def _params(self, params: dict[str, Any], **_: Any) -> None:
        self.sends += 1
        self.request = params["RequestItems"]

    def _answer(self, **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if self.sends > self.times:
            return None  # on to moto
        return AWSResponse("https://dynamodb.invalid/", 200, {}, None), {self.field: self.request}


def test_a_batch_write_left_unprocessed_is_sent_again_with_backoff(client: Any) -> None:
    waits: list[float] = []
    table = DynamoTable(client, NAME, sleep=waits.append)
    throttled = Throttled(client, "BatchWriteItem", times=3)
    table.write_batch(puts=[(("P", f"s{i}"), {"i": i}) for i in range(3)])
    assert throttled.sends == 4
    assert waits == [0.05, 0.1, 0.2]
    assert sorted(r.data["i"] for r in table.query("P")) == [0, 1, 2]


def test_a_batch_get_sends_again_only_the_keys_left_unprocessed(client: Any) -> None:
    waits: list[float] = []
    table = DynamoTable(client, NAME, sleep=waits.append)
    table.write_batch(puts=[(("P", f"s{i}"), {"i": i}) for i in range(3)])
    asked: list[int] = []
    left = {"times": 2}

    def count(params: dict[str, Any], **_: Any) -> None:
        asked.append(len(params["RequestItems"][NAME]["Keys"]))

    def hold_one_back(parsed: dict[str, Any], **_: Any) -> None:
        found = parsed["Responses"][NAME]
        if left["times"] and found:
            left["times"] -= 1
            item = found.pop()
            parsed["UnprocessedKeys"] = {NAME: {"Keys": [{"PK": item["PK"], "SK": item["SK"]}], "ConsistentRead": True}}

    client.meta.events.register("provide-client-params.dynamodb.BatchGetItem", count)
    client.meta.events.register("after-call.dynamodb.BatchGetItem", hold_one_back)
    found = table.get_many([("P", "s0"), ("P", "s1"), ("P", "s2"), ("P", "none")])
    assert {key: rec.data["i"] for key, rec in found.items()} == {("P", "s0"): 0, ("P", "s1"): 1, ("P", "s2"): 2}
    assert asked == [4, 1, 1]
    assert waits == [0.05, 0.1]


def test_a_batch_still_unprocessed_after_the_last_attempt_is_a_retryable_conflict(client: Any) -> None:
    waits: list[float] = []
    table = DynamoTable(client, NAME, sleep=waits.append)
    throttled = Throttled(client, "BatchWriteItem", times=UNPROCESSED_ATTEMPTS)
    with pytest.raises(
        ConflictError, match=f"left 2 of a batch's items unprocessed after {UNPROCESSED_ATTEMPTS}"
    ) as exc:
        table.write_batch(puts=[(("P", "a"), {}), (("P", "b"), {})])
    assert exc.value.retryable is True
    assert throttled.sends == UNPROCESSED_ATTEMPTS
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]  # doubling, at most a second
    assert table.query("P") == []


def test_a_batch_get_still_unprocessed_after_the_last_attempt_is_a_retryable_conflict(client: Any) -> None:
    waits: list[float] = []
    table = DynamoTable(client, NAME, sleep=waits.append)
    table.put(("P", "a"), {})
    throttled = Throttled(client, "BatchGetItem", times=UNPROCESSED_ATTEMPTS)
    with pytest.raises(ConflictError, match="left 1 of a batch's items unprocessed") as exc:
        table.get_many([("P", "a")])
    assert exc.value.retryable is True
    assert throttled.sends == UNPROCESSED_ATTEMPTS
    assert len(waits) == UNPROCESSED_ATTEMPTS - 1
