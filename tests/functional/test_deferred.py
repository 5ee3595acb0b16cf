"""Deferred calls with their waits on deferred_call.asl.json executed by moto (one timer per due second): answers,
timeouts, a failing timer step, node loss, the sweep of overdue calls, and the steps kept for executions of the
earlier per-call definition."""

from __future__ import annotations

import json
from typing import Any

import boto3
from orbital.engines import deferred
from orbital.ports import lifecycle
from orbital.runtime import workflows
from orbital.store import keys

from tests.conftest import deferred_execution_arn, wait_for


def _events(sender: Any, connection_id: str, name: str) -> list[dict[str, Any]]:
    return [f for f in sender.frames_to(connection_id) if isinstance(f, dict) and f.get("event") == name]


def _responses(sender: Any, connection_id: str) -> list[dict[str, Any]]:
    return [f for f in sender.frames_to(connection_id) if isinstance(f, dict) and f.get("type") == "res"]


def _invoke(rpc: Any, tool: str, args: Any = None) -> str:
    frame = rpc.frame("tool.invoke", {"tool": tool, "args": args or {}})
    assert frame is None, f"tool.invoke must be deferred, got {frame}"
    return rpc.connection_id


def _sfn() -> Any:
    return boto3.client("stepfunctions", region_name="us-east-1")


def _states_entered(arn: str) -> list[str]:
    history = _sfn().get_execution_history(executionArn=arn)["events"]
    return [e["stateEnteredEventDetails"]["name"] for e in history if "stateEnteredEventDetails" in e]


def _finished(arn: str) -> dict[str, Any] | None:
    desc = _sfn().describe_execution(executionArn=arn)
    return desc if desc["status"] != "RUNNING" else None


def _timed_out_by(desc: dict[str, Any]) -> int:
    """How many calls a finished timer answered (the `due` step's result)."""
    return int(json.loads(desc["output"])["answered"]["outcome"]["timedOut"])


def _short_tool_timeout(client: Any) -> None:
    client.call("config.set", {"path": "timeouts.toolMs", "value": 1000})


def test_result_answers_the_client_and_the_timer_finds_the_call_answered(flows, connect, sender, services):
    node = connect("node", "n1")
    client = connect("client", "c1")
    _short_tool_timeout(client)
    _invoke(client, "n1__Bash", {"command": "echo hi"})
    evt = wait_for(lambda: _events(sender, node.connection_id, "tool.invoke"))[0]
    assert evt["payload"]["tool"] == "Bash"
    assert evt["payload"]["args"] == {"command": "echo hi"}
    call_id = evt["payload"]["callId"]
    timer = deferred_execution_arn(flows, services, call_id)
    assert _sfn().describe_execution(executionArn=timer)["status"] == "RUNNING"
    assert node.call("tool.result", {"callId": call_id, "result": {"output": "hi\n"}}) == {"ok": True}
    res = _responses(sender, client.connection_id)
    assert res == [{"type": "res", "id": res[0]["id"], "ok": True, "payload": {"result": {"output": "hi\n"}}}]
    done = wait_for(lambda: _finished(timer), timeout=15)
    assert done["status"] == "SUCCEEDED" and _timed_out_by(done) == 0
    assert _states_entered(timer) == ["WaitUntilDue", "AnswerDue", "Answered"]
    # a second answer is late: dropped, and the client hears nothing more
    assert node.call("tool.result", {"callId": call_id, "result": 1}) == {"ok": True, "dropped": True}
    assert len(_responses(sender, client.connection_id)) == 1


