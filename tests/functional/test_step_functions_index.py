"""moto's Step Functions with `index_executions` (names and running executions indexed): StartExecution's name rules
and the SendTask* answers are moto's, and what is indexed as live shrinks as executions end."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.stepfunctions.parser.models import stepfunctions_parser_backends
from orbital.engines import deferred
from orbital.local import step_functions as stack
from orbital.store import keys

from tests.conftest import ROOT, wait_for

EARLIER_DEFINITION = ROOT / "tests" / "support" / "per_call_wait.asl.json"
"""The earlier deferred_call definition, one execution per call whose `register` step records a task token: what
executions started before the timers of due seconds still run (and a machine that waits for tokens)."""


@pytest.fixture
def per_call(flows: dict[str, str]) -> str:
    """That definition created beside the template's machines, its Lambda tasks run by the same function."""
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    function = f"arn:aws:lambda:{stack.REGION}:{stack.ACCOUNT}:function:WorkflowStepsFunction"
    text = EARLIER_DEFINITION.read_text().replace("${WorkflowStepsFunctionArn}", function)
    role = sfn.describe_state_machine(stateMachineArn=flows["DeferredCallStateMachine"])["roleArn"]
    created = sfn.create_state_machine(name="EarlierDeferredCall", definition=text, roleArn=role)
    return str(created["stateMachineArn"])


def _pending(services: Any, call_id: str, timeout_ms: int = 60_000) -> deferred.PendingCall:
    call = deferred.PendingCall(
        call_id=call_id, kind="tool", node_id="n1", node_connection_id="nc1", timeout_ms=timeout_ms, created_at=0
    )
    deferred.create(services, call)
    return call


def _body(call_id: str) -> str:
    return json.dumps({"callId": call_id, "kind": "tool", "timeoutSeconds": 60})


def _waiting(sfn: Any, arn: str, services: Any, call_id: str) -> tuple[str, str]:
    """An execution waiting for its call's answer: its ARN, and the token its register step recorded."""
    _pending(services, call_id)
    started = sfn.start_execution(stateMachineArn=arn, name=call_id, input=_body(call_id))["executionArn"]
    return started, wait_for(lambda: _token(services, call_id))


def _answered(sfn: Any, arn: str, services: Any, call_id: str) -> str:
    """An execution for a call answered before it started: it ends by itself."""
    _pending(services, call_id)
    assert deferred.claim(services, call_id) is not None
    return str(sfn.start_execution(stateMachineArn=arn, name=call_id, input=_body(call_id))["executionArn"])


def _token(services: Any, call_id: str) -> str | None:
    rec = services.table.get(keys.pending_call(call_id))
    return None if rec is None else rec.attrs.get("tok")


def _machine(arn: str) -> Any:
    backend = stepfunctions_parser_backends["123456789012"]["us-east-1"]
    return next(m for m in backend.state_machines if m.arn == arn)


def _status(sfn: Any, arn: str) -> str:
    return str(sfn.describe_execution(executionArn=arn)["status"])


def test_names_tokens_and_the_live_set(per_call: str, services: Any) -> None:
    stack.index_executions()  # idempotent
    stack.ready_task_callbacks()  # as the local stack answers tokens (its listing is over the index)
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    machine = _machine(per_call)
    assert isinstance(machine.executions, stack._Executions)
    arn = per_call

    # a waiting execution: its register step records its token on the pending call
    started, token = _waiting(sfn, arn, services, "idx-wait")
    # the same name and input while it runs: the same execution; another input: refused
    assert sfn.start_execution(stateMachineArn=arn, name="idx-wait", input=_body("idx-wait"))["executionArn"] == started
    with pytest.raises(ClientError) as refused:
        sfn.start_execution(stateMachineArn=arn, name="idx-wait", input=json.dumps({"callId": "other"}))
    assert refused.value.response["Error"]["Code"] == "ExecutionAlreadyExists"

    # executions whose calls were already answered end by themselves
    ended = [_answered(sfn, arn, services, f"idx-done-{i}") for i in range(5)]
    wait_for(lambda: all(_status(sfn, e) == "SUCCEEDED" for e in ended))
    # a finished execution's name stays taken, with any input
    with pytest.raises(ClientError) as taken:
        sfn.start_execution(stateMachineArn=arn, name="idx-done-0", input=json.dumps({"callId": "idx-done-0"}))
    assert taken.value.response["Error"]["Code"] == "ExecutionAlreadyExists"

    # the running ones are what is listed as running, and the ended ones have left the live set
    running = machine.executions.running()
    assert [e.exec_arn for e in running] == [started]
    assert list(machine.executions.live.values()) == running
    assert len(machine.executions) == 6  # every execution is still kept (and described) as on AWS

    # a token of nobody's is refused; the waiting execution's token ends it
    with pytest.raises(ClientError) as unknown:
        sfn.send_task_success(taskToken="no-such-token", output="{}")
    assert unknown.value.response["Error"]["Code"] == "InvalidToken"
    sfn.send_task_success(taskToken=token, output="{}")
    wait_for(lambda: _status(sfn, started) == "SUCCEEDED")
    assert machine.executions.running() == []
    # and once it is over, its token is refused too
    with pytest.raises(ClientError) as late:
        sfn.send_task_failure(taskToken=token, error="Late", cause="")
    assert late.value.response["Error"]["Code"] == "InvalidToken"


