"""Step Functions calls the gateway forwards to its Step Functions process: how long they may wait, and the errors."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from orbital.local.sfn_worker import CALL_TIMEOUT, LOOP_CALL_TIMEOUT, WorkerGoneError, WorkerRefusedError
from orbital.local.workflows import forwarded


class Process:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.timeouts: list[float] = []

    def call(self, method: str, params: dict[str, Any], *, timeout: float) -> dict[str, Any]:
        self.timeouts.append(timeout)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return dict(self.answer)


def _on_the_loop(run: Any) -> Any:
    async def call() -> Any:
        return run("start_execution", {"name": "x"})

    return asyncio.run(call())


def test_a_call_on_the_event_loop_waits_briefly_and_a_silent_process_is_a_503() -> None:
    process = Process({"executionArn": "arn:x"})
    served = SimpleNamespace(states=process)
    run = forwarded(lambda: served.states)
    assert run("start_execution", {"name": "x"}) == {"executionArn": "arn:x"}
    assert _on_the_loop(run) == {"executionArn": "arn:x"}
    assert process.timeouts == [CALL_TIMEOUT, LOOP_CALL_TIMEOUT] and LOOP_CALL_TIMEOUT < CALL_TIMEOUT

    served.states = Process(TimeoutError("no answer"))
    with pytest.raises(WorkerRefusedError) as silent:
        _on_the_loop(run)
    assert silent.value.status == 503 and silent.value.error_code == "ServiceUnavailable"
    assert f"within {LOOP_CALL_TIMEOUT:g} s" in silent.value.message

    for gone in (None, Process(WorkerGoneError("died"))):
        served.states = gone
        with pytest.raises(WorkerRefusedError) as ended:
            run("start_execution", {})
        assert (ended.value.status, ended.value.message) == (503, "the local Step Functions process has ended")
