"""The local gateway's Step Functions in their own process (orbital.local.sfn_worker): the stack's calls (the
Workflows port's local backend among them) reach them, the executions' Lambda tasks run in the gateway, and the
process ends with the gateway — stopped, or killed."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.client import GatewayClient
from orbital.local.server import LocalGateway
from orbital.local.sfn_worker import WorkerRefusedError

from tests.conftest import wait_for
from tests.e2e.conftest import NODE_RUNTIME as RUNTIME
from tests.e2e.conftest import GatewayProcess, in_process_gateway


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[LocalGateway]:
    yield from in_process_gateway(tmp_path / "data", persist=False)


def _gone(pid: int) -> bool:
    """True once `pid` has exited (and been reaped, or is a zombie)."""
    if not Path("/proc").is_dir():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _status(gateway: LocalGateway, execution_arn: str) -> str:
    return str(gateway.stack.call("describe_execution", {"executionArn": execution_arn})["status"])


def test_the_stacks_calls_reach_the_process(gateway: LocalGateway) -> None:
    states = gateway.stack.states
    assert states is not None and states.running and states.pid != os.getpid()
    names = {m["name"] for m in gateway.stack.call("list_state_machines", {})["stateMachines"]}
    assert {"DeferredCallStateMachine", "AgentTurnStateMachine"} <= names
    arn = gateway.stack.state_machine_arns["DeferredCallStateMachine"]
    assert gateway.stack.call("describe_state_machine", {"stateMachineArn": arn})["name"] == "DeferredCallStateMachine"
    # errors are the process's, with their codes; the Workflows port answers the expected ones
    missing = arn.replace(":stateMachine:", ":execution:") + ":no-such-execution"
    with pytest.raises(WorkerRefusedError) as error:
        gateway.stack.call("describe_execution", {"executionArn": missing})
    assert error.value.error_code == "ExecutionDoesNotExist"
    assert gateway.stack.workflows.status(missing) is None
    with pytest.raises(WorkerRefusedError) as bad_token:
        gateway.stack.call("send_task_success", {"taskToken": "not-a-token", "output": "{}"})
    assert bad_token.value.error_code == "InvalidToken"
    assert gateway.stack.workflows.succeed("not-a-token", {}) is False

    # an execution started through the port runs there, and its Lambda task runs here
    before = gateway.stack.functions.invocations
    body = {"due": 1_000_000, "waitSeconds": 0}  # a second long past, with no call due in it
    assert gateway.stack.workflows.start(arn, "through-the-port", body) is True
    started = arn.replace(":stateMachine:", ":execution:") + ":through-the-port"
    wait_for(lambda: _status(gateway, started) == "SUCCEEDED")
    assert gateway.stack.functions.invocations > before
    listed = gateway.stack.call("list_executions", {"stateMachineArn": arn})["executions"]
    assert started in {e["executionArn"] for e in listed}


def test_the_process_ends_with_the_gateway(tmp_path: Path) -> None:
    running = in_process_gateway(tmp_path / "data", persist=False)
    gw = next(running)
    pid = gw.stack.states.pid
    assert pid is not None and not _gone(pid)
    with pytest.raises(StopIteration):
        next(running)  # stops the gateway
    wait_for(lambda: _gone(pid), timeout=20)


def _echo_call(node: GatewayClient, caller: GatewayClient, frame_id: str, *, answer: bool = True) -> dict[str, Any]:
    """A tool.invoke of the node's Echo; with `answer`, the node answers it as soon as it arrives."""
    frame = {"type": "req", "id": frame_id, "method": "tool.invoke", "params": {"tool": "n-dies__Echo", "args": {}}}
    caller.send_raw(json.dumps(frame))
    if answer:
        evt = node.next_event("tool.invoke", timeout=10)
        node.call("tool.result", {"callId": evt["payload"]["callId"], "result": {"echo": frame_id}})
    return caller.wait_response(frame_id, timeout=30)


def _connected(gateway: LocalGateway) -> tuple[GatewayClient, GatewayClient]:
    node, caller = GatewayClient(gateway.ws_url), GatewayClient(gateway.ws_url)
    node.connect("node", "n-dies", tools=[{"name": "Echo", "inputSchema": {"type": "object"}}], nodeRuntime=RUNTIME)
    caller.connect("client")
    wait_for(lambda: any(t["name"] == "n-dies__Echo" for t in caller.call("tools.list")["tools"]))
    return node, caller


def _kill(states: Any) -> None:
    """kill -9 the Step Functions process, and wait until the gateway has seen it end."""
    assert states is not None and states.pid is not None
    os.kill(states.pid, signal.SIGKILL)
    wait_for(lambda: not states.running, timeout=20)