def test_an_unindexed_list_is_answered_as_moto_does(per_call: str, services: Any) -> None:
    """A state machine created before the patch keeps moto's plain list; its names and tokens still work."""
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    machine = _machine(per_call)
    machine.executions = list(machine.executions)
    arn = per_call
    started, token = _waiting(sfn, arn, services, "plain-wait")
    assert (
        sfn.start_execution(stateMachineArn=arn, name="plain-wait", input=_body("plain-wait"))["executionArn"]
        == started
    )
    sfn.send_task_success(taskToken=token, output="{}")
    wait_for(lambda: _status(sfn, started) == "SUCCEEDED")


class _JustStarted:
    """An execution as moto lists it between `StartExecution` and its thread setting up its environment."""

    name = "just-started"
    status = "RUNNING"
    exec_status = SimpleNamespace(value="RUNNING")
    exec_worker = None


def test_a_token_reaches_its_execution_past_one_just_started(per_call: str, services: Any) -> None:
    """`SendTaskSuccess` asks the running executions, newest first, for the token: one that has no environment yet
    is passed over (asking it raised AttributeError, and the answer was lost)."""
    stack.ready_task_callbacks()
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    machine = _machine(per_call)
    started, token = _waiting(sfn, per_call, services, "race-wait")
    fake = _JustStarted()
    machine.executions.append(fake)
    try:
        sfn.send_task_success(taskToken=token, output="{}")
    finally:
        machine.executions.remove(fake)
    wait_for(lambda: _status(sfn, started) == "SUCCEEDED")
    assert fake not in machine.executions and "just-started" not in machine.executions.by_name


def test_the_oldest_finished_executions_are_let_go(
    per_call: str, services: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stack, "FINISHED_EXECUTIONS_KEPT", 3)
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    machine = _machine(per_call)
    arn = per_call
    waiting, token = _waiting(sfn, arn, services, "keep-wait")
    ended = []
    for i in range(6):
        ended.append(_answered(sfn, arn, services, f"keep-done-{i}"))
        wait_for(lambda e=ended[-1]: _status(sfn, e) == "SUCCEEDED")
    machine.executions.running()  # looks at them again
    # the running one and the three newest finished are kept; the older finished are gone, as if expired
    assert sorted(e.name for e in machine.executions) == ["keep-done-3", "keep-done-4", "keep-done-5", "keep-wait"]
    for old in ended[:3]:
        with pytest.raises(ClientError) as gone:
            sfn.describe_execution(executionArn=old)
        assert gone.value.response["Error"]["Code"] == "ExecutionDoesNotExist"
    assert _status(sfn, ended[5]) == "SUCCEEDED"
    sfn.send_task_success(taskToken=token, output="{}")  # the running one is still found by its token
    wait_for(lambda: _status(sfn, waiting) == "SUCCEEDED")


class _Looked:
    """An execution or a thread that counts how often its state is looked at."""

    looks = 0

    def __init__(self, name: str, running: bool = True) -> None:
        self.name = name
        self.running = running

    @property
    def exec_status(self) -> Any:
        _Looked.looks += 1
        return SimpleNamespace(value="RUNNING" if self.running else "SUCCEEDED")

    def is_alive(self) -> bool:
        _Looked.looks += 1
        return self.running


def test_a_start_does_not_look_at_every_running_execution_or_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """With many executions running (a busy gateway's pending calls), each start looks at a few of them, not all:
    the looks over 1,000 starts grow with the starts, not with starts x running."""
    from moto.stepfunctions.parser import utils

    threads: list[Any] = []
    monkeypatch.setattr(utils, "TMP_THREADS", threads)
    monkeypatch.setattr(stack, "_threads_kept", 0)
    executions = stack._Executions()
    _Looked.looks = 0
    for i in range(1000):
        executions.append(_Looked(f"e{i}"))
        threads.extend(_Looked(f"t{i}-{j}") for j in range(3))
    assert len(executions.live) == 1000 and len(threads) == 3000  # all still running: nothing to let go
    assert _Looked.looks < 10 * 1000, _Looked.looks  # a scan per start would be ~2,000,000
    # what ended still goes: the oldest threads at the next start, the executions at the next sweep
    for thread in threads[:30]:
        thread.running = False
    for execution in list(executions.live.values())[:10]:
        execution.running = False
    executions.append(_Looked("last"))
    assert len(threads) == 2970
    assert len(executions.running()) == 991 and len(executions.live) == 991
