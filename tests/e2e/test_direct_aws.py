"""The local gateway's hottest Step Functions and management API calls skip botocore (`orbital.local.direct`), with
the errors botocore would raise. Runs `LocalGateway` in this process to look inside it."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from orbital.client import GatewayClient
from orbital.local.direct import DirectClient
from orbital.local.server import LocalGateway

from tests.conftest import deferred_execution_arn, wait_for
from tests.e2e.conftest import NODE_RUNTIME as RUNTIME
from tests.e2e.conftest import in_process_gateway


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[LocalGateway]:
    yield from in_process_gateway(tmp_path)


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
    for call in ("sfn.StartExecution", "apigatewaymanagementapi.PostToConnection"):
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
