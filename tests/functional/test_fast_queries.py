"""Queries on moto with `fast_queries` (the partition, not the whole table, is listed): the same answers as
DynamoDB gives — order, range conditions, reverse order, pages, index queries — whatever else the table holds."""

from __future__ import annotations

from typing import Any

import boto3
from orbital.local.stack import fast_queries

from tests.conftest import TABLE


def put_all(client: Any) -> list[dict[str, Any]]:
    items = []
    for p in range(20):
        for s in range(15):
            item = {"PK": {"S": f"P#{p:02d}"}, "SK": {"S": f"S#{s:03d}"}, "n": {"N": str(p * 100 + s)}}
            if s % 3 == 0:
                item["GSI1PK"] = {"S": f"G#{p % 4}"}
                item["GSI1SK"] = {"S": f"{(s * 7) % 50:03d}#{p:02d}"}
            items.append(item)
    for start in range(0, len(items), 25):
        client.batch_write_item(RequestItems={TABLE: [{"PutRequest": {"Item": i}} for i in items[start : start + 25]]})
    return items


def query_all(client: Any, **kwargs: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        page = client.query(TableName=TABLE, **kwargs)
        out.extend(page["Items"])
        if "LastEvaluatedKey" not in page:
            return out
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def test_queries_answer_as_before(aws: None) -> None:
    client = boto3.client("dynamodb", region_name="us-east-1")
    items = put_all(client)
    fast_queries()
    fast_queries()  # idempotent

    partition = [i for i in items if i["PK"]["S"] == "P#07"]
    got = query_all(client, KeyConditionExpression="PK = :p", ExpressionAttributeValues={":p": {"S": "P#07"}}, Limit=4)
    assert got == sorted(partition, key=lambda i: i["SK"]["S"])
    backwards = query_all(
        client,
        KeyConditionExpression="PK = :p AND SK BETWEEN :a AND :b",
        ExpressionAttributeValues={":p": {"S": "P#07"}, ":a": {"S": "S#003"}, ":b": {"S": "S#010"}},
        ScanIndexForward=False,
        Limit=3,
    )
    assert [i["SK"]["S"] for i in backwards] == [f"S#{s:03d}" for s in range(10, 2, -1)]
    prefix = query_all(
        client,
        KeyConditionExpression="PK = :p AND begins_with(SK, :s)",
        ExpressionAttributeValues={":p": {"S": "P#19"}, ":s": {"S": "S#01"}},
    )
    assert [i["SK"]["S"] for i in prefix] == [f"S#{s:03d}" for s in range(10, 15)]
    assert query_all(client, KeyConditionExpression="PK = :p", ExpressionAttributeValues={":p": {"S": "none"}}) == []

    indexed = [i for i in items if i.get("GSI1PK", {}).get("S") == "G#1"]
    by_index = query_all(
        client,
        IndexName="GSI1",
        KeyConditionExpression="GSI1PK = :g AND GSI1SK <= :max",
        ExpressionAttributeValues={":g": {"S": "G#1"}, ":max": {"S": "030#~"}},
        Limit=2,
    )
    expected = sorted((i for i in indexed if i["GSI1SK"]["S"] <= "030#~"), key=lambda i: i["GSI1SK"]["S"])
    assert by_index == expected and by_index

    # writes meanwhile are seen by the next query, in place
    client.delete_item(TableName=TABLE, Key={"PK": {"S": "P#07"}, "SK": {"S": "S#000"}})
    client.put_item(TableName=TABLE, Item={"PK": {"S": "P#07"}, "SK": {"S": "S#999"}})
    after = query_all(client, KeyConditionExpression="PK = :p", ExpressionAttributeValues={":p": {"S": "P#07"}})
    assert [i["SK"]["S"] for i in after] == [f"S#{s:03d}" for s in range(1, 15)] + ["S#999"]
    scanned = client.scan(TableName=TABLE)["Items"]  # scans keep moto's own listing
    assert len(scanned) == len(items)


def test_moto_looks_up_a_response_class_actions_once(aws: None) -> None:
    from moto.core import responses
    from moto.dynamodb.responses import DynamoHandler
    from orbital.local.stack import cache_action_lookup

    cache_action_lookup()
    names = responses.method_names_from_class(DynamoHandler)
    assert {"put_item", "query", "update_item"} <= names
    assert responses.method_names_from_class(DynamoHandler) is names  # computed once
    client = boto3.client("dynamodb", region_name="us-east-1")
    client.put_item(TableName=TABLE, Item={"PK": {"S": "a"}, "SK": {"S": "b"}})
    assert client.get_item(TableName=TABLE, Key={"PK": {"S": "a"}, "SK": {"S": "b"}})["Item"]["PK"] == {"S": "a"}


def test_an_index_query_by_a_string_lists_only_the_items_with_that_key(aws: None) -> None:
    """The listing a query on an index by a string key starts from holds only the items whose index key is that
    very string (not a number that prints the same, not an item without it): what matches is what moto gives."""
    from moto.dynamodb.models import dynamodb_backends
    from orbital.local import stack

    client = boto3.client("dynamodb", region_name="us-east-1")
    fast_queries()
    wanted = [
        {"PK": {"S": f"A#{i}"}, "SK": {"S": "x"}, "GSI1PK": {"S": "1"}, "GSI1SK": {"S": f"{9 - i}"}} for i in range(3)
    ]
    others = [
        {"PK": {"S": "B#1"}, "SK": {"S": "x"}, "GSI1PK": {"N": "1"}, "GSI1SK": {"S": "0"}},
        {"PK": {"S": "B#2"}, "SK": {"S": "x"}, "GSI1PK": {"S": "10"}, "GSI1SK": {"S": "0"}},
        {"PK": {"S": "B#3"}, "SK": {"S": "x"}, "GSI1SK": {"S": "0"}},
        {"PK": {"S": "1"}, "SK": {"S": "x"}},
    ]
    for item in wanted + others:
        client.put_item(TableName=TABLE, Item=item)
    got = query_all(
        client, IndexName="GSI1", KeyConditionExpression="GSI1PK = :g", ExpressionAttributeValues={":g": {"S": "1"}}
    )
    assert got == sorted(wanted, key=lambda i: i["GSI1SK"]["S"])

    from moto.dynamodb.models.dynamo_type import DynamoType

    table = dynamodb_backends["123456789012"]["us-east-1"].get_table(TABLE)
    stack._querying.scope = (table, "GSI1", DynamoType({"S": "1"}))
    try:
        listed = table.all_items()
    finally:
        stack._querying.scope = None
    assert sorted(i.hash_key.value for i in listed) == ["A#0", "A#1", "A#2"]
