"""The local gateway's hottest AWS calls skip botocore (`orbital.local.direct`): the same answers and the same errors
as the same calls through botocore, on the same moto state. Runs `LocalGateway` in this process to look inside it."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from orbital.client import GatewayClient
from orbital.local.direct import DirectClient
from orbital.local.server import LocalGateway

from tests.conftest import deferred_execution_arn, wait_for
from tests.e2e.conftest import NODE_RUNTIME as RUNTIME
from tests.e2e.conftest import in_process_gateway


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[LocalGateway]:
    yield from in_process_gateway(tmp_path)


def _pair(gateway: LocalGateway, service: str) -> tuple[Any, Any]:
    """The gateway's own client for `service` (direct) and a botocore one served in process the old way."""
    from orbital.aws import clients

    direct = clients.client(service)
    assert isinstance(direct, DirectClient)
    return direct, gateway.stack.client(service)


def _key(pk: str) -> dict[str, Any]:
    return {"PK": {"S": pk}, "SK": {"S": "META"}}


def test_dynamodb_answers_and_errors_match_botocore(gateway: LocalGateway) -> None:
    direct, boto = _pair(gateway, "dynamodb")
    table = gateway.stack.table
    for client, pk in ((direct, "T#direct"), (boto, "T#boto")):
        item = {**_key(pk), "d": {"S": "{}"}, "st": {"S": "pending"}, "n": {"N": "1"}}
        put = client.put_item(TableName=table, Item=item, ConditionExpression="attribute_not_exists(PK)")
        assert "Attributes" not in put and put["ResponseMetadata"]["HTTPStatusCode"] == 200
    answers = []
    for client, pk in ((direct, "T#direct"), (boto, "T#boto")):
        got = client.update_item(
            TableName=table,
            Key=_key(pk),
            UpdateExpression="SET #s = :done ADD #n :one",
            ConditionExpression="st = :pending",
            ExpressionAttributeNames={"#s": "st", "#n": "n"},
            ExpressionAttributeValues={":done": {"S": "done"}, ":one": {"N": "2"}, ":pending": {"S": "pending"}},
            ReturnValues="ALL_OLD",
        )
        old = {k: v for k, v in got["Attributes"].items() if k != "PK"}
        read = client.get_item(TableName=table, Key=_key(pk), ConsistentRead=True)["Item"]
        listed = client.query(
            TableName=table, KeyConditionExpression="PK = :p", ExpressionAttributeValues={":p": {"S": pk}}
        )
        answers.append((old, {k: v for k, v in read.items() if k != "PK"}, listed["Count"]))
    assert answers[0] == answers[1]
    assert answers[0] == (
        {"SK": {"S": "META"}, "d": {"S": "{}"}, "st": {"S": "pending"}, "n": {"N": "1"}},
        {"SK": {"S": "META"}, "d": {"S": "{}"}, "st": {"S": "done"}, "n": {"N": "3"}},
        1,
    )

    def claim_again(client: Any, pk: str, **more: Any) -> Any:
        """The claim of an item answered already: refused by its condition."""
        with pytest.raises(client.exceptions.ConditionalCheckFailedException) as failed:
            client.update_item(
                TableName=table,
                Key=_key(pk),
                UpdateExpression="SET #s = :done",
                ConditionExpression="st = :pending",
                ExpressionAttributeNames={"#s": "st"},
                ExpressionAttributeValues={":done": {"S": "done"}, ":pending": {"S": "pending"}},
                **more,
            )
        return failed

    refused = []  # asked for, a failed condition carries the item as it stood, both ways; not asked, it does not
    for client, pk in ((direct, "T#direct"), (boto, "T#boto")):
        for asked in ("ALL_OLD", "NONE"):
            item = claim_again(client, pk, ReturnValuesOnConditionCheckFailure=asked).value.response.get("Item")
            refused.append({k: v for k, v in item.items() if k != "PK"} if item else None)
    assert (
        refused[:2]
        == refused[2:]
        == [
            {"SK": {"S": "META"}, "d": {"S": "{}"}, "st": {"S": "done"}, "n": {"N": "3"}},
            None,
        ]
    )
    errors = []
    for client, pk in ((direct, "T#direct"), (boto, "T#boto")):
        failed = claim_again(client, pk)
        with pytest.raises(ClientError) as invalid:
            client.update_item(
                TableName=table,
                Key=_key(pk),
                UpdateExpression="SET #s = :done",
                ExpressionAttributeNames={"#s": "st"},
                ExpressionAttributeValues={":done": {"S": "done"}, ":unused": {"S": "x"}},
            )
        with pytest.raises(ClientError) as no_table:
            client.get_item(TableName="no-such-table", Key=_key(pk))
        errors.append(
            [
                (e.value.response["Error"]["Code"], e.value.response["ResponseMetadata"]["HTTPStatusCode"])
                for e in (failed, invalid, no_table)
            ]
        )
    assert (
        errors[0]
        == errors[1]
        == [
            ("ConditionalCheckFailedException", 400),
            ("ValidationException", 400),
            ("ResourceNotFoundException", 400),
        ]
    )