def test_calls_due_in_one_second_share_one_timer(flows, connect, sender, services, monkeypatch):
    """One execution per due second, not per call: it answers the calls still pending then, once each."""
    node = connect("node", "n1")
    client = connect("client", "c1")
    client.call("config.set", {"path": "timeouts.toolMs", "value": 3000})
    # the six calls are made at one instant (the gateway's clock held), so they are due in the same second however
    # long the machine takes to make them
    instant = services.now_ms()
    with monkeypatch.context() as held:
        held.setattr(services, "now_ms", lambda: instant)
        for n in range(6):
            _invoke(client, "n1__Bash", {"command": f"sleep {n}"})
    calls = [e["payload"]["callId"] for e in _events(sender, node.connection_id, "tool.invoke")]
    timers = {deferred_execution_arn(flows, services, call_id) for call_id in calls}
    started = _sfn().list_executions(stateMachineArn=flows["DeferredCallStateMachine"])["executions"]
    assert len(timers) == 1 and {e["executionArn"] for e in started} == timers  # six calls, one second
    answered = calls[::2]
    for call_id in answered:
        assert node.call("tool.result", {"callId": call_id, "result": "r"}) == {"ok": True}
    done = [wait_for(lambda arn=arn: _finished(arn), timeout=15) for arn in timers]
    assert all(d["status"] == "SUCCEEDED" for d in done)
    assert sum(_timed_out_by(d) for d in done) == 3
    res = _responses(sender, client.connection_id)
    assert [r["ok"] for r in res].count(True) == 3
    assert [r["error"]["code"] for r in res if not r["ok"]] == [504] * 3
    assert all(deferred.get(services, call_id).state == deferred.DONE for call_id in calls)


def test_timeout_answers_with_error_and_late_result_is_dropped(flows, connect, sender, services):
    node = connect("node", "n1")
    client = connect("client", "c1")
    _short_tool_timeout(client)
    _invoke(client, "n1__Bash", {"command": "sleep 100"})
    call_id = _events(sender, node.connection_id, "tool.invoke")[0]["payload"]["callId"]
    timer = deferred_execution_arn(flows, services, call_id)
    res = wait_for(lambda: _responses(sender, client.connection_id), timeout=15)[0]
    assert res["ok"] is False
    assert res["error"] == {"code": 504, "message": "Tool request timed out after 1000ms: n1__Bash", "retryable": True}
    done = wait_for(lambda: _finished(timer))
    assert done["status"] == "SUCCEEDED" and _timed_out_by(done) == 1
    assert node.call("tool.result", {"callId": call_id, "result": "late"}) == {"ok": True, "dropped": True}


def test_node_loss_fails_pending_calls_at_once(flows, connect, sender, services):
    node = connect("node", "n1")
    client = connect("client", "c1")
    _short_tool_timeout(client)
    _invoke(client, "n1__Bash", {"command": "sleep 100"})
    _invoke(client, "n1__Read", {"path": "/etc/hosts"})
    calls = [e["payload"]["callId"] for e in _events(sender, node.connection_id, "tool.invoke")]
    timers = {deferred_execution_arn(flows, services, call_id) for call_id in calls}
    lifecycle.disconnect(services, node.connection_id)
    errors = [r["error"] for r in _responses(sender, client.connection_id)]
    assert errors == [{"code": 503, "message": "Node disconnected: n1"}] * 2
    for timer in timers:  # nothing left for the timers
        done = wait_for(lambda arn=timer: _finished(arn), timeout=15)
        assert done["status"] == "SUCCEEDED" and _timed_out_by(done) == 0
    assert len(_responses(sender, client.connection_id)) == 2


def test_steps_of_the_earlier_per_call_executions_still_answer(flows, connect, sender, services, monkeypatch):
    """An execution started by the earlier definition (one per call) may still be running after an upgrade: its
    `register` step records its token on the call (or ends itself if the call is answered), its `timeout` and `fail`
    steps answer the caller, and whoever claims the call ends it with the token."""
    node = connect("node", "n1")
    client = connect("client", "c1")
    ended: list[tuple[str, str | None]] = []
    monkeypatch.setattr(
        deferred, "close_execution", lambda _services, token, **kw: ended.append((token, kw.get("error")))
    )
    for _ in range(3):
        _invoke(client, "n1__Bash", {"command": "x"})
    first, second, third = [e["payload"]["callId"] for e in _events(sender, node.connection_id, "tool.invoke")]

    assert workflows.handle_step({"step": "register", "callId": first, "taskToken": "tok-1"}) == {"registered": True}
    assert node.call("tool.result", {"callId": first, "result": "r"}) == {"ok": True}
    assert ended == [("tok-1", None)]  # the answer ended the earlier execution
    assert workflows.handle_step({"step": "register", "callId": first, "taskToken": "tok-2"}) == {"registered": False}
    assert ended[-1] == ("tok-2", None)  # answered before it registered: it ends itself

    assert workflows.handle_step({"step": "timeout", "callId": second}) == {"timedOut": True, "kind": "tool"}
    assert workflows.handle_step({"step": "timeout", "callId": second}) == {"timedOut": False}
    failure = {"step": "fail", "callId": third, "error": {"Error": "Boom"}}
    assert workflows.handle_step(failure) == {"failed": True}
    errors = [r["error"] for r in _responses(sender, client.connection_id) if not r["ok"]]
    assert [e["code"] for e in errors] == [504, 500]
    assert errors[1]["message"] == "Call failed: Boom"


