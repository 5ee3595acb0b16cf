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
