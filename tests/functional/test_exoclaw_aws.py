"""Exoclaw's clients on AWS: the WebSocket handlers driven with API Gateway's events against moto, agent runs
executed by moto's Step Functions, the scripted model over HTTP.

On AWS a token is always required and nothing can be posted during `$connect`, so an Exoclaw client speaks first:
its `{"token"}` frame reaches `$default` and is answered with the hello on the route response; a wrong one (or
anything else first) is answered `auth_failed` and the socket deleted. Then its requests and the frames of its runs
(posted through the management API) are those of the local gateway (tests/e2e/test_exoclaw.py).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from orbital.engines import deferred
from orbital.runtime import gateway

from tests.conftest import GATEWAY_TOKEN as TOKEN
from tests.conftest import wait_for
from tests.support import rules
from tests.support.agent import chat_events
from tests.support.fake_llm import FakeLLM

AUTH_FAILED = {"error": "auth_failed", "code": 4001}
_ids = itertools.count(1)


def _opened() -> str:
    """`$connect` of an Exoclaw client: no header, nothing in the URL (nothing may be posted now: 410)."""
    cid = f"exo-{next(_ids)}"
    event = {"requestContext": {"connectionId": cid, "routeKey": "$connect", "eventType": "CONNECT"}, "headers": {}}
    assert gateway.handle_connect(event) == {"statusCode": 200}
    return cid


def _frame(cid: str, body: Any) -> Any:
    """One text frame through `$default` (every Exoclaw frame has no `type`); the route response's frame, if any."""
    text = body if isinstance(body, str) else json.dumps(body)
    context = {"connectionId": cid, "routeKey": "$default", "eventType": "MESSAGE"}
    answer = gateway.handle_message({"requestContext": context, "body": text, "isBase64Encoded": False})
    assert answer["statusCode"] == 200
    return json.loads(answer["body"]) if "body" in answer else None


def _closes(sender: Any, cid: str) -> list[tuple[int, str]]:
    return [(code, reason) for closed, code, reason in sender.closes if closed == cid]


def _stream(sender: Any, cid: str, rpc_id: str, timeout: float = 30.0) -> list[dict[str, Any]]:
    """The frames posted for one request, once its `done` is among them."""

    def ended() -> list[dict[str, Any]] | None:
        frames = [f for f in sender.frames_to(cid) if isinstance(f, dict) and f.get("id") == rpc_id]
        return frames if any(f.get("event") == "done" for f in frames) else None

    found: list[dict[str, Any]] = wait_for(ended, timeout=timeout)
    return found


def _authenticated(sender: Any) -> str:
    cid = _opened()
    assert _frame(cid, {"token": TOKEN}) == {"ok": True, "version": gateway.exoclaw.HELLO["version"]}
    return cid


def test_the_token_frame_is_answered_with_the_hello(token, flows, sender, services):
    cid = _opened()
    assert sender.frames_to(cid) == []  # nothing during `$connect`
    assert deferred.get(services, f"auth-{cid}").state == deferred.PENDING  # the usual authentication deadline
    hello = _frame(cid, {"token": TOKEN})
    assert hello == {"ok": True, "version": hello["version"]} and isinstance(hello["version"], str)
    assert deferred.get(services, f"auth-{cid}").state == deferred.DONE  # settled: it will not close the socket
    assert _frame(cid, {"id": 7, "method": "ping"}) == {"id": "7", "result": "pong"}
    assert _frame(cid, "not json")["error"].startswith("parse error: ")
    assert _frame(cid, {"id": "s", "method": "status"})["result"]["sessions"] == 0
    assert sender.frames_to(cid) == [] and _closes(sender, cid) == []


@pytest.mark.parametrize(
    "first",
    [
        pytest.param({"token": "wrong"}, id="a-wrong-token"),
        pytest.param({"id": "1", "method": "ping"}, id="an-rpc-first"),
    ],
)
def test_anything_but_the_token_is_answered_auth_failed_and_the_socket_deleted(token, flows, sender, services, first):
    cid = _opened()
    assert _frame(cid, first) is None  # posted before the close: a route response would come after it
    assert sender.frames_to(cid) == [AUTH_FAILED]
    assert [code for code, _ in _closes(sender, cid)] == [4001]  # DeleteConnection (API Gateway sends no code)
    assert services.connections.get(cid) is None


def test_a_chat_streams_through_the_management_api(token, flows, sender, services, agent, llm: FakeLLM):
    llm.responder = rules.respond
    cid = _authenticated(sender)
    params = {"channel": "websocket", "account": "aws", "content": "TOOL:gsv__ListFiles {}"}
    assert _frame(cid, {"id": "c1", "method": "chat.send", "params": params}) is None  # the stream is posted
    frames = _stream(sender, cid, "c1")
    kinds = [f["event"] for f in frames]
    text_frames = kinds.count("text")  # the reply's deltas, coalesced as they came
    assert text_frames >= 1 and kinds == ["usage", "tool_use", "tool_result", *["text"] * text_frames, "usage", "done"]
    use, result = frames[1]["data"], frames[2]["data"]
    assert use["name"] == "gsv__ListFiles" and result["tool_use_id"] == use["id"] and result["is_error"] is False
    assert "".join(f["data"] for f in frames if f["event"] == "text") == result["content"].strip()
    assert frames[-1] == {"id": "c1", "event": "done"}
    # a GSV client saw the run as it always did: no tool results or usage, and never the Exoclaw frames
    seen = chat_events(sender, agent.connection_id)
    assert {e["state"] for e in seen} == {"tool", "delta", "final"}
    assert all(f.get("type") == "evt" for f in sender.frames_to(agent.connection_id))


