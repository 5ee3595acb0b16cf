"""deferred_call.asl.json executed by moto: success, result-before-token race, timeout, failure and node loss."""

from __future__ import annotations

import json
import threading
from typing import Any

import boto3
from orbital.engines import deferred
from orbital.runtime import lifecycle, workflows
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


def _execution(flows: dict[str, str], call_id: str) -> dict[str, Any]:
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    return sfn.describe_execution(executionArn=deferred_execution_arn(flows, call_id))


def _states_entered(flows: dict[str, str], call_id: str) -> list[str]:
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    arn = deferred_execution_arn(flows, call_id)
    history = sfn.get_execution_history(executionArn=arn)["events"]
    return [e["stateEnteredEventDetails"]["name"] for e in history if "stateEnteredEventDetails" in e]


def _token_recorded(services: Any, call_id: str) -> bool:
    rec = services.table.get(keys.pending_call(call_id))
    return bool(rec and rec.attrs.get("tok"))


def _finished(flows: dict[str, str], call_id: str) -> dict[str, Any] | None:
    desc = _execution(flows, call_id)
    return desc if desc["status"] != "RUNNING" else None


def test_result_answers_client_and_closes_execution(flows, connect, sender, services):
    node = connect("node", "n1")
    client = connect("client", "c1")
    _invoke(client, "n1__Bash", {"command": "echo hi"})
    evt = wait_for(lambda: _events(sender, node.connection_id, "tool.invoke"))[0]
    assert evt["payload"]["tool"] == "Bash"
    assert evt["payload"]["args"] == {"command": "echo hi"}
    call_id = evt["payload"]["callId"]
    wait_for(lambda: _token_recorded(services, call_id))
    assert node.call("tool.result", {"callId": call_id, "result": {"output": "hi\n"}}) == {"ok": True}
    res = _responses(sender, client.connection_id)
    assert res == [{"type": "res", "id": res[0]["id"], "ok": True, "payload": {"result": {"output": "hi\n"}}}]
    done = wait_for(lambda: _finished(flows, call_id))
    assert done["status"] == "SUCCEEDED"
    assert "AnswerTimeout" not in _states_entered(flows, call_id)
    # a second answer is late: dropped, and the client hears nothing more
    assert node.call("tool.result", {"callId": call_id, "result": 1}) == {"ok": True, "dropped": True}
    assert len(_responses(sender, client.connection_id)) == 1


def test_result_before_token_is_recorded_still_ends_the_execution(flows, connect, sender, services, monkeypatch):
    # hold the register step until the node has answered, so the result always wins the race
    answered = threading.Event()
    register = workflows.STEPS["register"]

    def late_register(svc: Any, event: dict[str, Any]) -> dict[str, Any]:
        assert answered.wait(timeout=10)
        return register(svc, event)

    monkeypatch.setitem(workflows.STEPS, "register", late_register)
    node = connect("node", "n1")
    client = connect("client", "c1")
    try:
        _invoke(client, "n1:Read", {"path": "x"})  # F1: nodeId:tool is accepted too
        call_id = _events(sender, node.connection_id, "tool.invoke")[0]["payload"]["callId"]
        assert node.call("tool.result", {"callId": call_id, "error": "no such file"}) == {"ok": True}
    finally:
        answered.set()  # never leave the execution's thread waiting
    assert _responses(sender, client.connection_id)[0]["error"] == {"code": 500, "message": "no such file"}
    done = wait_for(lambda: _finished(flows, call_id))
    assert done["status"] == "SUCCEEDED"
    assert not _token_recorded(services, call_id)
    assert "AnswerTimeout" not in _states_entered(flows, call_id)


def test_timeout_answers_with_error_and_late_result_is_dropped(flows, connect, sender, services):
    node = connect("node", "n1")
    client = connect("client", "c1")
    client.call("config.set", {"path": "timeouts.toolMs", "value": 1000})
    _invoke(client, "n1__Bash", {"command": "sleep 100"})
    call_id = _events(sender, node.connection_id, "tool.invoke")[0]["payload"]["callId"]
    res = wait_for(lambda: _responses(sender, client.connection_id), timeout=15)[0]
    assert res["ok"] is False
    assert res["error"] == {"code": 504, "message": "Tool call timed out after 1000ms: n1__Bash", "retryable": True}
    assert wait_for(lambda: _finished(flows, call_id))["status"] == "SUCCEEDED"
    assert "AnswerTimeout" in _states_entered(flows, call_id)
    assert node.call("tool.result", {"callId": call_id, "result": "late"}) == {"ok": True, "dropped": True}


def test_node_loss_fails_pending_calls_at_once(flows, connect, sender, services):
    node = connect("node", "n1")
    client = connect("client", "c1")
    _invoke(client, "n1__Bash", {"command": "sleep 100"})
    _invoke(client, "n1__Read", {"path": "/etc/hosts"})
    calls = [e["payload"]["callId"] for e in _events(sender, node.connection_id, "tool.invoke")]
    for call_id in calls:
        wait_for(lambda cid=call_id: _token_recorded(services, cid))
    lifecycle.disconnect(services, node.connection_id)
    errors = [r["error"] for r in _responses(sender, client.connection_id)]
    assert errors == [{"code": 503, "message": "Node disconnected: n1"}] * 2
    for call_id in calls:
        assert wait_for(lambda cid=call_id: _finished(flows, cid))["status"] == "SUCCEEDED"
        assert "AnswerTimeout" not in _states_entered(flows, call_id)