def test_logs_get_round_trip_and_timeout(flows, connect, sender, services):
    node = connect("node", "n1")
    client = connect("client", "c1")
    assert client.frame("logs.get", {"lines": 5}) is None
    evt = _events(sender, node.connection_id, "logs.get")[0]["payload"]
    assert evt["lines"] == 5
    assert node.call("logs.result", {"callId": evt["callId"], "lines": ["a", "b"], "truncated": True}) == {"ok": True}
    assert _responses(sender, client.connection_id)[0]["payload"] == {
        "nodeId": "n1",
        "lines": ["a", "b"],
        "count": 2,
        "truncated": True,
    }
    client.call("config.set", {"path": "timeouts.logsMs", "value": 1000})
    assert client.frame("logs.get", {}) is None
    res = wait_for(lambda: _responses(sender, client.connection_id)[1:], timeout=15)[0]
    assert res["error"] == {"code": 504, "message": "logs.get timed out after 1000ms (node n1)", "retryable": True}


def test_checks_and_messages(flows, connect, sender, services):
    node = connect("node", "n1")
    other = connect("node", "n2")
    client = connect("client", "c1")
    assert client.error("tool.invoke", {}) == {"code": 400, "message": "tool required"}
    assert client.error("tool.invoke", {"tool": "Bash"}) == {"code": 404, "message": "No node provides tool: Bash"}
    assert client.error("tool.invoke", {"tool": "n9__Bash"}) == {
        "code": 404,
        "message": "No node provides tool: n9__Bash",
    }
    assert node.error("tool.invoke", {"tool": "n1__Bash"}) == {
        "code": 101,
        "message": "Method tool.invoke not allowed for mode node: Not connected",
    }
    assert node.error("tool.result", {"callId": "nope"}) == {"code": 404, "message": "Unknown callId"}
    assert node.error("tool.result", {}) == {"code": 400, "message": "callId required"}
    _invoke(client, "n1__Bash", {"command": "x"})
    call_id = _events(sender, node.connection_id, "tool.invoke")[0]["payload"]["callId"]
    assert other.error("tool.result", {"callId": call_id, "result": 1}) == {
        "code": 403,
        "message": "Node not authorized for this call",
    }
    assert client.error("logs.result", {"callId": call_id}) == {
        "code": 403,
        "message": "Method logs.result not allowed for mode client: Node not authorized for this call",
    }
    assert client.error("logs.get", {"lines": 0}) == {"code": 400, "message": "lines must be a positive number"}
    assert client.error("logs.get", {}) == {"code": 400, "message": "nodeId required when multiple nodes are connected"}
    assert client.error("logs.get", {"nodeId": "zz"}) == {"code": 503, "message": "Node not connected: zz"}
    assert client.error("node.exec.event", {"sessionId": "s"}) == {
        "code": 403,
        "message": "Method node.exec.event not allowed for mode client: Only node clients can submit exec events",
    }
    node.call("tool.result", {"callId": call_id, "result": 1})


