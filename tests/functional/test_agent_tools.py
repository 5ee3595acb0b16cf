"""Native tools and node interactions inside real agent runs (moto executes agent_turn.asl.json; the model is the
scripted fake over HTTP)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.support.agent import final_of, node_events
from tests.support.fake_llm import FakeLLM, call, reply


def tool_contents(llm: FakeLLM, request: int) -> list[str]:
    return [m["content"] for m in llm.requests[request].body["messages"] if m["role"] == "tool"]


def run(agent: Any, sender: Any, message: str, key: str = "main", timeout: float = 30) -> dict[str, Any]:
    started = agent.call("chat.send", {"sessionKey": key, "message": message})
    final = final_of(sender, agent.connection_id, started["runId"], timeout=timeout)
    assert final["state"] == "final", final
    return final


def test_session_send_waits_for_the_reply_of_its_own_run(agent: Any, sender: Any, llm: FakeLLM) -> None:
    llm.script(
        reply(tool_calls=[call("gsv__SessionSend", {"sessionKey": "agent:main:helper", "message": "ping"})]),
        reply("pong"),
        reply("the helper said pong"),
    )
    run(agent, sender, "ask the helper")
    (content,) = tool_contents(llm, 2)
    result = json.loads(content)
    assert result["status"] == "ok" and result["reply"] == "pong"
    assert result["sessionKey"] == "agent:main:helper"
    helper = agent.call("session.preview", {"sessionKey": "agent:main:helper"})
    assert [m["role"] for m in helper["messages"]] == ["user", "assistant"]
    assert helper["messages"][0]["content"] == "ping"


def last_user_text(request: Any) -> str:
    users = [m for m in request.body["messages"] if m["role"] == "user"]
    content = users[-1]["content"] if users else ""
    return content if isinstance(content, str) else json.dumps(content)


def test_session_send_without_waiting_and_to_itself(agent: Any, sender: Any, llm: FakeLLM) -> None:
    sends = [
        call("gsv__SessionSend", {"sessionKey": "agent:main:other", "message": "fyi", "waitSeconds": 0}),
        call("gsv__SessionSend", {"sessionKey": "main", "message": "note to self"}),
    ]

    def respond(request: Any) -> Any:
        text = last_user_text(request)
        if text == "send" and not any(m["role"] == "tool" for m in request.body["messages"]):
            return reply(tool_calls=sends)
        return reply(f"answer to {text}")

    llm.responder = respond
    run(agent, sender, "send")
    main_second = next(r for r in llm.requests if any(m["role"] == "tool" for m in r.body["messages"]))
    results = [json.loads(m["content"]) for m in main_second.body["messages"] if m["role"] == "tool"]
    assert [r["status"] for r in results] == ["accepted", "accepted"]
    assert results[1]["queued"] is True and "note" in results[1]


def test_logs_get_reaches_the_node(agent: Any, connect: Any, sender: Any, llm: FakeLLM) -> None:
    node = connect("node", "box")
    llm.script(reply(tool_calls=[call("gsv__LogsGet", {"lines": 5})]), reply("logs read"))
    started = agent.call("chat.send", {"sessionKey": "main", "message": "logs?"})
    event = wait_for(lambda: node_events(sender, node, "logs.get"))[0]
    assert event["lines"] == 5
    assert node.call("logs.result", {"callId": event["callId"], "lines": ["a", "b"]}) == {"ok": True}
    final_of(sender, agent.connection_id, started["runId"])
    assert json.loads(tool_contents(llm, 1)[0]) == {
        "nodeId": "box",
        "lines": ["a", "b"],
        "count": 2,
        "truncated": False,
    }


def test_logs_get_errors_without_a_node(agent: Any, sender: Any, llm: FakeLLM) -> None:
    llm.script(reply(tool_calls=[call("gsv__LogsGet", {}), call("gsv__LogsGet", {"lines": 0})]), reply("no logs"))
    run(agent, sender, "logs?")
    assert tool_contents(llm, 1) == ["Error: No nodes connected", "Error: lines must be a positive number"]


PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"0" * 32).decode()


@pytest.mark.atomic_table  # a node answers at once: its answer races the turn's wait registering its token
def test_images_in_tool_results_are_stored_and_sent_to_the_model(
    agent: Any, connect: Any, sender: Any, llm: FakeLLM, services: Any
) -> None:
    node = connect("node", "box")
    llm.script(reply(tool_calls=[call("box__Read", {"path": "shot.png"})]), reply("nice picture"))
    started = agent.call("chat.send", {"sessionKey": "main", "message": "look"})
    event = wait_for(lambda: node_events(sender, node, "tool.invoke"))[0]
    result = {
        "content": [{"type": "text", "text": "a screenshot"}, {"type": "image", "data": PNG, "mimeType": "image/png"}]
    }
    node.call("tool.result", {"callId": event["callId"], "result": result})
    final_of(sender, agent.connection_id, started["runId"])
    preview = agent.call("session.preview", {"sessionKey": "main"})
    tool = next(m for m in preview["messages"] if m["role"] == "toolResult")
    image = tool["content"][1]
    assert image["type"] == "image" and image["mimeType"] == "image/png"
    assert image["r2Key"].startswith("media/agent:main:main/") and "data" not in image
    assert services.workspace.get(image["r2Key"])[0] == base64.b64decode(PNG)
    sent = json.dumps(llm.requests[1].body["messages"])
    assert PNG in sent  # hydrated before the model call


def test_config_get_masks_secrets(agent: Any, sender: Any, llm: FakeLLM) -> None:
    llm.script(reply(tool_calls=[call("gsv__ConfigGet", {"path": "apiKeys.openai"})]), reply("masked"))
    run(agent, sender, "what is my key?")
    assert json.loads(tool_contents(llm, 1)[0]) == {"path": "apiKeys.openai", "value": "***"}
    assert "sk-test-key" not in json.dumps(llm.requests[1].body)


def test_message_goes_out_through_the_channel_socket(agent: Any, connect: Any, sender: Any, llm: FakeLLM) -> None:
    channel = connect("channel", "bridge", channel="test")
    llm.script(
        reply(
            tool_calls=[
                call("gsv__Message", {"text": "hello there", "channel": "test", "to": "+1555", "accountId": "bridge"}),
                call("gsv__Message", {"text": "x"}),
            ]
        ),
        reply("sent"),
    )
    run(agent, sender, "tell them")
    outbound = [f["payload"] for f in sender.frames_to(channel.connection_id) if f.get("event") == "channel.outbound"]
    assert outbound == [
        {
            "channel": "test",
            "accountId": "bridge",
            "peer": {"kind": "dm", "id": "+1555"},
            "sessionKey": "",
            "message": {"text": "hello there"},
        }
    ]
    results = tool_contents(llm, 1)
    assert json.loads(results[0])["sent"] is True
    assert results[1] == "Error: channel is required (no current channel context available)"


def test_cron_tool_manages_and_runs_jobs(agent: Any, sender: Any, llm: FakeLLM) -> None:
    job = {
        "name": "digest",
        "schedule": {"kind": "every", "everyMinutes": 5},
        "spec": {"mode": "task", "message": "write the digest"},
    }

    def respond(request: Any) -> Any:
        text = last_user_text(request)
        if "write the digest" in text:
            return reply("digest written")
        tools = [json.loads(m["content"]) for m in request.body["messages"] if m["role"] == "tool"]
        if not tools:
            return reply(tool_calls=[call("gsv__Cron", {"action": "add", "job": job})])
        if len(tools) == 1:
            run_it = {"action": "run", "id": tools[0]["job"]["id"], "mode": "force"}
            return reply(tool_calls=[call("gsv__Cron", run_it)])
        return reply("scheduled and started")

    llm.responder = respond
    run(agent, sender, "every five minutes, a digest")
    (job_id,) = [j["id"] for j in agent.call("cron.list", {})["jobs"]]
    main_last = next(i for i, r in enumerate(llm.requests) if len(tool_contents(llm, i)) == 2)
    ran = json.loads(tool_contents(llm, main_last)[-1])
    assert ran["ran"] == 1 and ran["results"][0]["status"] == "ok"  # started: GSV's answer (F9)
    assert f"agent:main:cron:{job_id}:" in ran["results"][0]["summary"]
    record = wait_for(lambda: agent.call("cron.runs", {"jobId": job_id})["runs"])[0]
    assert record["status"] == "ok" and record["summary"] == "digest written"
    cron_request = next(r for r in llm.requests if "write the digest" in last_user_text(r))
    assert last_user_text(cron_request).startswith("[cron · ")


def test_sessions_list_shows_recent_sessions(agent: Any, sender: Any, llm: FakeLLM) -> None:
    llm.script(reply("first"), reply(tool_calls=[call("gsv__SessionsList", {"messageLimit": 1})]), reply("listed"))
    run(agent, sender, "hello", key="agent:main:work")
    run(agent, sender, "which sessions?")
    listed = json.loads(tool_contents(llm, 2)[0])
    keys = [s["sessionKey"] for s in listed["sessions"]]
    assert keys == ["agent:main:main", "agent:main:work"]
    assert listed["sessions"][1]["messages"][0]["role"] == "assistant"


@pytest.mark.atomic_table  # a node answers at once: its answer races the turn's wait registering its token
def test_background_command_completion_starts_a_turn(agent: Any, connect: Any, sender: Any, llm: FakeLLM) -> None:
    node = connect("node", "box")
    llm.script(reply(tool_calls=[call("box__Bash", {"command": "make", "background": True})]), reply("started it"))
    started = agent.call("chat.send", {"sessionKey": "main", "message": "build"})
    event = wait_for(lambda: node_events(sender, node, "tool.invoke"))[0]
    node.call("tool.result", {"callId": event["callId"], "result": {"status": "running", "sessionId": "proc-1"}})
    final_of(sender, agent.connection_id, started["runId"])
    llm.script(reply("the build finished"))
    payload = {"sessionId": "proc-1", "event": "finished", "exitCode": 0, "outputTail": "ok"}
    assert node.call("node.exec.event", payload) == {"ok": True}
    wait_for(lambda: len(llm.requests) == 3)

    def injected() -> Any:
        messages = agent.call("session.preview", {"sessionKey": "main"})["messages"]
        texts = [m["content"] for m in messages if m["role"] == "user" and isinstance(m["content"], str)]
        return [t for t in texts if t.startswith("System event: async_exec_completion\n")]

    (text,) = wait_for(injected)
    body = json.loads(text.split("\n", 1)[1])
    assert body["event"] == "finished" and body["outputTail"] == "ok" and body["callId"] == event["callId"]
    assert node.call("node.exec.event", payload) == {"ok": True}  # a repeat is acknowledged, not run again


def seed_messages(services: Any, key: str, count: int, size: int) -> None:
    messages = []
    for i in range(count):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"message {i} " + "x" * size
        if role == "user":
            messages.append({"role": role, "content": text})
        else:
            messages.append({"role": role, "content": [{"type": "text", "text": text}], "stopReason": "stop"})
    services.sessions.append_messages(key, messages)


def test_compaction_summarizes_old_messages_when_the_context_fills(
    agent: Any, sender: Any, llm: FakeLLM, services: Any
) -> None:
    agent.call("config.set", {"path": "providers.openai.contextWindow", "value": 6000})
    agent.call("config.set", {"path": "compaction", "value": {"reserveTokens": 1000, "keepRecentTokens": 600}})
    seed_messages(services, "agent:main:main", 12, 1200)

    def respond(request: Any) -> Any:
        if "compacting the history" in last_user_text(request):
            return reply("<summary>We talked about x.</summary><memories>- the user likes tea</memories>")
        return reply("ok")

    llm.responder = respond
    run(agent, sender, "continue")
    preview = agent.call("session.preview", {"sessionKey": "main"})
    first = preview["messages"][0]["content"]
    assert first.startswith("[Conversation summary from automatic context compaction]\n\nWe talked about x.")
    assert preview["messageCount"] < 13
    info = agent.call("session.get", {"sessionKey": "main"})
    listing = agent.call("workspace.list", {"path": "sessions"})
    assert any("-part" in f for f in listing["files"])
    memory = agent.call("workspace.list", {"path": "memory"})["files"]
    notes = agent.call("workspace.read", {"path": memory[0]})["content"]
    assert "the user likes tea" in notes and "Extracted from context compaction" in notes
    assert info["messageCount"] == preview["messageCount"]
    summarized = [r for r in llm.requests if "compacting the history" in last_user_text(r)]
    assert summarized and "tools" not in summarized[0].body  # summaries are plain calls
    final_request = llm.requests[-1].body["messages"]
    assert final_request[1]["content"].startswith("[Conversation summary")


def test_new_session_extracts_memories_in_the_background(agent: Any, sender: Any, llm: FakeLLM, services: Any) -> None:
    seed_messages(services, "agent:main:main", 4, 20)
    llm.script(reply("<memories>- the user is called Ada</memories>"))
    reset = agent.call("chat.send", {"sessionKey": "main", "message": "/new"})
    assert reset["response"] == "Session reset. Archived 4 messages."

    def memory_text() -> str | None:
        files = agent.call("workspace.list", {"path": "memory"})["files"]
        return agent.call("workspace.read", {"path": files[0]})["content"] if files else None

    text = wait_for(memory_text, timeout=20)
    assert "the user is called Ada" in text and "Extracted from session reset" in text


@pytest.mark.parametrize("level", ["high"])
def test_thinking_level_reaches_the_model(agent: Any, sender: Any, llm: FakeLLM, level: str) -> None:
    agent.call("config.set", {"path": "model", "value": {"provider": "openai", "id": "o4-mini"}})
    agent.call("chat.send", {"sessionKey": "main", "message": f"/think {level}"})
    llm.script(reply("deep thought"))
    run(agent, sender, "think")
    assert llm.requests[0].body["reasoning_effort"] == level


@pytest.mark.atomic_table  # a node answers at once: its answer races the turn's wait registering its token
def test_a_completion_that_could_not_be_delivered_is_delivered_on_the_repeat(
    agent: Any, connect: Any, sender: Any, llm: FakeLLM, monkeypatch: Any
) -> None:
    from orbital.agent import runs
    from orbital.errors import UnavailableError

    node = connect("node", "box")
    llm.script(reply(tool_calls=[call("box__Bash", {"command": "make", "background": True})]), reply("started"))
    started = agent.call("chat.send", {"sessionKey": "main", "message": "build"})
    event = wait_for(lambda: node_events(sender, node, "tool.invoke"))[0]
    node.call("tool.result", {"callId": event["callId"], "result": {"status": "running", "sessionId": "p-2"}})
    final_of(sender, agent.connection_id, started["runId"])
    real_submit = runs.submit
    calls = []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise UnavailableError("throttled")
        return real_submit(*args, **kwargs)

    monkeypatch.setattr(runs, "submit", flaky)
    llm.script(reply("noticed"))
    payload = {"eventId": "done-1", "sessionId": "p-2", "event": "finished", "exitCode": 0}
    first = node.error("node.exec.event", payload)
    assert first["code"] == 503 and first.get("retryable") is True  # the node keeps it and sends it again
    assert node.call("node.exec.event", payload) == {"ok": True}
    assert node.call("node.exec.event", payload) == {"ok": True}  # delivered once, however often it comes
    wait_for(lambda: len(llm.requests) == 3)
    assert len(calls) == 2
