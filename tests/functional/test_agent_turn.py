"""The agent turn executed for real: chat.send → agent_turn.asl.json run by moto → the agent steps in process →
a scripted model over HTTP on loopback → chat events to the client socket."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.support.agent import chat_events, final_of, node_events
from tests.support.fake_llm import FakeLLM, call, reply


def test_a_message_gets_a_streamed_reply(agent: Any, sender: Any, llm: FakeLLM) -> None:
    llm.script(reply("Hello there, human.", chunks=4))
    started = agent.call("chat.send", {"sessionKey": "main", "message": "hi", "runId": "run-1"})
    assert started == {"status": "started", "runId": "run-1"}  # F4: no `queued` key for a run that started
    final = final_of(sender, agent.connection_id, "run-1")
    assert final["state"] == "final", final
    assert final["sessionKey"] == "main"  # F2: this client said "main", so it hears "main"
    texts = [b["text"] for b in final["message"]["content"] if b["type"] == "text"]
    assert texts == ["Hello there, human."]
    deltas = [e["text"] for e in chat_events(sender, agent.connection_id) if e["state"] == "delta"]
    assert "".join(deltas) == "Hello there, human."
    preview = agent.call("session.preview", {"sessionKey": "main"})
    assert [m["role"] for m in preview["messages"]] == ["user", "assistant"]
    assert preview["messages"][0]["content"] == "hi"
    stats = agent.call("session.stats", {"sessionKey": "main"})
    assert stats["isProcessing"] is False
    assert stats["tokens"]["input"] == 12
    sent = llm.requests[0].body
    assert sent["model"] == "gpt-test"
    assert sent["messages"][-1] == {"role": "user", "content": "hi"}
    assert "Orbital" in sent["messages"][0]["content"]


def test_native_tools_loop_back_to_the_model(agent: Any, sender: Any, llm: FakeLLM) -> None:
    llm.script(
        reply("Let me write that down.", tool_calls=[call("gsv__WriteFile", {"path": "notes/a.md", "content": "x"})]),
        reply("Done."),
    )
    started = agent.call("chat.send", {"sessionKey": "main", "message": "save a note"})
    final = final_of(sender, agent.connection_id, started["runId"])
    assert final["state"] == "final", final
    partials = [e for e in chat_events(sender, agent.connection_id) if e["state"] == "partial"]
    assert len(partials) == 1
    read = agent.call("workspace.read", {"path": "notes/a.md"})
    assert read["content"] == "x"
    second = llm.requests[1].body["messages"]
    assert second[-1]["role"] == "tool"
    assert '"written":true' in second[-1]["content"]


# --- helpers for node tools -------------------------------------------------------------------------------------


def execution_history(flows: Any, run_id: str) -> list[str]:
    import boto3

    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    arn = flows["AgentTurnStateMachine"]
    names = []
    for ex in sfn.list_executions(stateMachineArn=arn)["executions"]:
        if ex["name"].startswith(run_id):
            events = sfn.get_execution_history(executionArn=ex["executionArn"])["events"]
            names += [e["stateEnteredEventDetails"]["name"] for e in events if "stateEnteredEventDetails" in e]
    return names


@pytest.mark.atomic_table  # a node answers at once: its answer races the turn's wait registering its token
def test_node_tool_results_come_back_in_the_models_order(
    agent: Any, connect: Any, sender: Any, llm: FakeLLM, flows: Any
) -> None:
    node = connect("node", "box")
    llm.script(
        reply(tool_calls=[call("box__Bash", {"command": "first"}), call("box__Read", {"path": "second"})]),
        reply("Both done."),
    )
    started = agent.call("chat.send", {"sessionKey": "main", "message": "do two things"})
    invokes = wait_for(
        lambda: len(node_events(sender, node, "tool.invoke")) == 2 and node_events(sender, node, "tool.invoke")
    )
    by_tool = {e["tool"]: e for e in invokes}
    assert by_tool["Bash"]["args"] == {"command": "first"}
    # answer in the opposite order: the model still sees Bash's result first (F14)
    assert node.call("tool.result", {"callId": by_tool["Read"]["callId"], "result": "read-output"}) == {"ok": True}
    assert node.call("tool.result", {"callId": by_tool["Bash"]["callId"], "result": {"stdout": "ran"}}) == {"ok": True}
    final = final_of(sender, agent.connection_id, started["runId"])
    assert final["state"] == "final", final
    tool_messages = [m for m in llm.requests[1].body["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ['{"stdout":"ran"}', "read-output"]
    assert "AwaitTools" in execution_history(flows, started["runId"])
    late = node.call("tool.result", {"callId": by_tool["Bash"]["callId"], "result": "again"})
    assert late == {"ok": True, "dropped": True}


def test_node_loss_mid_turn_feeds_an_error_back(
    agent: Any, connect: Any, sender: Any, llm: FakeLLM, services: Any
) -> None:
    from orbital.ports import lifecycle

    node = connect("node", "box")
    llm.script(reply(tool_calls=[call("box__Bash", {"command": "sleep 100"})]), reply("The node went away."))
    started = agent.call("chat.send", {"sessionKey": "main", "message": "run it"})
    wait_for(lambda: node_events(sender, node, "tool.invoke"))
    lifecycle.disconnect(services, node.connection_id)
    final = final_of(sender, agent.connection_id, started["runId"])
    assert final["state"] == "final"
    tool = next(m for m in llm.requests[1].body["messages"] if m["role"] == "tool")
    assert tool["content"] == "Error: Node disconnected: box"


@pytest.mark.atomic_table  # a node answers at once: its answer races the turn's wait registering its token
def test_a_tool_nobody_answers_times_out(agent: Any, connect: Any, sender: Any, llm: FakeLLM) -> None:
    node = connect("node", "box")
    agent.call("config.set", {"path": "timeouts.toolMs", "value": 1000})
    llm.script(reply(tool_calls=[call("box__Bash", {"command": "sleep 100"})]), reply("It timed out."))
    started = agent.call("chat.send", {"sessionKey": "main", "message": "run it"})
    invoke = wait_for(lambda: node_events(sender, node, "tool.invoke"))[0]
    final = final_of(sender, agent.connection_id, started["runId"], timeout=30)
    assert final["state"] == "final"
    tool = next(m for m in llm.requests[1].body["messages"] if m["role"] == "tool")
    assert tool["content"] == "Error: Tool execution timed out"
    assert node.call("tool.result", {"callId": invoke["callId"], "result": "late"}) == {"ok": True, "dropped": True}


def test_unknown_tools_and_bad_arguments_are_errors_the_model_sees(agent: Any, sender: Any, llm: FakeLLM) -> None:
    llm.script(
        reply(tool_calls=[call("nobody__Bash", {}), call("gsv__Nope", {}), call("gsv__ReadFile", {})]),
        reply("ok"),
    )
    started = agent.call("chat.send", {"sessionKey": "main", "message": "try"})
    assert final_of(sender, agent.connection_id, started["runId"])["state"] == "final"
    tools = [m["content"] for m in llm.requests[1].body["messages"] if m["role"] == "tool"]
    assert tools == [
        "Error: No node provides tool: nobody__Bash",
        "Error: Unknown native tool: gsv__Nope",
        "Error: path is required",
    ]


# --- runs, queue, stop ------------------------------------------------------------------------------------------


def test_messages_queue_behind_the_run_and_start_in_order(agent: Any, sender: Any, llm: FakeLLM) -> None:
    llm.script(reply("one", chunks=5, delay_per_chunk=0.3), reply("two"), reply("three"))
    first = agent.call("chat.send", {"sessionKey": "main", "message": "1"})
    llm.wait_for_requests(1)
    second = agent.call("chat.send", {"sessionKey": "main", "message": "2"})
    third = agent.call("chat.send", {"sessionKey": "main", "message": "3"})
    assert (second["queued"], second["queuePosition"]) == (True, 1)
    assert (third["queued"], third["queuePosition"]) == (True, 2)
    stats = agent.call("session.stats", {"sessionKey": "main"})
    assert stats["isProcessing"] is True and stats["queueSize"] == 2
    for run in (first, second, third):
        assert final_of(sender, agent.connection_id, run["runId"], timeout=30)["state"] == "final"
    preview = agent.call("session.preview", {"sessionKey": "main"})
    assert [m["content"] for m in preview["messages"] if m["role"] == "user"] == ["1", "2", "3"]
    assert agent.call("session.stats", {"sessionKey": "main"})["isProcessing"] is False


def test_only_a_queued_message_carries_queued(agent: Any, sender: Any, llm: FakeLLM) -> None:
    """F4: a message that starts a run is answered without a `queued` key at all (GSV clients test
    `queued === undefined`); one that waits behind the current run gets `queued: true` and its `queuePosition`.
    Both answers fit the documented result shape."""
    from orbital.methods import registry
    from pydantic import ValidationError

    from tests.support.fake_llm import hang

    llm.script(hang(20, then=reply("one")), reply("two"))
    first = agent.call("chat.send", {"sessionKey": "main", "message": "1", "runId": "run-1"})
    assert first == {"status": "started", "runId": "run-1"}
    llm.wait_for_requests(1)
    second = agent.call("chat.send", {"sessionKey": "main", "message": "2", "runId": "run-2"})
    assert second == {"status": "started", "runId": "run-2", "queued": True, "queuePosition": 1}
    spec = registry().get("chat.send")
    assert spec is not None and spec.result is not None
    for answer in (first, second):
        spec.result.model_validate(answer)
    with pytest.raises(ValidationError):  # the documented shape has no `queued: false`
        spec.result.model_validate({"status": "started", "runId": "run-3", "queued": False})
    llm.release()
    assert final_of(sender, agent.connection_id, "run-1")["state"] == "final"
    assert final_of(sender, agent.connection_id, "run-2")["state"] == "final"


def test_stop_cancels_the_run_and_the_next_message_runs(agent: Any, sender: Any, llm: FakeLLM) -> None:
    from tests.support.fake_llm import hang

    hung: list[Any] = []

    def respond(request: Any) -> Any:
        """By the message asked about, not in turn: the stopped run retries its call when the hang is released if
        it has not noticed the stop yet (it looks every few seconds), and that retry must not take the next run's
        reply. Its late reply is dropped (below)."""
        last = [m for m in request.body["messages"] if m["role"] == "user"][-1]["content"]
        if "think forever" in json.dumps(last):
            if not hung:
                hung.append(request)
                return hang(20)
            return reply("late")
        return reply("fresh")

    llm.responder = respond
    first = agent.call("chat.send", {"sessionKey": "main", "message": "think forever"})
    llm.wait_for_requests(1)
    stopped = agent.call("chat.send", {"sessionKey": "main", "message": "/stop"})
    assert stopped == {"status": "command", "command": "stop", "response": f"Stopped run {first['runId']}."}
    error = final_of(sender, agent.connection_id, first["runId"])
    assert error == {"runId": first["runId"], "sessionKey": "main", "state": "error", "error": "Run cancelled by user"}
    idle = agent.call("chat.send", {"sessionKey": "main", "message": "/stop"})
    assert idle["response"] == "No run in progress."
    llm.release()
    nxt = agent.call("chat.send", {"sessionKey": "main", "message": "again"})
    assert "queued" not in nxt
    assert final_of(sender, agent.connection_id, nxt["runId"])["state"] == "final"
    finals = [
        e for e in chat_events(sender, agent.connection_id) if e["runId"] == first["runId"] and e["state"] == "final"
    ]
    assert finals == []  # the stopped run's late reply is dropped


def test_a_model_error_ends_the_run_and_the_session_stays_usable(agent: Any, sender: Any, llm: FakeLLM) -> None:
    from tests.support.fake_llm import error

    llm.script(error(400, "Your request is broken"), reply("fine now"))
    bad = agent.call("chat.send", {"sessionKey": "main", "message": "x"})
    event = final_of(sender, agent.connection_id, bad["runId"])
    assert event["state"] == "error"
    assert "Your request is broken" in event["error"]
    assert "sk-test-key" not in event["error"]
    good = agent.call("chat.send", {"sessionKey": "main", "message": "y"})
    assert final_of(sender, agent.connection_id, good["runId"])["state"] == "final"


def test_missing_api_key_says_how_to_configure_one(flows: Any, connect: Any, sender: Any, monkeypatch: Any) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    client = connect("client", "lonely")
    started = client.call("chat.send", {"sessionKey": "main", "message": "hello?"})
    event = final_of(sender, client.connection_id, started["runId"])
    assert event["state"] == "error"
    assert event["error"].startswith("API key not configured for provider: anthropic")


def test_a_step_that_throws_ends_the_run_with_an_error(agent: Any, sender: Any, llm: FakeLLM, monkeypatch: Any) -> None:
    from orbital.agent import turn

    def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(turn, "_model_turn", broken)
    started = agent.call("chat.send", {"sessionKey": "main", "message": "x"})
    event = final_of(sender, agent.connection_id, started["runId"])
    assert event["state"] == "error"
    assert event["error"] == "The agent run failed: disk on fire"
    assert agent.call("session.stats", {"sessionKey": "main"})["isProcessing"] is False


def test_the_iteration_cap_ends_the_run_with_a_note(agent: Any, sender: Any, llm: FakeLLM) -> None:
    agent.call("config.set", {"path": "agents.maxIterations", "value": 2})
    llm.script(*(reply(tool_calls=[call("gsv__ListFiles", {})]) for _ in range(2)))
    started = agent.call("chat.send", {"sessionKey": "main", "message": "loop"})
    final = final_of(sender, agent.connection_id, started["runId"])
    assert final["state"] == "final"
    assert "agents.maxIterations" in final["message"]["content"][0]["text"]
    assert len(llm.requests) == 2


def test_a_token_budget_stops_spending(agent: Any, sender: Any, llm: FakeLLM) -> None:
    llm.script(reply("first answer"))
    first = agent.call("chat.send", {"sessionKey": "main", "message": "one"})
    final_of(sender, agent.connection_id, first["runId"])
    agent.call("session.patch", {"sessionKey": "main", "budget": {"maxTokens": 25}})
    refused = agent.error("chat.send", {"sessionKey": "main", "message": "two"})  # refused before a run (ADR 0026)
    assert refused["code"] == 429 and refused["message"].startswith("Token budget exceeded (session: 19/25)")
    assert len(llm.requests) == 1


# --- keys, resets, commands -------------------------------------------------------------------------------------


def test_other_clients_see_the_canonical_key(agent: Any, connect: Any, sender: Any, llm: FakeLLM) -> None:
    web = connect("client", "web-ui")
    llm.script(reply("hi"))
    started = web.call("chat.send", {"sessionKey": "agent:main:web:dm:local", "message": "hello"})
    mine = final_of(sender, web.connection_id, started["runId"])
    theirs = final_of(sender, agent.connection_id, started["runId"])
    assert mine["sessionKey"] == "agent:main:web:dm:local"
    assert theirs["sessionKey"] == "agent:main:main"


def test_idle_reset_keeps_the_triggering_message(agent: Any, sender: Any, llm: FakeLLM) -> None:
    llm.script(reply("old"), reply("new"))
    first = agent.call("chat.send", {"sessionKey": "main", "message": "before"})
    final_of(sender, agent.connection_id, first["runId"])
    before = agent.call("session.get", {"sessionKey": "main"})
    agent.call("session.patch", {"sessionKey": "main", "resetPolicy": {"mode": "idle", "idleMinutes": -1}})
    second = agent.call("chat.send", {"sessionKey": "main", "message": "after"})
    final_of(sender, agent.connection_id, second["runId"])
    after = agent.call("session.get", {"sessionKey": "main"})
    assert after["sessionId"] != before["sessionId"]
    assert before["sessionId"] in after["previousSessionIds"]
    preview = agent.call("session.preview", {"sessionKey": "main"})
    assert [m["content"] for m in preview["messages"] if m["role"] == "user"] == ["after"]


def test_idle_zero_resets_even_a_session_without_messages(agent: Any, sender: Any, llm: FakeLLM, services: Any) -> None:
    """GSV's own e2e scenario (spec §5.10): `session.get`, `session.patch {resetPolicy: {mode: "idle",
    idleMinutes: 0}}`, then `chat.send`. Idle 0 means any time at all since the last activity (`updatedAt`, which
    the patch moved) is too long, so the run resets the session first, although it holds no messages yet; the
    triggering message is the first of the new session, and the run answers it."""
    llm.script(reply("a fresh start"))
    before = agent.call("session.get", {"sessionKey": "main"})
    agent.call("session.patch", {"sessionKey": "main", "resetPolicy": {"mode": "idle", "idleMinutes": 0}})
    patched = agent.call("session.get", {"sessionKey": "main"})
    assert patched["resetPolicy"]["idleMinutes"] == 0 and patched["messageCount"] == 0
    wait_for(lambda: services.now_ms() > patched["updatedAt"])  # "more than 0 ms" has passed when the run starts
    started = agent.call("chat.send", {"sessionKey": "main", "message": "trigger idle auto reset"})
    assert final_of(sender, agent.connection_id, started["runId"])["state"] == "final"
    after = agent.call("session.get", {"sessionKey": "main"})
    assert after["sessionId"] != before["sessionId"]
    assert after["previousSessionIds"] == [before["sessionId"]]
    assert isinstance(after.get("lastResetAt"), int) and after["lastResetAt"] > patched["updatedAt"]
    assert after["messageCount"] == 2
    preview = agent.call("session.preview", {"sessionKey": "main"})
    assert preview["sessionId"] == after["sessionId"]
    first = preview["messages"][0]
    assert (first["role"], first["content"]) == ("user", "trigger idle auto reset")
    assert llm.requests[0].body["messages"][-1] == {"role": "user", "content": "trigger idle auto reset"}


def test_a_reader_never_sees_the_new_session_without_the_message_that_reset_it(
    agent: Any, sender: Any, llm: FakeLLM, services: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle reset and the message that caused it: a reader (`session.get`, `session.preview`) that reads the
    session right after the write that switched its sessionId (a hook on the table: the reader runs between that
    write and whatever the step does next, every time) finds the new session with that message in it, never the new
    session empty."""
    from orbital.store import keys

    def respond(request: Any) -> Any:
        last = [m for m in request.body["messages"] if m["role"] == "user"][-1]["content"]
        if isinstance(last, str) and "about to be archived" in last:
            return reply("<memories></memories>")  # the reset's memory extraction, in the background
        return reply("a reply")

    llm.responder = respond
    first = agent.call("chat.send", {"sessionKey": "main", "message": "before"})
    final_of(sender, agent.connection_id, first["runId"])
    key = "agent:main:main"
    before = services.sessions.load_meta(key)["sessionId"]
    agent.call("session.patch", {"sessionKey": "main", "resetPolicy": {"mode": "idle", "idleMinutes": -1}})
    seen: list[tuple[str, int, list[Any]]] = []
    table = services.sessions.table

    class Watched:
        """The sessions' table, reading the session again after each write of its meta."""

        def __getattr__(self, name: str) -> Any:
            return getattr(table, name)

        def put(self, item_key: Any, data: Any, **kwargs: Any) -> Any:
            done = table.put(item_key, data, **kwargs)
            if item_key == keys.session_meta(key) and data.get("sessionId") != before and not seen:
                meta = services.sessions.load_meta(key)
                seen.append((meta["sessionId"], meta["messageCount"], services.sessions.messages(key, meta=meta)))
            return done

    monkeypatch.setattr(services.sessions, "table", Watched())
    second = agent.call("chat.send", {"sessionKey": "main", "message": "after"})
    assert final_of(sender, agent.connection_id, second["runId"])["state"] == "final"
    ((session_id, count, messages),) = seen  # the first read of the new session
    assert session_id != before
    assert count >= 1 and [(m["role"], m["content"]) for m in messages][:1] == [("user", "after")], (count, messages)


def test_a_retried_first_step_resets_the_session_only_once(
    agent: Any, sender: Any, llm: FakeLLM, services: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the step is tried again after the reset and its message were stored (one write; the state machine retries
    a step on Lambda service errors), the session, reset since the run started, is not reset a second time, even
    with idle 0, and the message is not stored again: it is the one fresh session's first."""
    from orbital.agent import turn

    llm.script(reply("reset once"))
    key = "agent:main:main"
    agent.call("session.patch", {"sessionKey": "main", "resetPolicy": {"mode": "idle", "idleMinutes": 0}})
    before = services.sessions.load_meta(key)
    wait_for(lambda: services.now_ms() > before["updatedAt"])
    now = services.now_ms()
    run = {"runId": "run-x", "execution": "exec-x", "startedAt": now, "leaseUntil": now + 600_000, "iteration": 0}
    services.sessions.update_meta(key, lambda m: m.update(sessionKey=key, currentRun={**run, "input": {"text": "hi"}}))
    real = turn._model_turn
    failures = [RuntimeError("the step failed after the reset")]

    def flaky(*args: Any, **kwargs: Any) -> dict[str, Any]:
        if failures:
            raise failures.pop()
        return real(*args, **kwargs)

    monkeypatch.setattr(turn, "_model_turn", flaky)
    event = {"sessionKey": key, "runId": "run-x", "execution": "exec-x", "iteration": 0, "next": "start"}
    with pytest.raises(RuntimeError):
        turn.turn(services, event)
    reset = services.sessions.load_meta(key)
    assert reset["previousSessionIds"] == [before["sessionId"]]
    wait_for(lambda: services.now_ms() > reset["updatedAt"])  # idle 0 would call for another reset now
    assert turn.turn(services, event)["next"] == "done"
    after = services.sessions.load_meta(key)
    assert (after["sessionId"], after["previousSessionIds"]) == (reset["sessionId"], [before["sessionId"]])
    messages = services.sessions.messages(key)
    assert [(m["role"], turn.text_of(m)) for m in messages] == [("user", "hi"), ("assistant", "reset once")]


def test_commands_and_directives(agent: Any, sender: Any, llm: FakeLLM) -> None:
    status = agent.call("chat.send", {"sessionKey": "main", "message": "/status"})
    assert status["status"] == "command" and "Model: openai/gpt-test" in status["response"]
    model = agent.call("chat.send", {"sessionKey": "main", "message": "/model gpt-other"})
    assert model["response"] == "Model set to openai/gpt-other"
    status = agent.call("chat.send", {"sessionKey": "main", "message": "/status"})
    assert "Model: openai/gpt-other" in status["response"]  # F15: the session's effective model
    only = agent.call("chat.send", {"sessionKey": "main", "message": "/t:high"})
    assert only == {
        "status": "directive-only",
        "response": "_Thinking: high_",
        "directives": {"thinkLevel": "high", "model": None},
    }
    llm.script(reply("as you wish"))
    started = agent.call("chat.send", {"sessionKey": "main", "message": "/m:gpt-third explain"})
    assert started["directives"] == {"thinkLevel": None, "model": {"provider": "openai", "id": "gpt-third"}}
    final_of(sender, agent.connection_id, started["runId"])
    assert llm.requests[0].body["model"] == "gpt-third"
    assert llm.requests[0].body["messages"][-1]["content"] == "explain"
    unknown = agent.call("chat.send", {"sessionKey": "main", "message": "/unknowncommand"})
    assert unknown["status"] == "started"
    assert agent.error("chat.send", {"sessionKey": "main", "message": ""}) == {
        "code": 400,
        "message": "sessionKey and message required",
    }


def test_a_run_whose_execution_is_gone_does_not_hold_the_session(
    agent: Any, sender: Any, llm: FakeLLM, services: Any
) -> None:
    """A run whose execution is not running any more (it never started, or ended without releasing the session)
    frees it on the next send, which starts instead of queueing behind a ghost."""
    from tests.support.fake_llm import hang

    llm.script(hang(20), reply("fresh start"))
    dead = agent.call("chat.send", {"sessionKey": "main", "message": "doomed"})
    llm.wait_for_requests(1)
    # the run claims an execution that does not exist, claimed long ago (what a lost start or a vanished
    # execution looks like from the session)
    services.sessions.update_meta(
        "agent:main:main", lambda m: m["currentRun"].update(execution="ghost-execution", startedAt=0)
    )
    nxt = agent.call("chat.send", {"sessionKey": "main", "message": "anyone there?"})
    assert "queued" not in nxt
    gone = final_of(sender, agent.connection_id, dead["runId"])
    assert gone["state"] == "error" and gone["error"] == "Run ended unexpectedly"
    llm.release()
    assert final_of(sender, agent.connection_id, nxt["runId"])["state"] == "final"


def test_a_live_run_keeps_its_session_even_past_its_lease(agent: Any, sender: Any, llm: FakeLLM, services: Any) -> None:
    """The lease is a hint; the execution's state decides. A run still running is never taken over (its tool waits
    can outlast any fixed lease), so the next message queues behind it."""
    llm.script(reply("slow", chunks=4, delay_per_chunk=0.5), reply("next"))
    first = agent.call("chat.send", {"sessionKey": "main", "message": "slow"})
    llm.wait_for_requests(1)
    services.sessions.update_meta(
        "agent:main:main",
        lambda m: m["currentRun"].update(leaseUntil=1, startedAt=0),  # old and expired
    )
    nxt = agent.call("chat.send", {"sessionKey": "main", "message": "next one"})
    assert nxt["queued"] is True
    assert final_of(sender, agent.connection_id, first["runId"])["state"] == "final"
    assert final_of(sender, agent.connection_id, nxt["runId"])["state"] == "final"


@pytest.mark.atomic_table  # a node answers at once: its answer races the turn's wait registering its token
def test_stop_settles_the_calls_the_run_waits_for(agent: Any, connect: Any, sender: Any, llm: FakeLLM) -> None:
    node = connect("node", "box")
    llm.script(reply(tool_calls=[call("box__Bash", {"command": "sleep 100"})]))
    started = agent.call("chat.send", {"sessionKey": "main", "message": "run it"})
    invoke = wait_for(lambda: node_events(sender, node, "tool.invoke"))[0]
    stopped = agent.call("chat.send", {"sessionKey": "main", "message": "/stop"})
    assert stopped["response"] == f"Stopped run {started['runId']}, cancelled 1 pending tool(s)."
    assert final_of(sender, agent.connection_id, started["runId"])["error"] == "Run cancelled by user"
    assert node.call("tool.result", {"callId": invoke["callId"], "result": "late"}) == {"ok": True, "dropped": True}


def test_a_reset_during_a_run_cancels_it_and_keeps_the_queue(agent: Any, sender: Any, llm: FakeLLM) -> None:
    from tests.support.fake_llm import hang

    script = [hang(20), reply("in the fresh session")]

    def respond(request: Any) -> Any:
        last = [m for m in request.body["messages"] if m["role"] == "user"][-1]["content"]
        if isinstance(last, str) and "about to be archived" in last:
            return reply("<memories></memories>")  # the reset's memory extraction, in the background
        return script.pop(0)

    llm.responder = respond
    first = agent.call("chat.send", {"sessionKey": "main", "message": "old topic"})
    llm.wait_for_requests(1)
    queued = agent.call("chat.send", {"sessionKey": "main", "message": "queued before the reset"})
    assert queued["queued"] is True
    reset = agent.call("session.reset", {"sessionKey": "main"})
    assert reset["archivedMessages"] == 1
    cancelled = final_of(sender, agent.connection_id, first["runId"])
    assert cancelled["error"] == "Run cancelled: the session was reset"
    llm.release()
    done = final_of(sender, agent.connection_id, queued["runId"])
    assert done["state"] == "final", done
    users = [m["content"] for m in agent.call("session.preview", {"sessionKey": "main"})["messages"]]
    assert users[0] == "queued before the reset"  # the queued message ran in the fresh session


def test_an_unreadable_execution_state_never_frees_a_run(services: Any, aws: None, monkeypatch: Any) -> None:
    """DescribeExecution can be throttled: not knowing is not a reason to take a session away from its run."""
    from botocore.exceptions import ClientError
    from orbital.agent import runs

    class Throttled:
        """The Workflows port of a Step Functions that throttles DescribeExecution."""

        def status(self, execution_arn: str) -> str | None:
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "DescribeExecution")

    monkeypatch.setitem(services.__dict__, "workflows", Throttled())
    object.__setattr__(
        services, "settings", services.settings.model_copy(update={"agent_turn_arn": "arn:x:stateMachine:y"})
    )
    old = {"runId": "r", "execution": "e", "startedAt": 0, "leaseUntil": 0}
    assert runs.is_stale(services, old, runs.now_ms()) is False
