"""The Workflows port's contract (`orbital.ports.workflows`): the same tests against both backends, each running the
template's own AgentTurnStateMachine (its definition from statemachines/, its substitutions resolved as the local
stack resolves them):

- `boto3`: `StepFunctionsWorkflows` on moto (`mock_aws`, executions interpreted), its Lambda tasks answered by the
  test's script through the local stack's Lambda hook (`orbital.local.step_functions.use_functions`), and a token
  of an execution that is over answered InvalidToken as AWS answers it (`ready_task_callbacks`: plain moto accepts
  a SendTaskFailure for it);
- `local`: `LocalWorkflows` over a real Step Functions process (`orbital.local.sfn_worker.StepFunctionsProcess`, a
  child process running moto), its Lambda tasks coming back to this process's script over the socket pair.

The script plays the agent's steps: a turn asks to wait for tools (the execution waits on a task token, which the
`register` step hands to the test), the next turn ends the run, and `fail` records the error it was given.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from orbital.ports.workflows import Workflows

from tests.conftest import ROOT, template, wait_for

FUNCTION = "AgentStepsFunction"
MACHINE = "AgentTurnStateMachine"


class AgentSteps:
    """The AgentSteps function as the state machine sees it: what each step answers, and what it was told."""

    def __init__(self) -> None:
        self.tokens: dict[str, queue.Queue[str]] = {}
        self.failures: dict[str, Any] = {}
        self._lock = threading.Lock()

    def token_of(self, execution: str, timeout: float = 30) -> str:
        """The task token the execution's `register` step was given (waits for it)."""
        return self._queue(execution).get(timeout=timeout)

    def _queue(self, execution: str) -> queue.Queue[str]:
        with self._lock:
            return self.tokens.setdefault(execution, queue.Queue())

    def __call__(self, name: str, payload: bytes | str | None) -> tuple[bytes, bool]:
        assert name.split(":")[-1] == FUNCTION, name
        event = json.loads(payload or "{}")
        step = event["step"]
        base = {"sessionKey": event.get("sessionKey"), "runId": event.get("runId")}
        if step == "turn":
            # the first turn waits for tools; the turn after the wait ends the run
            after = "done" if event.get("next") == "wait" else "wait"
            answer = {**base, "iteration": 0, "next": after, "waitSeconds": 120}
        elif step == "register":
            self._queue(str(event["execution"])).put(str(event["taskToken"]))
            answer = {}
        elif step == "fail":
            with self._lock:
                self.failures[str(event["execution"])] = event.get("error")
            answer = {}
        else:
            raise AssertionError(f"unexpected step {step!r}")
        return json.dumps(answer).encode(), False


class Backend:
    def __init__(self, workflows: Workflows, machine_arn: str, steps: AgentSteps) -> None:
        self.workflows, self.machine_arn, self.steps = workflows, machine_arn, steps

    def execution_arn(self, name: str) -> str:
        return self.machine_arn.replace(":stateMachine:", ":execution:") + f":{name}"

    def start(self, name: str) -> str:
        payload = {"job": "turn", "sessionKey": "s", "runId": name, "iteration": 0, "next": "start"}
        assert self.workflows.start(self.machine_arn, name, payload) is True
        return self.execution_arn(name)

    def settles(self, execution_arn: str, status: str) -> bool:
        wait_for(lambda: self.workflows.status(execution_arn) == status, timeout=30)
        return True


@contextlib.contextmanager
def _boto3_backend(steps: AgentSteps) -> Iterator[Backend]:
    import boto3
    from moto import mock_aws
    from orbital.aws.workflows import StepFunctionsWorkflows
    from orbital.local import stack, step_functions

    kept = step_functions._functions
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}):
        step_functions.index_executions()
        step_functions.ready_task_callbacks()  # as on AWS, a token of an execution that is over is InvalidToken
        step_functions.cache_state_machine_parsing()  # a Lambda task of a template function calls the script
        step_functions.use_functions({FUNCTION}, steps)
        client = boto3.client("stepfunctions", region_name="us-east-1")
        arns = stack.create_state_machines(
            lambda service: boto3.client(service, region_name="us-east-1"), ROOT, template()
        )
        try:
            yield Backend(StepFunctionsWorkflows(client), arns[MACHINE], steps)
        finally:
            for execution in client.list_executions(stateMachineArn=arns[MACHINE], statusFilter="RUNNING")[
                "executions"
            ]:
                with contextlib.suppress(Exception):
                    client.stop_execution(executionArn=execution["executionArn"])
            step_functions._functions = kept


