"""What moto's Step Functions interpreter keeps for as long as the process lives, and the local stack lets go of: the
copies of state machines it makes (`untrack_models`), and the interpreter's finished threads (`index_executions`)."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from moto.stepfunctions.models import StateMachine
from orbital.local import step_functions as stack

from tests.conftest import wait_for


def test_executions_leave_nothing_behind(flows: dict[str, str], services: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from moto.stepfunctions.parser.utils import TMP_THREADS

    stack.untrack_models()
    # an earlier test of this process may have left an execution waiting (its threads live on): not this test's
    others = {t for t in TMP_THREADS if t.is_alive()}
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
            wait_for(lambda: not any(t.is_alive() for t in TMP_THREADS if t not in others), timeout=20)
            finished = [t for t in TMP_THREADS if t not in others]
            assert finished
            # threads still alive at the front of the list (`others`) stop the cheap removal from the front, and a
            # whole sweep waits until the list has doubled since the last one (amortized): this start looks at all
            monkeypatch.setattr(stack, "_threads_kept", 0)
        started.append(sfn.start_execution(stateMachineArn=arn, name=call_id, input=body)["executionArn"])
    wait_for(lambda: sfn.describe_execution(executionArn=started[-1])["status"] == "SUCCEEDED")
    # each execution's copy of its state machine is not kept, and neither are its finished threads (three each)
    assert len(StateMachine.instances_tracked) == machines  # type: ignore[attr-defined]
    assert len([t for t in TMP_THREADS if t not in others]) <= 3
    assert not any(t in TMP_THREADS for t in finished)
