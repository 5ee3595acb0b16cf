"""Step Functions through boto3: the AWS backend of the Workflows port (`orbital.ports.workflows`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from botocore.client import BaseClient

TASK_OVER = frozenset({"TaskTimedOut", "InvalidToken", "TaskDoesNotExist"})
"""The errors of `SendTask*` that mean nothing waits on the token any more."""


def error_code(exc: BaseException) -> str | None:
    """The AWS error code of a botocore ClientError (None for any other exception)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    code = response.get("Error", {}).get("Code")
    return str(code) if code else None


class StepFunctionsWorkflows:
    """The executions of the deployment's state machines, through one boto3 Step Functions client."""

    def __init__(self, client: BaseClient) -> None:
        self.client = client

    def start(self, state_machine_arn: str, name: str, payload: dict[str, Any]) -> bool:
        try:
            self.client.start_execution(stateMachineArn=state_machine_arn, name=name, input=json.dumps(payload))
        except self.client.exceptions.ExecutionAlreadyExists:
            return False
        return True

    def stop(self, execution_arn: str, *, error: str, cause: str) -> None:
        self.client.stop_execution(executionArn=execution_arn, error=error, cause=cause)

    def succeed(self, token: str, output: dict[str, Any]) -> bool:
        try:
            self.client.send_task_success(taskToken=token, output=json.dumps(output))
        except Exception as exc:
            if error_code(exc) in TASK_OVER:
                return False
            raise
        return True

    def fail(self, token: str, *, error: str, cause: str) -> bool:
        try:
            self.client.send_task_failure(taskToken=token, error=error, cause=cause)
        except Exception as exc:
            if error_code(exc) in TASK_OVER:
                return False
            raise
        return True

    def status(self, execution_arn: str) -> str | None:
        try:
            found = self.client.describe_execution(executionArn=execution_arn)
        except self.client.exceptions.ExecutionDoesNotExist:
            return None
        return str(found["status"])