@contextlib.contextmanager
def _local_backend(steps: AgentSteps) -> Iterator[Backend]:
    from orbital.local import stack
    from orbital.local.sfn_worker import StepFunctionsProcess
    from orbital.local.workflows import LocalWorkflows, forwarded

    process = StepFunctionsProcess()
    process.spawn()
    try:
        process.connect({FUNCTION: {}}, steps)
        call = forwarded(lambda: process)
        request = stack.state_machine_requests(ROOT, template())[MACHINE]
        arn = call("create_state_machine", request)["stateMachineArn"]
        yield Backend(LocalWorkflows(call), arn, steps)
    finally:
        process.stop()


@pytest.fixture(params=["boto3", "local"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    steps = AgentSteps()
    make = _boto3_backend if request.param == "boto3" else _local_backend
    with make(steps) as made:
        yield made


def test_an_execution_waits_on_its_token_and_succeed_lets_it_go_on(backend: Backend) -> None:
    execution = backend.start("run-succeed")
    token = backend.steps.token_of("run-succeed")
    assert backend.workflows.status(execution) == "RUNNING"
    assert backend.workflows.succeed(token, {"answered": 1}) is True
    assert backend.settles(execution, "SUCCEEDED")
    assert backend.steps.failures == {}


def test_a_token_whose_wait_is_over_is_no_error(backend: Backend) -> None:
    execution = backend.start("run-twice")
    token = backend.steps.token_of("run-twice")
    assert backend.workflows.succeed(token, {}) is True
    assert backend.settles(execution, "SUCCEEDED")
    assert backend.workflows.succeed(token, {}) is False
    assert backend.workflows.fail(token, error="Late", cause="after the end") is False


def test_an_unknown_token_is_no_error(backend: Backend) -> None:
    assert backend.workflows.succeed("not-a-token", {}) is False
    assert backend.workflows.fail("not-a-token", error="X", cause="y") is False


def test_fail_hands_the_error_and_cause_to_the_execution(backend: Backend) -> None:
    execution = backend.start("run-fail")
    token = backend.steps.token_of("run-fail")
    assert backend.workflows.fail(token, error="NodeLost", cause="the node went away") is True
    assert backend.settles(execution, "SUCCEEDED")  # its Fail step catches every error, then the run is done
    assert backend.steps.failures["run-fail"]["Error"] == "NodeLost"  # (moto does not carry the cause along)


def test_a_name_taken_with_another_input_is_refused(backend: Backend) -> None:
    backend.start("run-name")
    other = {"job": "turn", "sessionKey": "other", "runId": "run-name", "iteration": 0, "next": "start"}
    assert backend.workflows.start(backend.machine_arn, "run-name", other) is False


def test_stop_is_accepted_for_a_running_execution_and_refused_for_a_missing_one(backend: Backend) -> None:
    """(What a stopped execution then shows is the service's: moto leaves one waiting on a token RUNNING.)"""
    execution = backend.start("run-stop")
    backend.steps.token_of("run-stop")
    backend.workflows.stop(execution, error="Cancelled", cause="stopped by the user")
    with pytest.raises(Exception) as refused:
        backend.workflows.stop(backend.execution_arn("never-started"), error="Cancelled", cause="nothing to stop")
    assert _error_code(refused.value) == "ExecutionDoesNotExist"


def test_an_execution_that_does_not_exist_has_no_status(backend: Backend) -> None:
    assert backend.workflows.status(backend.execution_arn("never-started")) is None


def test_errors_other_than_the_expected_ones_are_raised(backend: Backend) -> None:
    missing_machine = backend.machine_arn + "-missing"
    with pytest.raises(Exception) as refused:
        backend.workflows.start(missing_machine, "run-nowhere", {"job": "turn"})
    assert _error_code(refused.value) == "StateMachineDoesNotExist"


def _error_code(exc: BaseException) -> str:
    """The AWS error code a backend raised: botocore's ClientError, or the local process's `WorkerRefusedError`."""
    code = getattr(exc, "error_code", None) or getattr(exc, "response", {}).get("Error", {}).get("Code")
    return str(code)