def test_exec_events_are_stored_for_backgrounded_commands(flows, connect, sender, services):
    node = connect("node", "n1")
    client = connect("client", "c1")
    _invoke(client, "n1__Bash", {"command": "sleep 1", "background": True})
    call_id = _events(sender, node.connection_id, "tool.invoke")[0]["payload"]["callId"]
    node.call("tool.result", {"callId": call_id, "result": {"status": "running", "sessionId": "bg-1", "pid": 42}})
    assert node.call("node.exec.event", {"sessionId": "bg-1", "event": "started"}) == {"ok": True}
    assert node.call("node.exec.event", {"sessionId": "bg-1", "event": "bogus"}) == {"ok": True, "dropped": True}
    assert node.call("node.exec.event", {"sessionId": "unknown", "event": "finished"}) == {"ok": True, "dropped": True}
    ev = {"eventId": "e1", "sessionId": "bg-1", "event": "finished", "exitCode": 0, "outputTail": " done \n"}
    assert node.call("node.exec.event", ev) == {"ok": True}
    stored = services.table.query(keys.exec_events_pk("n1"))
    assert len(stored) == 1
    assert stored[0].data["callId"] == call_id
    assert stored[0].data["outputTail"] == "done"
    assert stored[0].data["exitCode"] == 0
    # a repeat of a delivered event is acknowledged (spec §14.2) and not stored or delivered again
    assert node.call("node.exec.event", ev) == {"ok": True}
    assert len(services.table.query(keys.exec_events_pk("n1"))) == 1


def test_pending_call_items_and_index(flows, connect, sender, services):
    connect("node", "n1")
    client = connect("client", "c1")
    _invoke(client, "n1__Bash", {"command": "x"})
    pending = deferred.pending_on_node(services, "n1")
    assert [p.tool for p in pending] == ["n1__Bash"]
    assert json.loads(json.dumps(pending[0].to_data()))["callerConnectionId"] == client.connection_id
    # an answered call leaves the node's index (which then holds only what is pending), its item stays a while
    node = services.connections.node("n1")
    assert node is not None
    assert deferred.claim(services, pending[0].call_id) is not None
    assert services.table.query_index(keys.node_calls_pk("n1")) == []
    assert deferred.get(services, pending[0].call_id).state == deferred.DONE


def test_a_client_chosen_call_id_is_data_not_an_execution_name(flows, connect, sender, services):
    node = connect("node", "n1")
    client = connect("client", "c1")
    call_id = "call #1 / für den Knoten: " + "x" * 120  # spaces, slashes, non-ASCII, over 80 characters
    params = {"callId": call_id, "tool": "n1__Bash", "args": {"command": "true"}, "sessionKey": "agent:main:main"}
    assert client.call("tool.request", params) == {"status": "sent"}
    evt = wait_for(lambda: _events(sender, node.connection_id, "tool.invoke"))[0]
    assert evt["payload"]["callId"] == call_id
    timer = deferred_execution_arn(flows, services, call_id)
    described = _sfn().describe_execution(executionArn=timer)
    assert described["name"].startswith("due-") and call_id not in described["input"]
    assert node.call("tool.result", {"callId": call_id, "result": {"output": ""}}) == {"ok": True}

    again = client.error("tool.request", params)
    assert again["code"] == 409 and again["message"] == f"callId already in use: {call_id}"
    too_long = client.error("tool.request", {**params, "callId": "y" * 257})
    assert too_long["code"] == 400 and "callId too long" in too_long["message"]


def test_an_answering_step_that_fails_once_is_retried(flows, connect, sender, services, monkeypatch):
    failing = {"left": 1}
    real = workflows.STEPS["due"]

    def flaky(services_: Any, event: dict[str, Any]) -> dict[str, Any]:
        if failing["left"]:
            failing["left"] -= 1
            raise RuntimeError("throttled")  # as a DynamoDB throttle would surface from the step's Lambda
        return real(services_, event)

    monkeypatch.setitem(workflows.STEPS, "due", flaky)
    node = connect("node", "n1")
    client = connect("client", "c1")
    _short_tool_timeout(client)
    _invoke(client, "n1__Bash", {"command": "x"})
    call_id = _events(sender, node.connection_id, "tool.invoke")[0]["payload"]["callId"]
    timer = deferred_execution_arn(flows, services, call_id)
    res = wait_for(lambda: _responses(sender, client.connection_id), timeout=15)[0]
    assert res["error"]["code"] == 504
    assert failing["left"] == 0
    done = wait_for(lambda: _finished(timer), timeout=15)
    assert done["status"] == "SUCCEEDED" and _timed_out_by(done) == 1