def test_a_reply_no_provider_streamed_still_comes_as_text(token, flows, sender, services, agent, monkeypatch):
    """A provider that gives the whole reply at once (no deltas): the Exoclaw client gets it as one text frame, and
    GSV clients a delta with it, as they would from a streaming provider."""
    from orbital.agent import turn

    def all_at_once(request: Any, sink: Any = None) -> dict[str, Any]:
        usage = {"input": 3, "output": 2, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 5}
        content = [{"type": "text", "text": "All at once."}]
        return {"role": "assistant", "content": content, "usage": usage, "stopReason": "stop", "timestamp": 1}

    monkeypatch.setattr(turn, "complete", all_at_once)
    cid = _authenticated(sender)
    params = {"channel": "websocket", "account": "aws", "content": "hello"}
    assert _frame(cid, {"id": "q", "method": "chat.send", "params": params}) is None
    frames = _stream(sender, cid, "q")
    assert frames == [
        {"id": "q", "event": "text", "data": "All at once."},
        {"id": "q", "event": "usage", "data": {"input_tokens": 3, "output_tokens": 2}},
        {"id": "q", "event": "done"},
    ]
    deltas = [e["text"] for e in chat_events(sender, agent.connection_id) if e["state"] == "delta"]
    assert deltas == ["All at once."]


def test_a_provider_failure_is_worded_as_exoclaw_does(token, flows, sender, services, agent, llm: FakeLLM):
    from tests.support.fake_llm import error

    llm.script(error(400, "Your request is broken"))
    cid = _authenticated(sender)
    params = {"channel": "websocket", "account": "aws", "content": "x"}
    assert _frame(cid, {"id": "e", "method": "chat.send", "params": params}) is None
    frames = _stream(sender, cid, "e")
    assert [f["event"] for f in frames] == ["error", "done"]
    assert frames[0]["data"].startswith("provider error: ") and "Your request is broken" in frames[0]["data"]
    # GSV clients get the error as before, without the dialects' `cause`
    (ended,) = [e for e in chat_events(sender, agent.connection_id) if e["state"] == "error"]
    assert "cause" not in ended and "Your request is broken" in ended["error"]


def test_a_socket_that_showed_the_token_as_a_bearer_needs_no_token_frame(token, flows, sender, services):
    cid = f"exo-{next(_ids)}"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    event = {"requestContext": {"connectionId": cid, "routeKey": "$connect"}, "headers": headers}
    assert gateway.handle_connect(event) == {"statusCode": 200}
    assert deferred.get(services, f"auth-{cid}") is None  # authenticated at the upgrade: no deadline
    assert _frame(cid, {"id": "1", "method": "ping"}) == {"id": "1", "result": "pong"}
    other = f"exo-{next(_ids)}"
    event = {"requestContext": {"connectionId": other, "routeKey": "$connect"}, "headers": headers}
    assert gateway.handle_connect(event) == {"statusCode": 200}
    assert _frame(other, {"token": TOKEN})["ok"] is True  # a client that sends its token anyway is greeted
    wrong = {
        "requestContext": {"connectionId": "exo-x", "routeKey": "$connect"},
        "headers": {"authorization": "Bearer no"},
    }
    assert gateway.handle_connect(wrong)["statusCode"] == 401
    assert sender.posts == [] and sender.closes == []


def test_a_paused_run_ends_its_stream_and_the_next_chat_answers_it(token, flows, sender, services, agent, llm):
    """Tool approvals on AWS: the pause (a Step Functions wait) ends the stream with the prompt; the next chat.send
    says `yes`, streams the engine's answer and then the rest of the run, posted by the execution that goes on."""
    llm.responder = rules.respond
    rule = {"id": "ask-writes", "tool": "gsv__WriteFile", "decision": "ask"}
    agent.call("config.set", {"path": "toolApproval.rules", "value": [rule]})
    cid = _authenticated(sender)
    base = {"channel": "websocket", "account": "aws-approvals"}
    write = 'TOOL:gsv__WriteFile {"path": "aws-note.md", "content": "from exoclaw"}'
    assert _frame(cid, {"id": "p1", "method": "chat.send", "params": {**base, "content": write}}) is None
    first = _stream(sender, cid, "p1")
    assert first[-1] == {"id": "p1", "event": "done"}
    prompt = [f["data"] for f in first if f["event"] == "text"][-1]
    assert prompt.startswith("Run paused: tool approval required.\nTool: gsv__WriteFile\n")
    assert agent.frame("workspace.read", {"path": "aws-note.md"})["ok"] is False  # nothing written while it waits

    _frame(cid, {"id": "p2", "method": "chat.send", "params": {**base, "content": "yes"}})
    second = _stream(sender, cid, "p2")
    said = "".join(f["data"] for f in second if f["event"] == "text")
    assert said.startswith("Approved gsv__WriteFile. Continuing run.\n\n")
    results = [f["data"] for f in second if f["event"] == "tool_result"]
    assert results and results[0]["is_error"] is False
    assert [f for f in second if f["event"] == "done"] == [{"id": "p2", "event": "done"}]
    assert agent.call("workspace.read", {"path": "aws-note.md"})["content"] == "from exoclaw"
    assert [f for f in sender.frames_to(cid) if f.get("id") == "p1" and f.get("event") == "done"] == [first[-1]]