def test_direct_calls_are_counted_and_journaled(gateway: LocalGateway) -> None:
    from orbital.aws import clients

    direct, _ = _pair(gateway, "dynamodb")
    clients.reset_call_counts()
    served = gateway.stack.in_process.served
    direct.put_item(TableName=gateway.stack.table, Item={**_key("CONFIG#direct"), "d": {"S": '{"x":1}'}})
    assert clients.call_counts() == {"dynamodb.PutItem": 1}
    assert gateway.stack.in_process.served == served + 1
    assert gateway.persistence is not None
    journal = gateway.persistence.journal
    assert journal is not None
    journal.flush()
    text = b"".join(p.read_bytes() for p in sorted(gateway.data_dir.glob("**/journal-*.log")))
    assert b"CONFIG#direct" in text  # the write went through the journal like any other


def test_step_functions_and_management_calls_are_direct(gateway: LocalGateway) -> None:
    """A tool call starts the timer of the second it is due in (a deferred_call execution, whose `due` step is a
    Lambda task run by this process's handlers); every frame goes out through PostToConnection. All of it without
    botocore."""
    from orbital.aws import clients

    with GatewayClient(gateway.ws_url) as node, GatewayClient(gateway.ws_url) as caller:
        node.connect(
            "node", "direct-node", tools=[{"name": "Echo", "inputSchema": {"type": "object"}}], nodeRuntime=RUNTIME
        )
        caller.connect("client")
        wait_for(lambda: any(t["name"] == "direct-node__Echo" for t in caller.call("tools.list")["tools"]))
        caller.call("config.set", {"path": "timeouts.toolMs", "value": 1000})  # a timer that runs out soon
        clients.reset_call_counts()
        served = gateway.stack.in_process.served
        caller.send_raw(
            json.dumps(
                {
                    "type": "req",
                    "id": "t1",
                    "method": "tool.invoke",
                    "params": {"tool": "direct-node__Echo", "args": {"x": 1}},
                }
            )
        )
        evt = node.next_event("tool.invoke", timeout=10)
        call_id = evt["payload"]["callId"]
        timer = wait_for(lambda: _timer_of(gateway, call_id))  # marked due right after the event was sent
        node.call("tool.result", {"callId": call_id, "result": {"echo": evt["payload"]["args"]}})
        answer = caller.wait_response("t1")
        assert answer["ok"] is True, answer
        assert answer["payload"]["result"] == {"echo": {"x": 1}}
        # the timer of the call's second runs out and its Lambda task finds the call answered
        wait_for(lambda: _status(gateway, timer) == "SUCCEEDED", timeout=15)
    counts = clients.call_counts()
    for call in ("sfn.StartExecution", "dynamodb.PutItem", "apigatewaymanagementapi.PostToConnection"):
        assert counts.get(call, 0) >= 1, (call, counts)
    assert gateway.stack.in_process.served > served
    # the execution ran in the Step Functions process, and its Lambda task came back to this one's handlers
    assert gateway.stack.states is not None and gateway.stack.functions.invocations > 0