def test_a_call_left_pending_past_its_timeout_is_answered_by_the_scheduler(flows, connect, sender, services):
    """The backstop for a timer that ended without answering: the scheduler tick answers the call once it is well
    past its timeout."""
    from orbital.runtime import scheduler

    node = connect("node", "n1")
    client = connect("client", "c1")
    _invoke(client, "n1__Bash", {"command": "sleep 100"})
    call_id = _events(sender, node.connection_id, "tool.invoke")[0]["payload"]["callId"]
    call = deferred.get(services, call_id).call
    overdue_at = call.created_at + call.timeout_ms + deferred.OVERDUE_GRACE_MS
    minute = scheduler.SWEEP_EVERY_MS  # the sweep runs once a minute of the tick's clock: ticks a minute apart
    assert scheduler.tick(services, overdue_at - minute - 1)["callsSwept"] == 0
    assert _responses(sender, client.connection_id) == []
    assert deferred.get(services, call_id).state == deferred.PENDING
    assert scheduler.tick(services, overdue_at)["callsSwept"] == 1
    (res,) = _responses(sender, client.connection_id)
    timeout_ms = call.timeout_ms
    assert res["error"] == {
        "code": 504,
        "message": f"Tool request timed out after {timeout_ms}ms: n1__Bash",
        "retryable": True,
    }
    assert deferred.get(services, call_id).state == deferred.DONE
    assert scheduler.tick(services, overdue_at + minute)["callsSwept"] == 0  # answered once
    assert node.call("tool.result", {"callId": call_id, "result": "late"}) == {"ok": True, "dropped": True}


def test_a_stale_node_socket_fails_the_call_and_is_cleaned_up(flows, connect, sender, services):
    """The node's socket went away without a $disconnect (API Gateway answers 410 Gone): the caller gets a 503 at
    once, the node leaves the registry with nothing left pending on it, and no wait is started."""
    node = connect("node", "n1")
    client = connect("client", "c1")
    sender.gone.add(node.connection_id)
    assert client.error("tool.invoke", {"tool": "n1__Bash", "args": {}}) == {
        "code": 503,
        "message": "Node not connected",
    }
    assert services.connections.node("n1") is None
    assert deferred.pending_on_node(services, "n1") == []
    assert [t["name"] for t in client.call("tools.list")["tools"] if t["name"].startswith("n1__")] == []
    assert client.error("tool.invoke", {"tool": "n1__Bash"})["code"] == 404


def test_an_answer_for_a_stale_caller_is_dropped_and_the_caller_cleaned_up(flows, connect, sender, services):
    node = connect("node", "n1")
    client = connect("client", "c1")
    _invoke(client, "n1__Bash", {"command": "x"})
    call_id = _events(sender, node.connection_id, "tool.invoke")[0]["payload"]["callId"]
    sender.gone.add(client.connection_id)
    assert node.call("tool.result", {"callId": call_id, "result": "r"}) == {"ok": True, "dropped": True}
    assert services.connections.get(client.connection_id) is None
    assert deferred.get(services, call_id).state == deferred.DONE


def test_a_long_log_answer_keeps_the_newest_lines_that_fit_one_message(flows, connect, sender, services):
    node = connect("node", "n1")
    client = connect("client", "c1")
    assert client.frame("logs.get", {"lines": 5000}) is None
    evt = _events(sender, node.connection_id, "logs.get")[0]["payload"]
    lines = [f"{i:04d} " + "l" * 100 for i in range(5000)]  # 525 KB of log
    assert node.call("logs.result", {"callId": evt["callId"], "lines": lines, "truncated": False}) == {"ok": True}
    payload = _responses(sender, client.connection_id)[0]["payload"]
    assert payload["truncated"] is True and 100 < payload["count"] < 5000
    assert payload["lines"] == lines[-payload["count"] :]  # the newest, in order
    assert len(json.dumps(payload).encode()) < 100_000


