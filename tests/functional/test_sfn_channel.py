"""The Step Functions process's channel and its `StartExecution`: an answer with work after it is sent before the
work runs, the requests it names are answered on the reading thread, and an execution a `StartExecution` creates
is held until its answer is out, then runs."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

import boto3
import pytest
from orbital.local.sfn_worker import AfterReply, WorkerChannel, Workers, held_starts, hold_execution_starts

from tests.conftest import wait_for


def _describe(exc: BaseException) -> tuple[str, str, int]:
    return type(exc).__name__, str(exc), 500


@pytest.fixture
def pair() -> Iterator[tuple[Connection, Connection]]:
    ours, theirs = socket.socketpair()
    a, b = Connection(os.dup(ours.fileno())), Connection(os.dup(theirs.fileno()))
    ours.close()
    theirs.close()
    yield a, b
    a.close()
    b.close()


def test_after_reply_work_runs_once_the_answer_is_sent(pair: tuple[Connection, Connection]) -> None:
    a, b = pair
    events: list[str] = []
    answered = threading.Event()

    def after() -> None:
        # the asking side has its answer before this runs: it recorded it, or is about to
        assert answered.wait(10)
        events.append("after")

    def serve(kind: str, payload: Any) -> Any:
        if kind == "later":
            return AfterReply({"value": payload}, after)
        return {"plain": payload}

    server = WorkerChannel(a, serve, Workers("orbital-test-serve").run, _describe, "orbital-test-server")
    client = WorkerChannel(
        b, lambda kind, payload: None, Workers("orbital-test-client").run, _describe, "orbital-test-c"
    )
    assert client.request("later", 7) == {"value": 7}
    events.append("answered")
    answered.set()
    wait_for(lambda: events == ["answered", "after"])
    assert client.request("plain", 1) == {"plain": 1}
    server.close()
    client.close()
    # each reading thread saw its socket end before its descriptor was closed (a number that can go to the next)
    assert server.closed.is_set() and client.closed.is_set()


def test_inline_requests_are_answered_on_the_reading_thread(pair: tuple[Connection, Connection]) -> None:
    a, b = pair
    threads: dict[str, str] = {}

    def serve(kind: str, payload: Any) -> Any:
        threads[kind] = threading.current_thread().name
        return True

    server = WorkerChannel(
        a, serve, Workers("orbital-test-pool").run, _describe, "orbital-test-reader", lambda kind, _: kind == "quick"
    )
    client = WorkerChannel(b, lambda kind, payload: None, Workers("orbital-test-c2").run, _describe, "orbital-test-c2r")
    assert client.request("quick", None) and client.request("slow", None)
    assert threads == {"quick": "orbital-test-reader", "slow": "orbital-test-pool"}
    server.close()
    client.close()
    assert server.closed.is_set() and client.closed.is_set()


PASS = json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "Result": {"ok": 1}, "End": True}}})


def test_an_execution_started_while_held_runs_once_released(aws: None) -> None:
    hold_execution_starts()
    hold_execution_starts()  # idempotent
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    arn = sfn.create_state_machine(name="held", definition=PASS, roleArn="arn:aws:iam::123456789012:role/r")[
        "stateMachineArn"
    ]
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    backend = stepfunctions_parser_backends["123456789012"]["us-east-1"]
    with held_starts() as held:
        execution = backend.start_execution(arn, name="first", execution_input="{}")
    # answered: the execution exists and reads as running, but nothing of it has run (it waits in `held`)
    assert len(held) == 1
    described = sfn.describe_execution(executionArn=execution.exec_arn)
    assert described["status"] == "RUNNING"
    entered = [e["type"] for e in sfn.get_execution_history(executionArn=execution.exec_arn)["events"]]
    assert "PassStateEntered" not in entered
    held[0]()
    wait_for(lambda: sfn.describe_execution(executionArn=execution.exec_arn)["status"] == "SUCCEEDED")
    # outside a held block, executions start at once as before
    started = sfn.start_execution(stateMachineArn=arn, name="second", input="{}")["executionArn"]
    wait_for(lambda: sfn.describe_execution(executionArn=started)["status"] == "SUCCEEDED")


def test_a_failed_start_releases_what_it_held(aws: None) -> None:
    hold_execution_starts()
    ran: list[int] = []
    with pytest.raises(RuntimeError, match="refused"):
        with held_starts() as held:
            held.append(lambda: ran.append(1))
            raise RuntimeError("refused")
    assert ran == [1]
