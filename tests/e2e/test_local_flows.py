"""The local gateway's Step Functions and management API calls go through the Workflows and Sender ports' local
backends (`orbital.local.workflows`, `orbital.local.sender`), without botocore, with the management API's answers.
Runs `LocalGateway` in this process to look inside it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from orbital.client import GatewayClient
from orbital.local.sender import BridgeSender, SendRefusedError
from orbital.local.server import LocalGateway
from orbital.local.workflows import LocalWorkflows

from tests.conftest import deferred_execution_arn, wait_for
from tests.e2e.conftest import NODE_RUNTIME as RUNTIME
from tests.e2e.conftest import in_process_gateway


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[LocalGateway]:
    yield from in_process_gateway(tmp_path)


def test_step_functions_and_management_calls_go_through_the_local_ports(gateway: LocalGateway) -> None:
    """A tool call starts the timer of the second it is due in (a deferred_call execution, whose `due` step is a
    Lambda task run by this process's handlers); every frame goes out through PostToConnection. All of it through the
    local backends of the two ports, which the gateway's Services hold."""
    from orbital.aws import clients
    from orbital.runtime.services import get_services

    services = get_services()
    assert isinstance(services.workflows, LocalWorkflows) and services.workflows is gateway.stack.workflows
    assert isinstance(services.sender, BridgeSender) and services.sender.bridge is gateway.bridge

    with GatewayClient(gateway.ws_url) as node, GatewayClient(gateway.ws_url) as caller:
        node.connect(
            "node", "direct-node", tools=[{"name": "Echo", "inputSchema": {"type": "object"}}], nodeRuntime=RUNTIME
        )
        caller.connect("client")
        wait_for(lambda: any(t["name"] == "direct-node__Echo" for t in caller.call("tools.list")["tools"]))
        caller.call("config.set", {"path": "timeouts.toolMs", "value": 1000})  # a timer that runs out soon
        clients.reset_call_counts()
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
    # the execution ran in the Step Functions process, and its Lambda task came back to this one's handlers
    assert gateway.stack.states is not None and gateway.stack.functions.invocations > 0


def _status(gateway: LocalGateway, execution_arn: str) -> str | None:
    """An execution's status; None while its start is still on its way (the caller may hear back first)."""
    return gateway.stack.workflows.status(execution_arn)


def _timer_of(gateway: LocalGateway, call_id: str) -> str | None:
    from orbital.runtime.services import get_services

    machines = {"DeferredCallStateMachine": gateway.stack.state_machine_arns["DeferredCallStateMachine"]}
    try:
        return deferred_execution_arn(machines, get_services(), call_id)
    except AssertionError:  # not marked due yet
        return None


def test_an_error_answer_of_the_bridge_is_the_management_apis(gateway: LocalGateway) -> None:
    from orbital.runtime.services import get_services

    sender = get_services().sender
    assert sender.post("NOSUCHSOCKET", b"{}") is False  # 410 GoneException: the socket is gone
    with GatewayClient(gateway.ws_url) as c:
        cid = c.connect("client")["server"]["connectionId"]
        with pytest.raises(SendRefusedError) as refused:
            sender.post(cid, json.dumps({"x": "y" * 140_000}).encode())
        assert (refused.value.status, refused.value.error_code) == (413, "PayloadTooLargeException")
        assert sender.post(cid, {"type": "evt", "event": "direct"}) is True
        assert c.next_event("direct", timeout=10)["event"] == "direct"
