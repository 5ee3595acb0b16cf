"""What moto keeps for as long as the process lives, and the local stack lets go of: the copies of items and state
machines it makes (`untrack_models`), and the interpreter's finished threads (`index_executions`)."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from moto.dynamodb.models.dynamo_type import Item
from moto.s3.models import FakeKey
from moto.stepfunctions.models import StateMachine
from orbital.local import stack

from tests.conftest import BUCKET, TABLE, wait_for


def test_item_copies_are_not_kept(aws: None) -> None:
    stack.untrack_models()
    stack.untrack_models()  # idempotent
    client = boto3.client("dynamodb", region_name="us-east-1")
    client.put_item(TableName=TABLE, Item={"PK": {"S": "M"}, "SK": {"S": "META"}, "n": {"N": "0"}})
    tracked = len(Item.instances_tracked)  # type: ignore[attr-defined]
    for i in range(50):
        client.update_item(
            TableName=TABLE,
            Key={"PK": {"S": "M"}, "SK": {"S": "META"}},
            UpdateExpression="SET n = :n",
            ExpressionAttributeValues={":n": {"N": str(i)}},
            ReturnValues="ALL_OLD",
        )
    assert len(Item.instances_tracked) == tracked  # type: ignore[attr-defined]
    got = client.get_item(TableName=TABLE, Key={"PK": {"S": "M"}, "SK": {"S": "META"}})["Item"]
    assert got["n"] == {"N": "49"}
    # S3's objects are still tracked: moto's reset closes their files through that list
    s3 = boto3.client("s3", region_name="us-east-1")
    before = len(FakeKey.instances_tracked)  # type: ignore[attr-defined]
    s3.put_object(Bucket=BUCKET, Key="kept.txt", Body=b"x")
    assert len(FakeKey.instances_tracked) > before  # type: ignore[attr-defined]


def test_executions_leave_nothing_behind(flows: dict[str, str], services: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from moto.stepfunctions.parser.utils import TMP_THREADS

    stack.untrack_models()
    monkeypatch.setattr(stack, "_THREADS_BEFORE_SWEEP", 0)  # look at every start
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    arn = flows["DeferredCallStateMachine"]
    machines = len(StateMachine.instances_tracked)  # type: ignore[attr-defined]
    started = []
    for i in range(31):
        call_id = f"mem-{i}"
        body = json.dumps({"due": 1_000_000 + i, "waitSeconds": 0})  # timers of seconds long past: they just end
        if i == 30:  # the last one starts once the others are over: starting it lets go of their threads
            for execution in started:
                wait_for(lambda e=execution: sfn.describe_execution(executionArn=e)["status"] == "SUCCEEDED")
            wait_for(lambda: not any(t.is_alive() for t in TMP_THREADS), timeout=20)
            finished = list(TMP_THREADS)
            assert finished
        started.append(sfn.start_execution(stateMachineArn=arn, name=call_id, input=body)["executionArn"])
    wait_for(lambda: sfn.describe_execution(executionArn=started[-1])["status"] == "SUCCEEDED")
    # each execution's copy of its state machine is not kept, and neither are its finished threads (three each)
    assert len(StateMachine.instances_tracked) == machines  # type: ignore[attr-defined]
    assert len(TMP_THREADS) <= 3
    assert not any(t in TMP_THREADS for t in finished)