def test_a_wait_that_cannot_start_leaves_the_call_to_its_answer(flows, connect, sender, services, monkeypatch):
    """`StartExecution` refused after the node already has the call (here: a state machine that does not exist):
    the call is not failed, since a retry would run the tool twice. The node's answer reaches the caller, once; a
    call nobody answers is ended by the sweep of overdue calls; a node's loss still fails its calls at once."""
    from orbital.runtime import scheduler

    gone = services.settings.deferred_call_arn + "-gone"
    monkeypatch.setattr(services, "settings", services.settings.model_copy(update={"deferred_call_arn": gone}))
    node = connect("node", "n1")
    client = connect("client", "c1")

    _invoke(client, "n1__Bash", {"command": "echo once"})
    (evt,) = _events(sender, node.connection_id, "tool.invoke")
    call_id = evt["payload"]["callId"]
    assert _responses(sender, client.connection_id) == []  # no 503: the call waits for its answer
    assert deferred.get(services, call_id).state == deferred.PENDING
    assert node.call("tool.result", {"callId": call_id, "result": "once"}) == {"ok": True}
    (res,) = _responses(sender, client.connection_id)
    assert res["ok"] is True and res["payload"] == {"result": "once"}

    _invoke(client, "n1__Bash", {"command": "sleep 100"})
    unanswered = _events(sender, node.connection_id, "tool.invoke")[-1]["payload"]["callId"]
    call = deferred.get(services, unanswered).call
    overdue_at = call.created_at + call.timeout_ms + deferred.OVERDUE_GRACE_MS
    assert scheduler.tick(services, overdue_at - scheduler.SWEEP_EVERY_MS - 1)["callsSwept"] == 0
    assert scheduler.tick(services, overdue_at)["callsSwept"] == 1
    timed_out = _responses(sender, client.connection_id)[-1]
    assert timed_out["error"]["code"] == 504 and deferred.get(services, unanswered).state == deferred.DONE

    _invoke(client, "n1__Bash", {"command": "sleep 100"})
    lifecycle.disconnect(services, node.connection_id)
    lost = _responses(sender, client.connection_id)[-1]
    assert lost["ok"] is False and lost["error"]["code"] == 503, lost


def test_a_gateway_without_waits_refuses_calls_before_sending(flows, connect, sender, services, monkeypatch):
    monkeypatch.setattr(services, "settings", services.settings.model_copy(update={"deferred_call_arn": None}))
    node = connect("node", "n1")
    client = connect("client", "c1")
    error = client.error("tool.invoke", {"tool": "n1__Bash", "args": {}})
    assert error["code"] == 503 and "not configured" in error["message"], error
    assert _events(sender, node.connection_id, "tool.invoke") == []


def test_a_container_starts_the_timer_of_a_second_once(flows, connect, sender, services):
    """`StartExecution` only for the first call of a second in this container; a timer another container already
    started (here: one this container forgot) is as good."""
    from orbital.aws import clients

    node = connect("node", "n1")
    client = connect("client", "c1")
    _short_tool_timeout(client)
    clients.reset_call_counts()
    for n in range(5):
        _invoke(client, "n1__Bash", {"command": f"sleep {n}"})
    calls = [e["payload"]["callId"] for e in _events(sender, node.connection_id, "tool.invoke")]
    seconds = {int(deferred_execution_arn(flows, services, c).rsplit("-", 1)[1]) for c in calls}
    assert clients.call_counts().get("sfn.StartExecution") == len(seconds) <= 2
    assert services.armed_timers >= seconds

    services.armed_timers.clear()  # as another container, which has not started these timers itself
    _invoke(client, "n1__Bash", {"command": "again"})
    late = _events(sender, node.connection_id, "tool.invoke")[-1]["payload"]["callId"]
    timers = {deferred_execution_arn(flows, services, c) for c in [*calls, late]}
    done = [wait_for(lambda arn=arn: _finished(arn), timeout=15) for arn in timers]
    assert sum(_timed_out_by(d) for d in done) == 6
    assert [r["error"]["code"] for r in _responses(sender, client.connection_id)] == [504] * 6


def test_the_due_second_is_the_timeout_rounded_up_and_never_one_begun():
    call = deferred.PendingCall(
        call_id="c", kind="tool", node_id="n", node_connection_id="x", timeout_ms=1500, created_at=1_000_000_200
    )
    assert deferred.due_second(call, now_s=1_000_000.3) == 1_000_002  # due at 1,000,001.7
    assert deferred.due_second(call, now_s=1_000_002.1) == 1_000_003  # started late: the next second to come
    exact = deferred.PendingCall(
        call_id="c", kind="tool", node_id="n", node_connection_id="x", timeout_ms=1000, created_at=1_000_000_000
    )
    assert deferred.due_second(exact, now_s=1_000_000.0) == 1_000_001


