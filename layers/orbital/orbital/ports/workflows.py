"""The Workflows port: the state machines' executions (Step Functions on AWS, its local stand-in in `orbital dev`).

What the gateway asks of them, and nothing more: start an execution by name, stop one, tell a waiting task its
outcome (`SendTaskSuccess` / `SendTaskFailure`) and ask whether an execution still runs. The two outcomes every
caller tells apart are answers, not exceptions: a name already taken (`start` returns False) and a task token whose
wait is over (`succeed` / `fail` return False). Anything else (the service unreachable, throttled, refusing the
request) is raised.

Backends: `orbital.aws.workflows.StepFunctionsWorkflows` (boto3) and `orbital.local.workflows.LocalWorkflows` (the
local gateway's Step Functions process, or its interpreter in process). They implement this Protocol structurally
and never import it; `tests/contract/test_workflows_contract.py` holds both to it.
"""

from __future__ import annotations

from typing import Any, Protocol


class Workflows(Protocol):
    def start(self, state_machine_arn: str, name: str, payload: dict[str, Any]) -> bool:
        """Start an execution of `state_machine_arn` named `name` with `payload` (JSON) as its input. False when an
        execution of that name exists already with another input (the same input: started, as AWS answers)."""
        ...

    def stop(self, execution_arn: str, *, error: str, cause: str) -> None:
        """Stop a running execution (one already over is left as it is)."""
        ...

    def succeed(self, token: str, output: dict[str, Any]) -> bool:
        """Let the task waiting with `token` go on with `output`. False when nothing waits on it any more (its
        execution ended, timed out, or the token is unknown)."""
        ...

    def fail(self, token: str, *, error: str, cause: str) -> bool:
        """Fail the task waiting with `token` with `error` and `cause`. False as for `succeed`."""
        ...

    def status(self, execution_arn: str) -> str | None:
        """The execution's status (`RUNNING`, `SUCCEEDED`, `FAILED`, `TIMED_OUT`, `ABORTED`), None if there is no
        such execution."""
        ...