def test_a_process_that_dies_is_started_again(gateway: LocalGateway) -> None:
    from orbital.runtime.services import get_services

    states = gateway.stack.states
    node, caller = _connected(gateway)
    armed = get_services().armed_timers
    with node, caller:
        assert _echo_call(node, caller, "before")["ok"] is True
        # the timer of that call's second was started in the process about to die (the worker that started it may
        # still be adding it to the set when the node's answer has already reached the caller)
        wait_for(lambda: armed)
        _kill(states)
        # another one, with the state machines created again under the same ARNs, and no timer taken as running
        wait_for(lambda: gateway.stack.states is not None and gateway.stack.states.running, timeout=30)
        assert gateway.stack.states is not states and gateway.stack.states.pid != states.pid
        wait_for(lambda: not armed, timeout=30)
        answer = _echo_call(node, caller, "after")
        assert answer["ok"] is True and answer["payload"]["result"] == {"echo": "after"}, answer
        wait_for(lambda: armed)  # as above: the worker starts the call's timer, maybe after the answer is out
        arn = gateway.stack.state_machine_arns["DeferredCallStateMachine"]
        timers = [e["name"] for e in gateway.stack.call("list_executions", {"stateMachineArn": arn})["executions"]]
        assert [f"due-{second}" for second in armed] == timers  # started in the new process


def test_a_tool_call_is_answered_when_the_process_keeps_dying(
    gateway: LocalGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no Step Functions process left, a call's wait cannot start (`ServiceUnavailable` at once, nothing hangs);
    its node already has it, so the call is not failed: the node's answer reaches the caller."""
    monkeypatch.setattr(gateway.stack, "RESTARTS", 0)
    node, caller = _connected(gateway)
    with node, caller:
        _kill(gateway.stack.states)
        assert gateway.stack.states is None or not gateway.stack.states.running
        answer = _echo_call(node, caller, "t1")
        assert answer["ok"] is True and answer["payload"]["result"] == {"echo": "t1"}, answer
        # and the gateway itself still answers
        assert caller.call("config.get", {"path": "model"}) is not None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the child through /proc")
def test_the_process_ends_when_the_gateway_is_killed(tmp_path: Path) -> None:
    gw = GatewayProcess(tmp_path / "data").start()
    try:
        assert gw.proc is not None
        workers = _sfn_children(gw.proc.pid)
        assert len(workers) == 1
        gw.proc.kill()
        gw.proc.wait(timeout=30)
        wait_for(lambda: _gone(workers[0]), timeout=20)
    finally:
        if gw.proc is not None and gw.proc.poll() is None:
            gw.stop()


def _sfn_children(pid: int) -> list[int]:
    """The Step Functions processes among `pid`'s children (started by any of its threads)."""
    children: list[str] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children += (task / "children").read_text().split()
        except FileNotFoundError:  # a thread that just ended
            continue
    return [int(c) for c in children if b"orbital.local.sfn_child" in Path(f"/proc/{c}/cmdline").read_bytes()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the child through /proc")
def test_orbital_dev_can_interpret_in_its_own_process(tmp_path: Path) -> None:
    gw = GatewayProcess(tmp_path / "data", extra_args=["--step-functions-in-process"]).start()
    try:
        assert gw.proc is not None and _sfn_children(gw.proc.pid) == []
        with GatewayClient(gw.url) as node, GatewayClient(gw.url) as caller:
            node.connect(
                "node", "n-in", tools=[{"name": "Echo", "inputSchema": {"type": "object"}}], nodeRuntime=RUNTIME
            )
            caller.connect("client")
            wait_for(lambda: any(t["name"] == "n-in__Echo" for t in caller.call("tools.list")["tools"]))
            frame = {"type": "req", "id": "t1", "method": "tool.invoke", "params": {"tool": "n-in__Echo", "args": {}}}
            caller.send_raw(json.dumps(frame))
            evt = node.next_event("tool.invoke", timeout=10)
            node.call("tool.result", {"callId": evt["payload"]["callId"], "result": {"ok": 1}})
            answer = caller.wait_response("t1", timeout=30)
            assert answer["ok"] is True and answer["payload"]["result"] == {"ok": 1}, answer
    finally:
        gw.stop()


def test_a_process_that_does_not_start_leaves_them_in_the_gateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orbital.local import sfn_worker

    def refuse(self: Any, *args: Any, **kwargs: Any) -> None:
        raise sfn_worker.WorkerGoneError("not today")

    monkeypatch.setattr(sfn_worker.StepFunctionsProcess, "connect", refuse)
    running = in_process_gateway(tmp_path / "data", persist=False)
    gw = next(running)
    try:
        assert gw.stack.states is None
        arn = gw.stack.state_machine_arns["DeferredCallStateMachine"]
        body = {"due": 1_000_000, "waitSeconds": 0}  # a second long past, with no call due in it
        assert gw.stack.workflows.start(arn, "here", body) is True
        started = arn.replace(":stateMachine:", ":execution:") + ":here"
        wait_for(lambda: _status(gw, started) == "SUCCEEDED")
        assert gw.stack.workflows.status(started) == "SUCCEEDED"
    finally:
        with pytest.raises(StopIteration):
            next(running)