def test_a_node_answer_is_one_write_and_refusals_read_the_call_back(flows, connect, sender, services, monkeypatch):
    """A client's tool.invoke is answered with one conditional `UpdateItem` (no read first); when that write refuses
    (another node, answered already, a call of another kind, one recorded without its kind), the item it returns
    decides, as a read would have."""
    from orbital.aws import clients

    node = connect("node", "n1")
    other = connect("node", "n2")
    client = connect("client", "c1")
    calls = []
    for n in range(3):
        _invoke(client, "n1__Bash", {"command": f"c{n}"})
        calls.append(_events(sender, node.connection_id, "tool.invoke")[-1]["payload"]["callId"])
    read: list[tuple[str, str]] = []
    real_get = services.table.get
    monkeypatch.setattr(services.table, "get", lambda key: read.append(key) or real_get(key))
    clients.reset_call_counts()
    assert node.call("tool.result", {"callId": calls[0], "result": "r0"}) == {"ok": True}
    # one write, and the only read is of the node's connection record
    assert clients.call_counts() == {"dynamodb.GetItem": 1, "dynamodb.UpdateItem": 1}
    assert read == [keys.connection(node.connection_id)]
    assert _responses(sender, client.connection_id)[-1]["payload"] == {"result": "r0"}

    clients.reset_call_counts()
    assert node.call("tool.result", {"callId": calls[0], "result": "late"}) == {"ok": True, "dropped": True}
    assert clients.call_counts() == {"dynamodb.GetItem": 1, "dynamodb.UpdateItem": 1}
    assert other.error("tool.result", {"callId": calls[1], "result": 1}) == {
        "code": 403,
        "message": "Node not authorized for this call",
    }
    assert node.error("tool.result", {"callId": "nope", "result": 1}) == {"code": 404, "message": "Unknown callId"}
    assert deferred.get(services, calls[1]).state == deferred.PENDING  # the refused answers changed nothing

    # a call recorded before calls carried their kind: refused by the one write, answered after reading it
    boto3.client("dynamodb", region_name="us-east-1").update_item(
        TableName=services.table.name,
        Key={"PK": {"S": keys.pending_call(calls[2])[0]}, "SK": {"S": keys.pending_call(calls[2])[1]}},
        UpdateExpression="REMOVE ck",
    )
    assert node.call("tool.result", {"callId": calls[2], "result": "r2"}) == {"ok": True}
    assert node.call("tool.result", {"callId": calls[1], "result": "r1"}) == {"ok": True}
    assert [r["payload"] for r in _responses(sender, client.connection_id)] == [
        {"result": "r0"},
        {"result": "r2"},
        {"result": "r1"},
    ]

    # a session-routed call (stored outcome) is refused by the one write and claimed the way of its kind
    client.call("tool.request", {"callId": "s-1", "tool": "n1__Bash", "args": {}, "sessionKey": "agent:main:x"})
    assert node.call("tool.result", {"callId": "s-1", "result": "kept"}) == {"ok": True}
    rec = services.table.get(keys.pending_call("s-1"))
    assert rec.attrs["st"] == deferred.DONE and deferred.outcome_of(services, rec) == {"result": "kept"}

    # a store that refuses without sending the item back: a read decides instead
    from orbital.store.table import ConditionFailedError

    real_update = services.table.update

    def without_item(*args: Any, **kwargs: Any) -> Any:
        try:
            return real_update(*args, **kwargs)
        except ConditionFailedError as refused:
            raise ConditionFailedError(str(refused), None) from None

    monkeypatch.setattr(services.table, "update", without_item)
    _invoke(client, "n1__Bash", {"command": "last"})
    last = _events(sender, node.connection_id, "tool.invoke")[-1]["payload"]["callId"]
    assert other.error("tool.result", {"callId": last, "result": 1})["code"] == 403
    assert node.call("tool.result", {"callId": calls[0], "result": "again"}) == {"ok": True, "dropped": True}
    client.call("tool.request", {"callId": "s-2", "tool": "n1__Bash", "args": {}, "sessionKey": "agent:main:x"})
    assert node.call("tool.result", {"callId": "s-2", "result": "kept too"}) == {"ok": True}
    assert deferred.outcome_of(services, services.table.get(keys.pending_call("s-2"))) == {"result": "kept too"}
