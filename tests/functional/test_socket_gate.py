"""On a gateway with a token, a socket that has not authenticated can do nothing and costs little: requests answer
101 without a write, the 8th closes it, and its deadline (on the deferred-call timers, executed by moto) closes it
10 s after it opened unless `connect` with the token came first. Malformed frames are ignored and keep it open."""

from __future__ import annotations

import itertools
import json
from typing import Any

from orbital.engines import deferred, socket_gate
from orbital.runtime import gateway

from tests.conftest import deferred_execution_arn, wait_for

_ids = itertools.count(1)


def _opened() -> str:
    cid = f"gate-{next(_ids)}"
    assert gateway.handle_connect({"requestContext": {"connectionId": cid, "routeKey": "$connect"}}) == {
        "statusCode": 200
    }
    return cid


def _send(cid: str, body: str) -> dict[str, Any] | None:
    answer = gateway.handle_message({"requestContext": {"connectionId": cid, "routeKey": "req"}, "body": body})
    return json.loads(answer["body"]) if "body" in answer else None


def _request(cid: str, method: str, params: Any = None) -> dict[str, Any] | None:
    return _send(cid, json.dumps({"type": "req", "id": f"r{next(_ids)}", "method": method, "params": params or {}}))


def _connect(cid: str, token: str | None) -> dict[str, Any] | None:
    params: dict[str, Any] = {"minProtocol": 1, "client": {"mode": "client", "id": cid}}
    if token is not None:
        params["auth"] = {"token": token}
    return _request(cid, "connect", params)


def _closes(sender: Any, cid: str) -> list[tuple[int, str]]:
    return [(code, reason) for closed, code, reason in sender.closes if closed == cid]


def test_requests_before_connect_answer_101_without_writing_and_the_eighth_closes(token, flows, sender, services):
    cid = _opened()
    writes = services.table.client.meta.events
    counted: list[str] = []
    writes.register("before-call.dynamodb.*", lambda event_name, **_: counted.append(event_name))
    last = socket_gate.MAX_UNAUTHENTICATED_REQUESTS
    for n in range(1, last + 1):
        if n == last:  # what the refused requests cost: reads of the (absent) connection, no write
            assert not [name for name in counted if not name.endswith("GetItem")], counted
        answer = _request(cid, "config.set", {"path": "userTimezone", "value": "Europe/Paris"})
        if n == last:  # posted before the close (a route response would come after it)
            assert answer is None
            (answer,) = [f for f in sender.frames_to(cid) if f.get("type") == "res"]
        assert answer is not None and answer["error"] == {"code": 101, "message": "Not connected"}
        assert _closes(sender, cid) == ([] if n < last else [(1008, socket_gate.TOO_MANY)]), n
    assert services.config.effective()["userTimezone"] == "UTC"


def test_malformed_frames_are_ignored_and_keep_the_socket(token, flows, sender, services):
    cid = _opened()
    for body in ["not json", "[1,2]", '{"type":"evt","event":"x"}', '{"type":"res","id":"1"}', "", "{"] * 3:
        assert _send(cid, body) is None
    assert _closes(sender, cid) == []
    hello = _connect(cid, token)
    assert hello is not None and hello["ok"] and hello["payload"]["type"] == "hello-ok"
    for _ in range(socket_gate.MAX_UNAUTHENTICATED_REQUESTS + 2):  # connected: nothing is counted any more
        assert _request(cid, "tools.list")["ok"]
    assert _closes(sender, cid) == []


def test_a_socket_that_does_not_authenticate_in_time_is_closed(token, flows, sender, services, monkeypatch):
    monkeypatch.setattr(socket_gate, "AUTH_TIMEOUT_MS", 1000)
    cid = _opened()
    call = deferred.get(services, f"auth-{cid}")
    assert call is not None and call.state == deferred.PENDING and call.call.kind == socket_gate.KIND
    deferred_execution_arn(flows, services, f"auth-{cid}")  # its timer is a real execution of deferred_call
    assert wait_for(lambda: _closes(sender, cid), timeout=20) == [(1008, socket_gate.TIMED_OUT)]


def test_a_socket_that_connects_in_time_is_left_alone(token, flows, sender, services, monkeypatch):
    import boto3

    monkeypatch.setattr(socket_gate, "AUTH_TIMEOUT_MS", 1000)
    cid = _opened()
    timer = deferred_execution_arn(flows, services, f"auth-{cid}")
    assert _connect(cid, token)["ok"]
    found = deferred.get(services, f"auth-{cid}")
    assert found is not None and found.state == deferred.DONE
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    wait_for(lambda: sfn.describe_execution(executionArn=timer)["status"] != "RUNNING", timeout=20)
    assert _closes(sender, cid) == []
    assert _request(cid, "config.get", {"path": "userTimezone"})["ok"]


def test_a_wrong_token_closes_at_once_and_a_failed_connect_counts(token, flows, sender, services):
    cid = _opened()
    assert _connect(cid, "wrong-token") is None  # posted before the close, not on the route response
    assert [f["error"]["code"] for f in sender.frames_to(cid) if f.get("type") == "res"] == [401]
    assert _closes(sender, cid) == [(4001, "Unauthorized")]
    other = _opened()
    for _ in range(socket_gate.MAX_UNAUTHENTICATED_REQUESTS):
        _request(other, "connect", {"minProtocol": 9, "auth": {"token": token}})
    assert [f["error"]["code"] for f in sender.frames_to(other) if f.get("type") == "res"] == [102]  # the last
    assert _closes(sender, other) == [(1008, socket_gate.TOO_MANY)]


def test_without_a_token_nothing_is_armed_or_counted(flows, sender, services):
    cid = _opened()
    assert deferred.get(services, f"auth-{cid}") is None
    for _ in range(socket_gate.MAX_UNAUTHENTICATED_REQUESTS * 2):
        assert _request(cid, "config.get")["error"]["code"] == 101
    assert _closes(sender, cid) == []
