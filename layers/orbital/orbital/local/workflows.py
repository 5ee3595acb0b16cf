"""The local backend of the Workflows port (`orbital.ports.workflows`): the state machines' executions in the local
gateway's Step Functions process (`orbital.local.sfn_worker`), or in moto's interpreter in this process when that
process could not start.

A call goes straight to what answers it, with boto3's parameters (they are the wire shapes): over the socket pair to
the process, or to moto's response class here (`orbital.local.step_functions.moto_action`). No botocore request is
built, signed or parsed. An error comes back as `Refused` with the AWS error code, message and HTTP status; the port's
two expected outcomes (a name taken, a token whose wait is over) are answers, as on the boto3 backend. Calls are
counted like the boto3 factory's (`orbital.aws.clients.count`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

from orbital.aws import clients
from orbital.local.sfn_worker import (
    CALL_TIMEOUT,
    LOOP_CALL_TIMEOUT,
    StepFunctionsProcess,
    WorkerGoneError,
    WorkerRefusedError,
)
from orbital.local.step_functions import error_answer, moto_action

Call = Callable[[str, dict[str, Any]], dict[str, Any]]
"""One Step Functions operation (`start_execution`, ...) with boto3's parameters: its result, or `Refused`."""

TASK_OVER = frozenset({"TaskTimedOut", "InvalidToken", "TaskDoesNotExist"})
"""The errors of `SendTask*` that mean nothing waits on the token any more."""

_OPERATIONS = {
    "start_execution": "StartExecution",
    "stop_execution": "StopExecution",
    "send_task_success": "SendTaskSuccess",
    "send_task_failure": "SendTaskFailure",
    "describe_execution": "DescribeExecution",
}


class LocalWorkflows:
    """The Workflows port over `call` (the local stack's: `orbital.local.stack.LocalStack.call`)."""

    def __init__(self, call: Call) -> None:
        self._call = call

    def _run(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        clients.count("sfn", _OPERATIONS.get(method, method))
        return self._call(method, params)

    def start(self, state_machine_arn: str, name: str, payload: dict[str, Any]) -> bool:
        params = {"stateMachineArn": state_machine_arn, "name": name, "input": json.dumps(payload)}
        try:
            self._run("start_execution", params)
        except WorkerRefusedError as exc:
            if exc.error_code == "ExecutionAlreadyExists":
                return False
            raise
        return True

    def stop(self, execution_arn: str, *, error: str, cause: str) -> None:
        self._run("stop_execution", {"executionArn": execution_arn, "error": error, "cause": cause})

    def succeed(self, token: str, output: dict[str, Any]) -> bool:
        return self._answer("send_task_success", {"taskToken": token, "output": json.dumps(output)})

    def fail(self, token: str, *, error: str, cause: str) -> bool:
        return self._answer("send_task_failure", {"taskToken": token, "error": error, "cause": cause})

    def _answer(self, method: str, params: dict[str, Any]) -> bool:
        try:
            self._run(method, params)
        except WorkerRefusedError as exc:
            if exc.error_code in TASK_OVER:
                return False
            raise
        return True

    def status(self, execution_arn: str) -> str | None:
        try:
            found = self._run("describe_execution", {"executionArn": execution_arn})
        except WorkerRefusedError as exc:
            if exc.error_code == "ExecutionDoesNotExist":
                return None
            raise
        return str(found["status"])


def forwarded(process: Callable[[], StepFunctionsProcess | None]) -> Call:
    """Calls answered by the Step Functions process `process()` gives (the one running now: it is started again if
    it dies). A call made on an event loop (a handler run on the bridge's) waits at most `LOOP_CALL_TIMEOUT`: every
    socket waits for that answer."""

    def call(method: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            asyncio.get_running_loop()
            timeout = LOOP_CALL_TIMEOUT
        except RuntimeError:
            timeout = CALL_TIMEOUT
        running = process()
        try:
            if running is None:
                raise WorkerGoneError("no Step Functions process")
            return running.call(method, params, timeout=timeout)
        except WorkerGoneError:
            raise WorkerRefusedError("ServiceUnavailable", "the local Step Functions process has ended", 503) from None
        except TimeoutError:
            message = f"the local Step Functions process did not answer within {timeout:g} s"
            raise WorkerRefusedError("ServiceUnavailable", message, 503) from None

    return call


def interpreted_here(region: str) -> Call:
    """Calls answered by moto's Step Functions in this process (behind `orbital.local.step_functions`' hooks, which
    the caller has installed)."""
    # lazy: moto loads only when the state machines are interpreted in this process, not in the usual child
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.stepfunctions.responses import StepFunctionResponse

    run = moto_action(StepFunctionResponse, region, DEFAULT_ACCOUNT_ID, contextlib.nullcontext)

    def call(method: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            return dict(run(method, params) or {})
        except WorkerRefusedError:
            raise
        except Exception as exc:
            raise WorkerRefusedError(*error_answer(exc, f"sfn.{method}")) from None

    return call


def stopped(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """The answer of a local stack that is not running (not started yet, or stopped)."""
    raise WorkerRefusedError("ServiceUnavailable", "the local Step Functions are not running", 503)
