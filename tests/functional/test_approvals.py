"""Tool approvals in real agent runs on the AWS path: moto executes agent_turn.asl.json (the pause is AwaitTools'
`.waitForTaskToken`), the model is the scripted fake over HTTP, nodes and clients are in-process sockets."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.support.agent import chat_events, final_of, node_events
from tests.support.fake_llm import FakeLLM, call, reply

ASK_BASH = {"defaultDecision": "allow", "rules": [{"id": "ask-shell", "tool": "box__Bash", "decision": "ask"}]}


def policy(agent: Any, value: dict[str, Any]) -> None:
    agent.call("config.set", {"path": "toolApproval", "value": value})


def paused_of(sender: Any, connection_id: str, run_id: str, count: int = 1) -> list[dict[str, Any]]:
    def found() -> list[dict[str, Any]] | None:
        events = [
            e for e in chat_events(sender, connection_id) if e.get("runId") == run_id and e.get("state") == "paused"
        ]
        return events if len(events) >= count else None

    return wait_for(found, timeout=30)


def events_named(sender: Any, connection_id: str, name: str) -> list[dict[str, Any]]:
    return [f["payload"] for f in sender.frames_to(connection_id) if isinstance(f, dict) and f.get("event") == name]


def tool_contents(llm: FakeLLM, request: int) -> list[str]:
    return [m["content"] for m in llm.requests[request].body["messages"] if m["role"] == "tool"]


@pytest.mark.atomic_table  # the node answers at once, racing AwaitTools' registration: atomic on DynamoDB, not on moto
def test_the_run_pauses_until_yes_then_the_node_is_invoked(
    agent: Any, connect: Any, sender: Any, llm: FakeLLM, flows: Any
) -> None:
    node = connect("node", "box")
    policy(agent, ASK_BASH)
    llm.script(reply(tool_calls=[call("box__Bash", {"command": "ls", "apiKey": "sk-secret"})]), reply("listed"))
    started = agent.call("chat.send", {"sessionKey": "main", "message": "list files", "runId": "run-a"})
    assert started == {"status": "started", "runId": "run-a"}
    [paused] = paused_of(sender, agent.connection_id, "run-a")
    approval = paused["approval"]
    text = paused["message"]["content"][0]["text"]
    assert paused["message"]["role"] == "assistant" and paused["sessionKey"] == "main"
    assert text == (
        "Run paused: tool approval required.\nTool: box__Bash\n"
        'Args: {"command":"ls","apiKey":"***"}\nPolicy rule: ask-shell\n'
        'Reply with "yes" to approve or "no" to deny.'
    )
    assert approval["args"] == {"command": "ls", "apiKey": "***"}  # masked for everyone who is shown it
    assert approval["tool"] == "box__Bash" and approval["ruleId"] == "ask-shell" and approval["state"] == "pending"
    assert len(approval["approvalId"]) == 8 and int(approval["approvalId"], 16) >= 0
    assert wait_for(lambda: events_named(sender, agent.connection_id, "approval.requested")) == [approval]
    assert agent.call("approval.list", {})["approvals"] == [approval]
    assert agent.call("session.stats", {"sessionKey": "main"})["isProcessing"] is True
    assert node_events(sender, node, "tool.invoke") == []
    # the execution waits in AwaitTools (a task token, no Lambda running) for as long as nobody answers
    assert wait_for(lambda: execution_states(flows, "run-a")[-1:] == ["AwaitTools"])

    reminder = agent.call("chat.send", {"sessionKey": "main", "message": "still waiting?"})
    assert reminder == {
        "status": "paused",
        "runId": "run-a",
        "approvalId": approval["approvalId"],
        "response": f"Run is paused waiting for tool approval ({approval['approvalId']}) for box__Bash.\n"
        'Reply with "yes" to approve or "no" to deny.',
    }
    unknown = agent.call("chat.send", {"sessionKey": "main", "message": "yes please"})
    assert unknown["response"].startswith("Unknown approval id: please. Run is paused")
    assert node_events(sender, node, "tool.invoke") == []

    approved = agent.call("chat.send", {"sessionKey": "main", "message": "YES"})
    assert approved == {"status": "paused", "runId": "run-a", "response": "Approved box__Bash. Continuing run."}
    invoke = wait_for(lambda: node_events(sender, node, "tool.invoke"))[0]
    assert invoke["tool"] == "Bash" and invoke["args"] == {"command": "ls", "apiKey": "sk-secret"}
    node.call("tool.result", {"callId": invoke["callId"], "result": "a b c"})
    final = final_of(sender, agent.connection_id, "run-a")
    assert final["state"] == "final"
    assert tool_contents(llm, 1) == ["a b c"]
    assert len(llm.requests) == 2  # the model was not called while the run was paused
    resolved = events_named(sender, agent.connection_id, "approval.resolved")
    assert [(r["approvalId"], r["decision"], r["via"]) for r in resolved] == [
        (approval["approvalId"], "approve", "chat")
    ]
    [entry] = agent.call("approval.history", {"sessionKey": "main"})["entries"]
    assert entry["decision"] == "approve" and entry["via"] == "chat" and entry["by"]["kind"] == "client"
    assert entry["args"] == {"command": "ls", "apiKey": "***"}
    assert agent.call("approval.list", {})["approvals"] == []
    # neither the prompt nor the answers are in the transcript: the model saw only the tool result
    preview = agent.call("session.preview", {"sessionKey": "main"})
    texts = json.dumps(preview["messages"])
    assert "Run paused" not in texts and "still waiting" not in texts
    assert "AwaitTools" in execution_states(flows, "run-a")


def execution_states(flows: Any, run_id: str) -> list[str]:
    import boto3

    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    names = []
    for ex in sfn.list_executions(stateMachineArn=flows["AgentTurnStateMachine"])["executions"]:
        if ex["name"].startswith(run_id):
            events = sfn.get_execution_history(executionArn=ex["executionArn"])["events"]
            names += [e["stateEnteredEventDetails"]["name"] for e in events if "stateEnteredEventDetails" in e]
    return names


def test_no_denies_and_the_model_sees_it(agent: Any, connect: Any, sender: Any, llm: FakeLLM) -> None:
    node = connect("node", "box")
    policy(agent, ASK_BASH)
    llm.script(reply(tool_calls=[call("box__Bash", {"command": "rm -rf /"})]), reply("I did not run it."))
    started = agent.call("chat.send", {"sessionKey": "main", "message": "clean up"})
    paused_of(sender, agent.connection_id, started["runId"])
    denied = agent.call("chat.send", {"sessionKey": "main", "message": "[telegram · 1:23 PM UTC] no"})
    assert denied == {
        "status": "paused",
        "runId": started["runId"],
        "response": "Denied box__Bash. Continuing run without executing it.",
    }
    final = final_of(sender, agent.connection_id, started["runId"])
    assert final["state"] == "final"
    assert tool_contents(llm, 1) == ["Error: Tool execution denied by user"]
    assert node_events(sender, node, "tool.invoke") == []
    approval_id = events_named(sender, agent.connection_id, "approval.requested")[0]["approvalId"]
    later = agent.call("approval.resolve", {"approvalId": approval_id, "decision": "approve"})
    assert later["resolved"] is False and later["decision"] == "deny"
    assert later["message"].startswith("Already denied by ")


@pytest.mark.atomic_table  # a node answers at once: its answer races the turn's wait registering its token
def test_a_denying_rule_answers_at_once_without_a_pause(agent: Any, connect: Any, sender: Any, llm: FakeLLM) -> None:
    node = connect("node", "box")
    policy(
        agent,
        {
            "rules": [
                {
                    "id": "no-rm",
                    "tool": "*__Bash",
                    "when": [{"path": "command", "op": "contains", "value": "rm"}],
                    "decision": "deny",
                    "reason": "never delete",
                },
                {"id": "bare", "tool": "box__Read", "decision": "deny"},
                {"tool": "box__Write", "decision": "deny"},
            ]
        },
    )
    llm.script(
        reply(
            tool_calls=[
                call("box__Bash", {"command": "rm x"}),
                call("box__Read", {"path": "a"}),
                call("box__Write", {"path": "a"}),
                call("box__Bash", {"command": "ls"}),
            ]
        ),
        reply("some were refused"),
    )
    started = agent.call("chat.send", {"sessionKey": "main", "message": "go"})
    invoke = wait_for(lambda: node_events(sender, node, "tool.invoke"))[0]
    assert invoke["args"] == {"command": "ls"}
    node.call("tool.result", {"callId": invoke["callId"], "result": "ok"})
    assert final_of(sender, agent.connection_id, started["runId"])["state"] == "final"
    assert tool_contents(llm, 1) == [
        "Error: Tool execution denied by policy: never delete",
        "Error: Tool execution denied by policy: rule bare",
        "Error: Tool execution denied by policy",
        "ok",
    ]
    assert not [e for e in chat_events(sender, agent.connection_id) if e.get("state") == "paused"]


@pytest.mark.atomic_table  # a node answers at once: its answer races the turn's wait registering its token
def test_calls_after_the_paused_one_wait_and_are_gated_in_turn(
    agent: Any, connect: Any, sender: Any, llm: FakeLLM
) -> None:
    node = connect("node", "box")
    policy(agent, ASK_BASH)
    llm.script(
        reply(
            tool_calls=[
                call("box__Read", {"path": "before"}),
                call("box__Bash", {"command": "one"}),
                call("box__Read", {"path": "after"}),
                call("box__Bash", {"command": "two"}),
            ]
        ),
        reply("all done"),
    )
    started = agent.call("chat.send", {"sessionKey": "main", "message": "go"})
    run_id = started["runId"]
    first = paused_of(sender, agent.connection_id, run_id)[0]["approval"]
    # the call before the paused one is in flight; nothing after it is dispatched
    [before] = wait_for(lambda: node_events(sender, node, "tool.invoke"))
    assert before["args"] == {"path": "before"}
    node.call("tool.result", {"callId": before["callId"], "result": "r-before"})
    assert agent.call("approval.resolve", {"approvalId": first["approvalId"], "decision": "approve"}) == {
        "approvalId": first["approvalId"],
        "decision": "approve",
        "resolved": True,
    }
    # the approved call and the one after it (allowed) are launched; the last asks again
    invokes = wait_for(
        lambda: len(node_events(sender, node, "tool.invoke")) == 3 and node_events(sender, node, "tool.invoke")
    )
    assert [i["args"] for i in invokes[1:]] == [{"command": "one"}, {"path": "after"}]
    for invoke in invokes[1:]:
        node.call("tool.result", {"callId": invoke["callId"], "result": f"r-{json.dumps(invoke['args'])}"})
    second = paused_of(sender, agent.connection_id, run_id, count=2)[1]["approval"]
    assert second["args"] == {"command": "two"} and second["approvalId"] != first["approvalId"]
    assert len(llm.requests) == 1
    agent.call("approval.resolve", {"approvalId": second["approvalId"], "decision": "deny"})
    assert final_of(sender, agent.connection_id, run_id)["state"] == "final"
    assert tool_contents(llm, 1) == [
        "r-before",
        'r-{"command": "one"}',
        'r-{"path": "after"}',
        "Error: Tool execution denied by user",
    ]
    assert len(node_events(sender, node, "tool.invoke")) == 3


def test_an_unanswered_approval_is_denied_when_it_times_out(
    agent: Any, connect: Any, sender: Any, llm: FakeLLM
) -> None:
    node = connect("node", "box")
    policy(agent, {**ASK_BASH, "timeoutMs": 1000})
    llm.script(reply(tool_calls=[call("box__Bash", {"command": "ls"})]), reply("nobody answered"))
    started = agent.call("chat.send", {"sessionKey": "main", "message": "go"})
    approval = paused_of(sender, agent.connection_id, started["runId"])[0]["approval"]
    assert approval["expiresAt"] - approval["requestedAt"] == 1000
    final = final_of(sender, agent.connection_id, started["runId"], timeout=30)
    assert final["state"] == "final"
    assert tool_contents(llm, 1) == ["Error: Tool execution denied: no answer to the approval request within 1 s"]
    late = agent.call("approval.resolve", {"approvalId": approval["approvalId"], "decision": "approve"})
    assert late["resolved"] is False and late["decision"] == "timeout" and late["message"].startswith("Timed out at")
    [entry] = agent.call("approval.history", {"sessionKey": "main"})["entries"]
    assert entry["decision"] == "timeout" and entry["via"] == "timeout"
    assert node_events(sender, node, "tool.invoke") == []
    # a yes after the run ended is an ordinary message again
    nxt = agent.call("chat.send", {"sessionKey": "main", "message": "yes"})
    assert nxt["status"] == "started"


def test_stop_cancels_the_approval_and_ends_the_run(agent: Any, connect: Any, sender: Any, llm: FakeLLM) -> None:
    node = connect("node", "box")
    policy(agent, ASK_BASH)
    llm.script(reply(tool_calls=[call("box__Bash", {"command": "ls"})]))
    started = agent.call("chat.send", {"sessionKey": "main", "message": "go"})
    approval = paused_of(sender, agent.connection_id, started["runId"])[0]["approval"]
    stopped = agent.call("chat.send", {"sessionKey": "main", "message": "/stop"})
    assert stopped["status"] == "command" and stopped["response"].startswith(f"Stopped run {started['runId']}")
    assert final_of(sender, agent.connection_id, started["runId"])["error"] == "Run cancelled by user"
    assert agent.call("approval.list", {"sessionKey": "main"})["approvals"] == []
    [entry] = agent.call("approval.history", {"sessionKey": "main"})["entries"]
    assert entry["decision"] == "cancel" and entry["via"] == "stop"
    late = agent.call("approval.resolve", {"approvalId": approval["approvalId"], "decision": "approve"})
    assert late["resolved"] is False and late["decision"] == "cancel"
    assert node_events(sender, node, "tool.invoke") == []
    assert agent.call("session.stats", {"sessionKey": "main"})["isProcessing"] is False


@pytest.mark.atomic_table  # a node answers at once: its answer races the turn's wait registering its token
def test_remember_for_the_session_allows_what_the_rule_asks_about(
    agent: Any, connect: Any, sender: Any, llm: FakeLLM
) -> None:
    node = connect("node", "box")
    policy(
        agent,
        {
            "rules": [
                {"id": "ask-shell", "tool": "box__Bash", "decision": "ask"},
                {"tool": "box__Write", "decision": "ask"},
            ]
        },
    )
    llm.script(
        reply(tool_calls=[call("box__Bash", {"command": "one"})]),
        reply("first"),
        reply(tool_calls=[call("box__Bash", {"command": "two"}), call("box__Write", {"path": "w"})]),
        reply("second"),
    )
    first = agent.call("chat.send", {"sessionKey": "main", "message": "one"})
    approval = paused_of(sender, agent.connection_id, first["runId"])[0]["approval"]
    agent.call("approval.resolve", {"approvalId": approval["approvalId"], "decision": "approve", "remember": "session"})
    invoke = wait_for(lambda: node_events(sender, node, "tool.invoke"))[0]
    node.call("tool.result", {"callId": invoke["callId"], "result": "1"})
    final_of(sender, agent.connection_id, first["runId"])
    second = agent.call("chat.send", {"sessionKey": "main", "message": "two"})
    # the Bash call runs without asking (same rule); the Write call (no rule id: same tool and args only) asks
    invoke = wait_for(
        lambda: len(node_events(sender, node, "tool.invoke")) == 2 and node_events(sender, node, "tool.invoke")
    )[1]
    assert invoke["args"] == {"command": "two"}
    node.call("tool.result", {"callId": invoke["callId"], "result": "2"})
    write = paused_of(sender, agent.connection_id, second["runId"])[0]["approval"]
    assert write["tool"] == "box__Write" and write["ruleId"] is None
    agent.call("approval.resolve", {"approvalId": write["approvalId"], "decision": "deny"})
    assert final_of(sender, agent.connection_id, second["runId"])["state"] == "final"


def test_bad_answers_are_refused(agent: Any, connect: Any, sender: Any) -> None:
    with pytest.raises(Exception, match="Unknown approval id: nope"):
        agent.call("approval.resolve", {"approvalId": "nope", "decision": "approve"})
    with pytest.raises(Exception, match='decision must be "approve" or "deny"'):
        agent.call("approval.resolve", {"approvalId": "nope", "decision": "maybe"})
    with pytest.raises(Exception, match="sessionKey required"):
        agent.call("approval.history", {})


@pytest.mark.atomic_table  # DynamoDB's conditional writes race atomically; plain moto's do not
def test_racing_answers_and_the_timeout_dispatch_at_most_once(
    agent: Any, connect: Any, sender: Any, llm: FakeLLM, services: Any
) -> None:
    from orbital.agent import approvals

    node = connect("node", "box")
    policy(agent, ASK_BASH)
    llm.script(reply(tool_calls=[call("box__Bash", {"command": "ls"})]), reply("done"))
    started = agent.call("chat.send", {"sessionKey": "main", "message": "go"})
    approval = paused_of(sender, agent.connection_id, started["runId"])[0]["approval"]
    approval_id = approval["approvalId"]
    owner = {"kind": "client", "id": "admin", "label": "admin"}
    results: list[Any] = []
    jobs = [
        lambda: approvals.resolve(services, approval_id, "approve", by=owner, via="console"),
        lambda: approvals.resolve(services, approval_id, "approve", by=owner, via="cli"),
        lambda: approvals.resolve(services, approval_id, "deny", by=owner, via="rpc"),
        lambda: approvals.answer_from_message(services, "agent:main:main", "yes", by=owner, via="chat"),
        lambda: approvals.conclude(services, approval_id),  # the timeout's side of the race
    ]
    barrier = threading.Barrier(len(jobs))

    def run(job: Any) -> None:
        barrier.wait(timeout=30)
        results.append(job())

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == len(jobs)
    history = agent.call("approval.history", {"sessionKey": "main"})["entries"]
    assert len(history) == 1  # one decision, whoever made it
    decision = history[0]["decision"]
    winners = [  # approval.resolve's winner says `resolved`, a typed answer's says "Approved …" / "Denied …"
        r
        for r in results
        if isinstance(r, dict)
        and (r.get("resolved") is True or str(r.get("response", "")).startswith(("Approved ", "Denied ")))
    ]
    assert len(winners) == (0 if decision == "timeout" else 1)
    if decision == "approve":
        invoke = wait_for(lambda: node_events(sender, node, "tool.invoke"))[0]
        node.call("tool.result", {"callId": invoke["callId"], "result": "ok"})
    final = final_of(sender, agent.connection_id, started["runId"])
    assert final["state"] == "final"
    assert len(node_events(sender, node, "tool.invoke")) == (1 if decision == "approve" else 0)
    resolved = events_named(sender, agent.connection_id, "approval.resolved")
    assert len(resolved) == 1 and resolved[0]["decision"] == decision


def test_a_reset_cancels_the_approval(agent: Any, connect: Any, sender: Any, llm: FakeLLM) -> None:
    node = connect("node", "box")
    policy(agent, ASK_BASH)
    llm.script(reply(tool_calls=[call("box__Bash", {"command": "ls"})]))
    started = agent.call("chat.send", {"sessionKey": "main", "message": "go"})
    paused_of(sender, agent.connection_id, started["runId"])
    agent.call("session.reset", {"sessionKey": "main"})
    assert final_of(sender, agent.connection_id, started["runId"])["state"] == "error"
    [entry] = agent.call("approval.history", {"sessionKey": "main"})["entries"]
    assert entry["decision"] == "cancel"
    assert agent.call("approval.list", {})["approvals"] == []
    assert node_events(sender, node, "tool.invoke") == []


def test_hooks_hear_of_the_request_and_the_decision(
    agent: Any, connect: Any, sender: Any, llm: FakeLLM, services: Any
) -> None:
    connect("node", "box")
    heard: list[tuple[str, Any]] = []
    hooks = services.hooks
    requested = lambda _s, approval, run: heard.append(("requested", (approval["approvalId"], run["runId"])))  # noqa: E731
    resolved = lambda _s, approval, res: heard.append(("resolved", (approval["approvalId"], res["decision"])))  # noqa: E731
    replies = lambda _s, _key, run, state, text: heard.append((state, text))  # noqa: E731
    hooks.on_approval_requested.append(requested)
    hooks.on_approval_resolved.append(resolved)
    hooks.on_run_reply.append(replies)
    try:
        policy(agent, ASK_BASH)
        llm.script(reply(tool_calls=[call("box__Bash", {"command": "ls"})]), reply("ok"))
        started = agent.call("chat.send", {"sessionKey": "main", "message": "go"})
        approval = paused_of(sender, agent.connection_id, started["runId"])[0]["approval"]
        agent.call("approval.resolve", {"approvalId": approval["approvalId"], "decision": "deny", "via": "console"})
        final_of(sender, agent.connection_id, started["runId"])
    finally:
        hooks.on_approval_requested.remove(requested)
        hooks.on_approval_resolved.remove(resolved)
        hooks.on_run_reply.remove(replies)
    assert ("requested", (approval["approvalId"], started["runId"])) in heard
    assert ("resolved", (approval["approvalId"], "deny")) in heard
    assert ("paused", approval["prompt"]) in heard  # a channel's delivery is handed the prompt
    [entry] = agent.call("approval.history", {"sessionKey": "main"})["entries"]
    assert entry["via"] == "console" and entry["by"] == {"kind": "client", "id": "admin", "label": "admin"}


def test_a_channel_sender_who_is_no_owner_cannot_answer(
    agent: Any, connect: Any, sender: Any, llm: FakeLLM, services: Any
) -> None:
    from orbital.agent import approvals
    from orbital.errors import ForbiddenError

    connect("node", "box")
    policy(agent, ASK_BASH)
    agent.call("config.set", {"path": "owners", "value": ["telegram:1"]})
    llm.script(reply(tool_calls=[call("box__Bash", {"command": "ls"})]), reply("ok"))
    started = agent.call("chat.send", {"sessionKey": "main", "message": "go"})
    approval = paused_of(sender, agent.connection_id, started["runId"])[0]["approval"]
    stranger = {"kind": "channel", "id": "telegram:2", "label": "stranger"}
    with pytest.raises(ForbiddenError):
        approvals.resolve(services, approval["approvalId"], "approve", by=stranger, via="telegram")
    refused = approvals.answer_from_message(services, "agent:main:main", "yes", by=stranger, via="telegram")
    assert refused is not None and refused["approvalId"] == approval["approvalId"]
    assert refused["response"].startswith("Only an owner can approve or deny this tool call.")
    owner = {"kind": "channel", "id": "telegram:1", "label": "me"}
    answered = approvals.answer_from_message(services, "agent:main:main", "ok", by=owner, via="telegram")
    assert answered == {
        "status": "paused",
        "runId": started["runId"],
        "response": "Approved box__Bash. Continuing run.",
    }


@pytest.mark.atomic_table  # a node answers at once: its answer races the turn's wait registering its token
def test_remember_without_a_rule_allows_only_the_same_call(agent: Any, connect: Any, sender: Any, llm: FakeLLM) -> None:
    node = connect("node", "box")
    policy(agent, {"defaultDecision": "ask"})
    same = call("box__Bash", {"command": "uptime"})
    llm.script(
        reply(tool_calls=[same]),
        reply("first"),
        reply(tool_calls=[call("box__Bash", {"command": "uptime"}), call("box__Bash", {"command": "reboot"})]),
        reply("second"),
    )
    first = agent.call("chat.send", {"sessionKey": "main", "message": "one"})
    approval = paused_of(sender, agent.connection_id, first["runId"])[0]["approval"]
    assert approval["ruleId"] is None
    agent.call("approval.resolve", {"approvalId": approval["approvalId"], "decision": "approve", "remember": "session"})
    invoke = wait_for(lambda: node_events(sender, node, "tool.invoke"))[0]
    node.call("tool.result", {"callId": invoke["callId"], "result": "up"})
    final_of(sender, agent.connection_id, first["runId"])
    second = agent.call("chat.send", {"sessionKey": "main", "message": "two"})
    invokes = wait_for(
        lambda: len(node_events(sender, node, "tool.invoke")) == 2 and node_events(sender, node, "tool.invoke")
    )
    assert invokes[1]["args"] == {"command": "uptime"}  # the same call: not asked again
    node.call("tool.result", {"callId": invokes[1]["callId"], "result": "up"})
    other = paused_of(sender, agent.connection_id, second["runId"])[0]["approval"]
    assert other["args"] == {"command": "reboot"}  # other arguments: asked
    agent.call("approval.resolve", {"approvalId": other["approvalId"], "decision": "deny"})
    assert final_of(sender, agent.connection_id, second["runId"])["state"] == "final"
    assert len(node_events(sender, node, "tool.invoke")) == 2
    # a reset starts a new session: what was remembered is forgotten
    agent.call("session.reset", {"sessionKey": "main"})
    answers = [reply(tool_calls=[same]), reply("third")]

    def respond(request: Any) -> Any:  # by the conversation (the reset's memory extraction calls the model too)
        last = request.body["messages"][-1]
        if last.get("content") == "three" or last.get("role") == "tool":
            return answers.pop(0) if answers else reply("extra")
        return reply("[]")

    llm.responder = respond
    third = agent.call("chat.send", {"sessionKey": "main", "message": "three"})
    again = paused_of(sender, agent.connection_id, third["runId"])[0]["approval"]
    agent.call("approval.resolve", {"approvalId": again["approvalId"], "decision": "deny"})
    assert final_of(sender, agent.connection_id, third["runId"])["state"] == "final"


@pytest.mark.atomic_table  # a node answers at once: its answer races the turn's wait registering its token
def test_a_retried_step_after_the_approved_call_went_out_launches_nothing_again(
    agent: Any, connect: Any, sender: Any, llm: FakeLLM, services: Any
) -> None:
    from orbital.agent import turn

    node = connect("node", "box")
    policy(agent, ASK_BASH)
    llm.script(reply(tool_calls=[call("box__Bash", {"command": "ls"})]), reply("done"))
    started = agent.call("chat.send", {"sessionKey": "main", "message": "go"})
    approval = paused_of(sender, agent.connection_id, started["runId"])[0]["approval"]
    agent.call("approval.resolve", {"approvalId": approval["approvalId"], "decision": "approve"})
    invoke = wait_for(lambda: node_events(sender, node, "tool.invoke"))[0]
    run = services.sessions.load_meta("agent:main:main")["currentRun"]
    # the step that launched the approved call, tried again (a Lambda retry): it waits for that call, as is
    again = turn.turn(
        services,
        {
            "sessionKey": "agent:main:main",
            "runId": run["runId"],
            "execution": run["execution"],
            "iteration": 0,
            "next": "wait",
        },
    )
    assert again["next"] == "wait" and again["iteration"] == 0
    assert len(node_events(sender, node, "tool.invoke")) == 1
    assert node.call("tool.result", {"callId": invoke["callId"], "result": "listed"}) == {"ok": True}
    assert final_of(sender, agent.connection_id, started["runId"])["state"] == "final"
    assert tool_contents(llm, 1) == ["listed"]