def _status(gateway: LocalGateway, execution_arn: str) -> str | None:
    """An execution's status; None while its start is still on its way (the caller may hear back first)."""
    sfn = gateway.stack.client("stepfunctions")
    try:
        return str(sfn.describe_execution(executionArn=execution_arn)["status"])
    except sfn.exceptions.ExecutionDoesNotExist:
        return None


def _timer_of(gateway: LocalGateway, call_id: str) -> str | None:
    from orbital.runtime.services import get_services

    machines = {"DeferredCallStateMachine": gateway.stack.state_machine_arns["DeferredCallStateMachine"]}
    try:
        return deferred_execution_arn(machines, get_services(), call_id)
    except AssertionError:  # not marked due yet
        return None


def test_an_error_answer_of_the_bridge_is_the_modeled_exception(gateway: LocalGateway) -> None:
    from orbital.aws import clients

    mgmt = clients.management(os.environ["ORBITAL_WS_MGMT_ENDPOINT"])
    assert isinstance(mgmt, DirectClient)
    with pytest.raises(mgmt.exceptions.GoneException):
        mgmt.post_to_connection(ConnectionId="NOSUCHSOCKET", Data=b"{}")
    with GatewayClient(gateway.ws_url) as c:
        cid = c.connect("client")["server"]["connectionId"]
        with pytest.raises(mgmt.exceptions.PayloadTooLargeException):
            mgmt.post_to_connection(ConnectionId=cid, Data=json.dumps({"x": "y" * 140_000}).encode())
        mgmt.post_to_connection(ConnectionId=cid, Data=json.dumps({"type": "evt", "event": "direct"}).encode())
        assert c.next_event("direct", timeout=10)["event"] == "direct"


def test_a_dynamodb_operation_is_atomic_across_moto_handler_steps(
    gateway: LocalGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto's UpdateItem copies the item, then updates it, then renders the answer, each step locked on its own.
    The direct call holds the table across all of them: another write to the item waits instead of changing it
    mid-copy ("dictionary changed size during iteration")."""
    import copy
    import threading

    from moto.dynamodb import responses

    direct, _ = _pair(gateway, "dynamodb")
    table = gateway.stack.table
    direct.put_item(TableName=table, Item={**_key("T#atomic"), "d": {"S": "{}"}, "n": {"N": "0"}})
    inside, go = threading.Event(), threading.Event()
    first = threading.current_thread()
    real_deepcopy = copy.deepcopy

    class HeldCopy:
        def deepcopy(self, value: Any, *args: Any) -> Any:
            if threading.current_thread() is not first and threading.current_thread().name == "held":
                inside.set()
                go.wait(10)
            return real_deepcopy(value, *args)

    monkeypatch.setattr(responses, "copy", HeldCopy())

    def add(name: str) -> None:
        direct.update_item(
            TableName=table,
            Key=_key("T#atomic"),
            UpdateExpression="ADD #n :one SET #w = :who",
            ExpressionAttributeNames={"#n": "n", "#w": "w"},
            ExpressionAttributeValues={":one": {"N": "1"}, ":who": {"S": name}},
            ReturnValues="UPDATED_OLD",  # not one orbital.local.moto_items answers: moto's handler does
        )

    held = threading.Thread(target=add, args=("held",), name="held")
    other = threading.Thread(target=add, args=("other",), name="other")
    held.start()
    try:
        assert inside.wait(10)
        other.start()
        other.join(0.3)
        assert other.is_alive()  # waits for the held operation to finish
    finally:
        go.set()
        held.join(10)
        if other.ident is not None:
            other.join(10)
    item = direct.get_item(TableName=table, Key=_key("T#atomic"))["Item"]
    assert item["n"] == {"N": "2"} and item["w"] == {"S": "other"}