def test_workflow_failure_answers_the_caller(flows, connect, sender, services):
    node = connect("node", "n1")
    client = connect("client", "c1")
    _invoke(client, "n1__Bash", {"command": "x"})
    call_id = _events(sender, node.connection_id, "tool.invoke")[0]["payload"]["callId"]
    wait_for(lambda: _token_recorded(services, call_id))
    token = services.table.get(keys.pending_call(call_id)).attrs["tok"]
    boto3.client("stepfunctions", region_name="us-east-1").send_task_failure(taskToken=token, error="Boom", cause="x")
    res = wait_for(lambda: _responses(sender, client.connection_id))[0]
    assert res["error"] == {"code": 500, "message": "Call failed: Boom"}
    assert "AnswerFailure" in _states_entered(flows, call_id)


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
    assert res["error"] == {"code": 504, "message": "logs.get timed out for node n1 after 1000ms", "retryable": True}


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
    assert node.error("tool.invoke", {"tool": "n1__Bash"}) == {"code": 101, "message": "Not connected"}
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
        "message": "Node not authorized for this call",
    }
    assert client.error("logs.get", {"lines": 0}) == {"code": 400, "message": "lines must be a positive number"}
    assert client.error("logs.get", {}) == {"code": 400, "message": "nodeId required when multiple nodes are connected"}
    assert client.error("logs.get", {"nodeId": "zz"}) == {"code": 503, "message": "Node not connected: zz"}
    assert client.error("node.exec.event", {"sessionId": "s"}) == {
        "code": 403,
        "message": "Only node clients can submit exec events",
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
    import re

    node = connect("node", "n1")
    client = connect("client", "c1")
    call_id = "call #1 / für den Knoten: " + "x" * 120  # spaces, slashes, non-ASCII, over 80 characters
    params = {"callId": call_id, "tool": "n1__Bash", "args": {"command": "true"}, "sessionKey": "agent:main:main"}
    assert client.call("tool.request", params) == {"status": "sent"}
    evt = wait_for(lambda: _events(sender, node.connection_id, "tool.invoke"))[0]
    assert evt["payload"]["callId"] == call_id
    arn = deferred_execution_arn(flows, call_id)
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,80}", arn.rsplit(":", 1)[1])
    wait_for(lambda: _token_recorded(services, call_id))
    assert node.call("tool.result", {"callId": call_id, "result": {"output": ""}}) == {"ok": True}
    assert wait_for(lambda: _finished(flows, call_id))["status"] == "SUCCEEDED"

    again = client.error("tool.request", params)
    assert again["code"] == 409 and again["message"] == f"callId already in use: {call_id}"
    too_long = client.error("tool.request", {**params, "callId": "y" * 257})
    assert too_long["code"] == 400 and "callId too long" in too_long["message"]


def test_an_answering_step_that_fails_once_is_retried(flows, connect, sender, services, monkeypatch):
    failing = {"left": 1}
    real = workflows.STEPS["fail"]

    def flaky(services_: Any, event: dict[str, Any]) -> dict[str, Any]:
        if failing["left"]:
            failing["left"] -= 1
            raise RuntimeError("throttled")  # as a DynamoDB throttle would surface from the step's Lambda
        return real(services_, event)

    monkeypatch.setitem(workflows.STEPS, "fail", flaky)
    node = connect("node", "n1")
    client = connect("client", "c1")
    _invoke(client, "n1__Bash", {"command": "x"})
    call_id = _events(sender, node.connection_id, "tool.invoke")[0]["payload"]["callId"]
    wait_for(lambda: _token_recorded(services, call_id))
    token = services.table.get(keys.pending_call(call_id)).attrs["tok"]
    boto3.client("stepfunctions", region_name="us-east-1").send_task_failure(taskToken=token, error="Boom", cause="x")
    res = wait_for(lambda: _responses(sender, client.connection_id), timeout=15)[0]
    assert res["error"] == {"code": 500, "message": "Call failed: Boom"}
    assert failing["left"] == 0
    assert wait_for(lambda: _finished(flows, call_id), timeout=15)["status"] == "SUCCEEDED"


def test_a_call_left_pending_past_its_timeout_is_answered_by_the_scheduler(flows, connect, sender, services):
    """The backstop for a workflow that ended without answering: the scheduler tick answers the call once it is
    well past its timeout, and ends the execution if one still waits."""
    from orbital.runtime import scheduler

    node = connect("node", "n1")
    client = connect("client", "c1")
    _invoke(client, "n1__Bash", {"command": "sleep 100"})
    call_id = _events(sender, node.connection_id, "tool.invoke")[0]["payload"]["callId"]
    wait_for(lambda: _token_recorded(services, call_id))
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
        "message": f"Tool call timed out after {timeout_ms}ms: n1__Bash",
        "retryable": True,
    }
    assert deferred.get(services, call_id).state == deferred.DONE
    assert wait_for(lambda: _finished(flows, call_id))["status"] in {"SUCCEEDED", "FAILED"}
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
    wait_for(lambda: _token_recorded(services, call_id))
    sender.gone.add(client.connection_id)
    assert node.call("tool.result", {"callId": call_id, "result": "r"}) == {"ok": True, "dropped": True}
    assert services.connections.get(client.connection_id) is None
    assert deferred.get(services, call_id).state == deferred.DONE
    assert wait_for(lambda: _finished(flows, call_id))["status"] == "SUCCEEDED"


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
