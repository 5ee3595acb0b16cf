"""WindieOS's clients on AWS: the WebSocket handlers driven with API Gateway's events against moto, agent runs
executed by moto's Step Functions, the scripted model over HTTP.

On AWS a token is always required, and API Gateway has no custom close codes: a refused handshake is an `error`
frame posted first and then `DeleteConnection`. A turn's events are posted through the management API; a client
tool is asked with a posted `tool-call` and answered with a `tool-result` through `$default`; `$disconnect` fails the
calls of the socket's tools at once.
"""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from orbital.agent import client_tools
from orbital.engines import deferred
from orbital.runtime import gateway
from orbital.store import installs

from tests.conftest import GATEWAY_TOKEN as TOKEN
from tests.conftest import wait_for
from tests.support import rules
from tests.support.agent import chat_events, node_events
from tests.support.fake_llm import FakeLLM, error, reply
from tests.support.windie_sdk import sdk_refusals

READ_FILE = {
    "name": "read_file",
    "description": "Read a file",
    "execution_target": "local_runtime",
    "schema": {"type": "object", "properties": {"path": {"type": "string"}}},
}
_ids = itertools.count(1)


def _opened(headers: dict[str, str] | None = None, *, expect: int = 200) -> str:
    cid = f"windie-{next(_ids)}"
    event = {"requestContext": {"connectionId": cid, "routeKey": "$connect"}, "headers": headers or {}}
    assert gateway.handle_connect(event)["statusCode"] == expect
    return cid


def _frame(cid: str, body: Any) -> Any:
    """One text frame through `$default` (WindieOS's types are no route key); the route response's frame, if any."""
    text = body if isinstance(body, str) else json.dumps(body)
    context = {"connectionId": cid, "routeKey": "$default", "eventType": "MESSAGE"}
    answer = gateway.handle_message({"requestContext": context, "body": text, "isBase64Encoded": False})
    assert answer["statusCode"] == 200
    return json.loads(answer["body"]) if "body" in answer else None


def _gone(services: Any, cid: str) -> None:
    gateway.handle_disconnect({"requestContext": {"connectionId": cid, "routeKey": "$disconnect"}})


def _handshake(user: str = "aws-user", tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    definition: dict[str, Any] = {"version": 1, "tools": {"mode": "default_plus_client"}}
    if tools is not None:
        definition["tools"]["client_manifest"] = {"version": 1, "tools": tools}
    return {"type": "handshake", "user_id": user, "agent_definition": definition}


def _connected(tools: list[dict[str, Any]] | None = None) -> str:
    cid = _opened({"Authorization": f"Bearer {TOKEN}"})
    answer = _frame(cid, _handshake(tools=tools))
    if tools is not None:
        assert answer["type"] == "client-tool-manifest"
    return cid


def _turn(sender: Any, cid: str, rid: str, timeout: float = 30.0) -> list[dict[str, Any]]:
    def ended() -> list[dict[str, Any]] | None:
        frames = [f for f in sender.frames_to(cid) if isinstance(f, dict) and f.get("turn_ref") == rid]
        return frames if any(f["type"] in ("streaming-complete", "error") for f in frames) else None

    found: list[dict[str, Any]] = wait_for(ended, timeout=timeout)
    return found


def _closes(sender: Any, cid: str) -> list[int]:
    return [code for closed, code, _ in sender.closes if closed == cid]


@pytest.mark.parametrize(
    "first",
    [
        pytest.param({"type": "handshake", "user_id": "u", "requested_agent_policy": {}}, id="removed-field"),
        pytest.param({"type": "handshake", "agent_definition": {"tools": {"mode": "every"}}}, id="bad-mode"),
    ],
)
def test_a_bad_handshake_is_an_error_then_the_socket_deleted(token, flows, sender, services, first):
    cid = _opened({"Authorization": f"Bearer {TOKEN}"})
    assert _frame(cid, first) is None  # posted before the close: a route response would come after it
    (error,) = sender.frames_to(cid)
    assert error["type"] == "error" and error["payload"]["message"].startswith("Invalid handshake: ")
    assert _closes(sender, cid) == [1008]  # DeleteConnection (API Gateway sends its own code)
    assert services.connections.get(cid) is None


def test_bearers_at_the_upgrade(token, flows, sender, services):
    _opened({"Authorization": "Bearer wrong"}, expect=401)
    _opened({"Authorization": "Bearer wnd_install_unknown"}, expect=401)
    # no bearer: the usual deadline, then refused after the handshake
    cid = _opened()
    assert deferred.get(services, f"auth-{cid}").state == deferred.PENDING
    assert _frame(cid, _handshake()) is None
    assert sender.frames_to(cid)[-1]["type"] == "error" and _closes(sender, cid) == [1008]
    # an install's token: its user, a deadline the handshake settles, WindieOS only
    install, secret = installs.register(services.table, "Windows", now_ms=1, gateway_token=TOKEN)
    cid = _opened({"authorization": f"Bearer {secret}"})
    assert deferred.get(services, f"auth-{cid}").state == deferred.PENDING
    assert _frame(cid, _handshake(user="claimed")) is None
    assert deferred.get(services, f"auth-{cid}").state == deferred.DONE
    answer = _frame(cid, {"id": "ls", "type": "load-settings", "payload": {}})
    assert answer["type"] == "settings-loaded" and answer["user_id"] == install.user_id
    refused = gateway.handle_message(
        {
            "requestContext": {"connectionId": cid, "routeKey": "req"},
            "body": json.dumps({"type": "req", "id": "1", "method": "config.get", "params": {}}),
        }
    )
    assert json.loads(refused["body"])["error"]["code"] == 403


def test_a_query_streams_through_the_management_api(token, flows, sender, services, agent, llm: FakeLLM):
    llm.responder = rules.respond
    cid = _connected()
    query = {
        "id": "turn-1",
        "type": "query",
        "payload": {"text": "reply with exactly: PONG_W", "conversation_ref": "c"},
    }
    assert _frame(cid, query) is None  # everything is posted, query-accepted first
    events = _turn(sender, cid, "turn-1")
    assert events[0]["type"] == "query-accepted"
    assert all(e["id"] == "turn-1" and e["conversation_ref"] == "c" and e["user_id"] == "aws-user" for e in events)
    sequences = [e["sequence"] for e in events]
    assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences)
    assert "".join(e["payload"]["text"] for e in events if e["type"] == "streaming-response") == "PONG_W"
    assert events[-1]["payload"] == {"final_response": "PONG_W"}
    # a GSV client saw the run as it always did
    assert "final" in {e["state"] for e in chat_events(sender, agent.connection_id)}


def test_sequences_are_numbered_per_turn_across_the_runs_steps(token, flows, sender, services, agent, llm: FakeLLM):
    """A turn whose events come from several Lambda invocations (the query's, then the run's steps: a model call, the
    tool, the next model call) is numbered 1, 2, 3 ... with nothing skipped, as the TypeScript SDK requires
    (`tests.support.windie_sdk`, its rule applied to everything each socket was posted); so is a turn of another
    socket at the same time."""
    llm.responder = rules.respond
    one, two = _connected(), _connected()
    for cid, rid, text in ((one, "tool-turn", "TOOL:gsv__ListFiles {}"), (two, "plain", "reply with exactly: SEQ")):
        _frame(cid, {"id": rid, "type": "query", "payload": {"text": text, "conversation_ref": f"c-{rid}"}})
    turns = {"tool-turn": _turn(sender, one, "tool-turn"), "plain": _turn(sender, two, "plain")}
    assert "tool-output" in [e["type"] for e in turns["tool-turn"]]
    again = {
        "id": "again",
        "type": "query",
        "payload": {"text": "reply with exactly: AGAIN", "conversation_ref": "c-plain"},
    }
    _frame(two, again)
    turns["again"] = _turn(sender, two, "again")
    for rid, events in turns.items():
        assert [e["sequence"] for e in events] == list(range(1, len(events) + 1)), (rid, events)
    assert sdk_refusals(sender.frames_to(one)) == [] and sdk_refusals(sender.frames_to(two)) == []


@pytest.mark.atomic_table  # an answer races the turn's wait registering its task token
def test_a_client_tool_round_trip_and_a_client_that_leaves(token, flows, sender, services, agent, llm: FakeLLM):
    llm.responder = rules.respond
    cid = _connected([READ_FILE])
    query = {"id": "t7", "type": "query", "payload": {"text": 'TOOL:read_file {"path":"a"}', "conversation_ref": "t"}}
    assert _frame(cid, query) is None
    call = wait_for(lambda: next((f for f in sender.frames_to(cid) if f.get("type") == "tool-call"), None), 30)
    assert call["payload"]["tool_name"] == "read_file" and call["payload"]["parameters"] == {"path": "a"}
    result = {"request_id": call["payload"]["request_id"], "success": True, "data": {"output": "reply with exactly: D"}}
    assert _frame(cid, {"id": "r", "type": "tool-result", "payload": result}) is None
    assert _turn(sender, cid, "t7")[-1]["payload"]["final_response"] == "D"
    # another socket cannot answer this socket's calls
    other = _connected()
    assert _frame(other, {"id": "x", "type": "tool-result", "payload": result})["type"] == "error"

    services.config.set_path("timeouts.toolMs", 600_000)  # below, the call ends by the close, not by its timeout
    query = {"id": "t8", "type": "query", "payload": {"text": 'TOOL:read_file {"path":"b"}', "conversation_ref": "u"}}
    assert _frame(cid, query) is None
    wait_for(lambda: [f for f in sender.frames_to(cid) if f.get("type") == "tool-call" and f["id"] == "t8"], 30)
    session = next(f["session_id"] for f in sender.frames_to(cid) if f.get("turn_ref") == "t8")
    _gone(services, cid)

    def ended() -> list[dict[str, Any]] | None:
        messages = agent.call("session.preview", {"sessionKey": session})["messages"]
        return messages if messages[-1]["role"] == "assistant" and len(messages) == 4 else None

    messages = wait_for(ended, timeout=30)
    assert messages[2]["isError"] is True and "Client disconnected" in json.dumps(messages[2]["content"])


def test_settings_rehydrate_and_stop(token, flows, sender, services, agent, llm: FakeLLM):
    cid = _connected()
    choice = {"model_provider": "openai", "selected_model_id": "gpt-5-mini"}
    update = {"id": "u", "type": "update-settings", "payload": choice}
    assert set(_frame(cid, update)["payload"]["updated_keys"]) == {"model_provider", "selected_model_id"}
    loaded = _frame(cid, {"id": "l", "type": "load-settings", "payload": {}})["payload"]["config"]
    assert loaded["selected_model_id"] == "gpt-5-mini"
    assert all(v["api_key"] == "" for v in loaded["provider_api_keys"].values())
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    rehydrate = {"conversation_ref": "r", "messages": history, "rehydrate_mode": "replace"}
    assert _frame(cid, {"id": "h", "type": "rehydrate-conversation", "payload": rehydrate}) is None
    ack = _frame(cid, {"id": "s", "type": "stop-query", "payload": {"conversation_ref": "r"}})
    assert ack["type"] == "stop-query-ack" and ack["payload"]["stopped"] is False  # nothing was running
    listed = agent.call("sessions.list", {"limit": 100})["sessions"]
    key = next(s["sessionKey"] for s in listed if s.get("label") == "windie:aws-user:r")
    shown = agent.call("session.preview", {"sessionKey": key})["messages"]
    assert [m["role"] for m in shown] == ["user", "assistant"]
    assert _frame(cid, {"id": "m", "type": "list-models", "payload": {}})["type"] == "models-listed"
    assert _frame(cid, {"id": "f", "type": "load-settings", "payload": {}, "foo": 1})["type"] == "error"
    assert _closes(sender, cid) == []


# --- the HTTP API's previews are what a query gets ------------------------------------------------------------------

SHAPED = {
    "version": 1,
    "tools": {
        "mode": "default_plus_client",
        "disabled_tools": ["gsv__ReadFile"],
        "disabled_capabilities": ["browser"],
        "client_manifest": {"version": 1, "tools": [READ_FILE, {"name": "gsv__Sneaky", "schema": {}}]},
    },
}


def _first_turn(sender: Any, cid: str, rid: str, conversation: str) -> list[dict[str, Any]]:
    """A conversation's first turn, to its end: the frames of the turn."""
    query = {
        "id": rid,
        "type": "query",
        "payload": {"text": f"reply with exactly: {rid}", "conversation_ref": conversation},
    }
    assert _frame(cid, query) is None
    return _turn(sender, cid, rid)


def _functions(flat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in t.items() if k != "type"} for t in flat]


@pytest.mark.parametrize("who", ["gateway", "install"])
def test_the_sdk_previews_report_what_a_query_gets(token, flows, sender, services, agent, llm: FakeLLM, connect, who):
    """For one caller (the gateway's token, or an install's), `/api/sdk/*` against a `/ws` query's first turn: the
    same tools (to the function), the same system prompt and transparency events, the same model and catalog."""
    from orbital.rest.app import create_app
    from starlette.testclient import TestClient

    llm.responder = rules.respond
    services.config.set_path("providers.openai.models", ["gpt-test", "gpt-chosen"])
    connect("node", "laptop")  # its tools: the gateway's caller is offered them, an install is not
    if who == "install":
        install, secret = installs.register(services.table, "Linux", now_ms=1, gateway_token=TOKEN)
        user, auth = install.user_id, {"Authorization": f"Bearer {secret}"}
    else:
        user, auth = "aws-user", {"Authorization": f"Bearer {TOKEN}"}
    with TestClient(create_app()) as http:
        for n, definition in enumerate((None, SHAPED)):
            cid = _opened(auth)
            handshake: dict[str, Any] = {"type": "handshake", "user_id": "claimed" if who == "install" else user}
            if definition is not None:
                handshake["agent_definition"] = definition
            _frame(cid, handshake)
            if n == 0:  # the user's model choice: the model of its queries and previews from now on
                choice = {"model_provider": "openai", "selected_model_id": "gpt-chosen@@variant"}
                assert _frame(cid, {"id": "u", "type": "update-settings", "payload": choice})["type"] == (
                    "settings-updated"
                )
            conversation = f"agree-{who}-{n}"
            asked = {"user_id": user, "conversation_ref": conversation, "user_query_raw": "hi"}
            if definition is not None:
                asked["agent_definition"] = definition
            plan = http.post("/api/sdk/query-plan", json=asked, headers=auth)
            assert plan.status_code == 200, plan.text
            planned = plan.json()

            frames = _first_turn(sender, cid, f"agree{n}", conversation)
            posted = [{"type": f["type"], "payload": f["payload"]} for f in frames[1:3]]
            assert [f["type"] for f in posted] == ["system-prompt", "tool-schemas"]
            offered = [t["function"] for t in posted[1]["payload"]["tool_schemas"]]
            assert offered == _functions(planned["provider_tool_schemas"])
            assert planned["transparency_events"] == posted  # the system prompt too
            names = {t["name"] for t in offered}
            if who == "install":
                assert names <= {"read_file"}
            else:
                assert "laptop__Bash" in names
            if definition is None:
                schemas = http.get("/api/sdk/tool-schemas", params={"user_id": user}, headers=auth).json()
                assert _functions(schemas["provider_tool_schemas"]) == offered
                assert schemas["config"]["selected_model_id"] == "gpt-chosen"
            else:
                assert "read_file" in names and "gsv__ReadFile" not in names and "gsv__Sneaky" not in names
                assert not any("browser" in name.lower() for name in names)
                preview = http.post("/api/sdk/prompt-preview", json=asked, headers=auth).json()
                assert _functions(preview["provider_tool_schemas"]) == offered
            assert frames[-1]["payload"].get("final_response") == f"agree{n}"
            sent = next(r for r in llm.requests if f"agree{n}" in json.dumps(r.body)).body
            assert sent["model"] == "gpt-chosen"
            assert sent["messages"][0] == {"role": "system", "content": posted[0]["payload"]["content"]}
            given = sorted(t["function"]["name"] for t in sent.get("tools", []))
            assert given == sorted(names)  # what the model was given

        listed = _frame(cid, {"id": "m", "type": "list-models", "payload": {}})["payload"]
        models = http.get("/api/sdk/models", params={"user_id": user}, headers=auth).json()
        assert models["models"] == listed["local"] + listed["online"] and models["models"]
        assert models["config"]["selected_model_id"] == "gpt-chosen"
        assert "sk-test-key" not in json.dumps(models)


# --- an install is a guest of the owner's gateway -------------------------------------------------------------------

OWNER_FILES = {
    "USER.md": "OWNER_USER_NOTES",
    "SOUL.md": "OWNER_SOUL",
    "AGENTS.md": "OWNER_AGENTS",
    "MEMORY.md": "OWNER_MEMORY",
    "skills/deploy/SKILL.md": "---\nname: deploy\ndescription: OWNER_SKILL\n---\nsteps",
}


def _guest_responder(request: Any) -> Any:
    """The rules, and a summary with memories for a compaction's summarizer."""
    messages = request.body.get("messages") if isinstance(request.body, dict) else None
    if messages and messages[0].get("role") == "system" and "condense conversations" in str(messages[0]["content"]):
        return reply("<summary>they talked</summary>\n<memories>- INSTALL_WROTE_THIS</memories>")
    return rules.respond(request)


def test_an_install_reaches_nothing_of_the_owners_workspace(token, flows, sender, services, agent, llm, connect):
    from orbital.agent import memories
    from orbital.domain.compaction import memory_file_date
    from orbital.domain.session_keys import session_agent_id
    from orbital.store import keys

    llm.responder = _guest_responder
    connect("node", "laptop")
    _, secret = installs.register(services.table, "Linux", now_ms=1, gateway_token=TOKEN)
    cid = _opened({"Authorization": f"Bearer {secret}"})
    _frame(cid, _handshake())
    asked = {"text": 'TOOL:gsv__ReadFile {"path":"USER.md"}', "conversation_ref": "g"}
    query = {"id": "g1", "type": "query", "payload": asked}

    def owner_files(agent_id: str) -> str:
        daily = f"memory/{memory_file_date(datetime.now(UTC))}.md"
        for name, text in {**OWNER_FILES, daily: "OWNER_DAILY"}.items():
            services.workspace.put(keys.workspace_object(agent_id, name), text.encode(), content_type="text/markdown")
        return daily

    daily = owner_files("main")
    assert _frame(cid, query) is None
    events = _turn(sender, cid, "g1")
    session = events[0]["session_id"]
    assert session_agent_id(session) == "main"
    prompt = next(e for e in events if e["type"] == "system-prompt")["payload"]["content"]
    assert next(e for e in events if e["type"] == "tool-schemas")["payload"]["tool_schemas"] == []
    (refused,) = [e for e in events if e["type"] == "tool-output"]
    assert refused["payload"]["success"] is False and "not available" in refused["payload"]["output"]
    sent = json.dumps([r.body for r in llm.requests])
    for text in ("OWNER_USER_NOTES", "OWNER_SOUL", "OWNER_AGENTS", "OWNER_MEMORY", "OWNER_SKILL", "OWNER_DAILY"):
        assert text not in prompt and text not in sent, text
    assert "laptop" not in prompt and "agents/main" not in prompt
    assert all(not r.body.get("tools") for r in llm.requests)

    # what a compaction of its conversation finds never goes into the owner's memory files
    services.config.set_path("compaction.keepRecentTokens", 1)
    history = [{"role": "user", "content": f"note {n}"} for n in range(6)]
    rehydrate = {"conversation_ref": "g", "messages": history, "rehydrate_mode": "replace"}
    assert _frame(cid, {"id": "h", "type": "rehydrate-conversation", "payload": rehydrate}) is None
    assert memories.wanted(services, session) is False  # nor from its archive, whoever resets it
    done = _frame(cid, {"id": "c", "type": "compact-history", "payload": {"conversation_ref": "g", "force": True}})
    assert done["type"] == "context-compaction-completed" and done["payload"]["compacted"] is True
    assert any("condense conversations" in json.dumps(r.body) for r in llm.requests)
    found = services.workspace.get(keys.workspace_object("main", daily))
    assert found is not None and found[0] == b"OWNER_DAILY"


@pytest.mark.atomic_table  # a node answers at once: its answer races the turn's wait registering its token
def test_a_node_tool_that_came_later_is_never_sent_to_the_client(token, flows, sender, services, agent, llm, connect):
    llm.responder = rules.respond
    bash = {"name": "laptop__Bash", "description": "mine", "schema": {"type": "object"}}
    cid = _connected([bash])  # accepted: no node had that name at the handshake
    node = connect("node", "laptop")
    query = {"id": "n1", "type": "query", "payload": {"text": 'TOOL:laptop__Bash {"c":"ls"}', "conversation_ref": "n"}}
    assert _frame(cid, query) is None
    invoke = wait_for(lambda: node_events(sender, node, "tool.invoke"), 30)[0]
    assert invoke["tool"] == "Bash"
    node.call("tool.result", {"callId": invoke["callId"], "result": "reply with exactly: FROM_NODE"})
    events = _turn(sender, cid, "n1")
    assert events[-1]["payload"]["final_response"] == "FROM_NODE"
    assert [e for e in sender.frames_to(cid) if e.get("type") == "tool-call"] == []
    (output,) = [e for e in events if e["type"] == "tool-output"]  # it ran elsewhere: reported, not asked
    assert output["payload"]["tool_name"] == "laptop__Bash"


def test_an_installs_manifest_does_not_tell_which_node_tools_exist(token, flows, sender, services, agent, connect):
    connect("node", "laptop")
    _, secret = installs.register(services.table, "Linux", now_ms=1, gateway_token=TOKEN)
    cid = _opened({"Authorization": f"Bearer {secret}"})
    names = ("laptop__Bash", "nowhere__Bash", "gsv__ConfigGet", "read_file")
    tools = [{"name": n, "description": "", "schema": {"type": "object"}} for n in names]
    answer = _frame(cid, _handshake(tools=tools))
    assert [t["name"] for t in answer["payload"]["accepted"]] == ["read_file"]
    assert {r["reason"] for r in answer["payload"]["rejected"]} == {"reserved backend tool names cannot be overridden"}
    assert [r["name"] for r in answer["payload"]["rejected"]] == list(names[:3])


def test_an_install_spends_only_on_what_the_owner_offers(token, flows, sender, services, agent, llm):
    llm.responder = rules.respond
    _, secret = installs.register(services.table, "Linux", now_ms=1, gateway_token=TOKEN)
    cid = _opened({"Authorization": f"Bearer {secret}"})
    _frame(cid, _handshake())
    for choice in (
        {"model_provider": "openai", "selected_model_id": "gpt-9-ultra"},
        {"model_provider": "anthropic", "selected_model_id": "claude-opus-4-1"},  # no key for it
        {"selected_model_id": "o3-pro@@variant"},
    ):
        refused = _frame(cid, {"id": "u", "type": "update-settings", "payload": choice})
        assert refused["type"] == "error" and "not offered" in refused["payload"]["message"], choice
    loaded = _frame(cid, {"id": "l", "type": "load-settings", "payload": {}})["payload"]["config"]
    assert loaded["selected_model_id"] == "gpt-test"  # unchanged
    offered = {"model_provider": "openai", "selected_model_id": "gpt-5-mini"}
    assert _frame(cid, {"id": "u2", "type": "update-settings", "payload": offered})["type"] == "settings-updated"


def test_an_installs_text_is_never_a_command_or_a_directive(token, flows, sender, services, agent, llm):
    """Its text is the model's: no directive picks another model or level, no command acts on the session; only
    `/stop` stops, as `stop-query` does."""
    llm.responder = rules.respond
    _, secret = installs.register(services.table, "Linux", now_ms=1, gateway_token=TOKEN)
    cid = _opened({"Authorization": f"Bearer {secret}"})
    _frame(cid, _handshake())
    for rid, text in (
        ("d1", "/m:openai/gpt-9-ultra reply with exactly: DIRECTIVE"),
        ("d2", "/t:xhigh reply with exactly: THINK"),
        ("d3", "/new"),
    ):
        query = {"id": rid, "type": "query", "payload": {"text": text, "conversation_ref": "spend"}}
        assert _frame(cid, query) is None
        events = _turn(sender, cid, rid)
        assert events[-1]["type"] == "streaming-complete", events[-1]
        sent = next(r for r in llm.requests if text in json.dumps(r.body)).body
        assert sent["model"] == "gpt-test" and "reasoning_effort" not in sent
        assert json.dumps(text)[1:-1] in json.dumps(sent["messages"][-1])
    session = events[0]["session_id"]
    assert len(agent.call("session.preview", {"sessionKey": session})["messages"]) == 6  # /new reset nothing
    asked = len(llm.requests)
    stop = {"id": "s", "type": "query", "payload": {"text": "/stop", "conversation_ref": "spend"}}
    answer = _frame(cid, stop)  # a command's reply, at once
    assert answer["type"] == "streaming-complete" and answer["payload"]["final_response"] == "No run in progress."
    assert len(llm.requests) == asked


class _Invocation:
    """A Lambda context with so many milliseconds left."""

    def __init__(self, left_ms: int) -> None:
        self.left_ms = left_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.left_ms


def test_compact_history_answers_within_the_invocations_time(token, flows, sender, services, agent, llm):
    from orbital.agent import budgets, runs
    from orbital.ports import invocation

    def slow_summaries(request: Any) -> Any:
        if "condense conversations" in json.dumps(request.body.get("messages", [])[:1]):
            return reply("<summary>they talked</summary>", chunks=4, delay_per_chunk=1.0)
        return rules.respond(request)

    llm.responder = slow_summaries
    services.config.set_path("compaction.keepRecentTokens", 1)
    services.config.set_path("budgets.daily", 10_000_000)
    cid = _connected()
    history = [{"role": "user", "content": f"note {n}"} for n in range(6)]
    rehydrate = {"conversation_ref": "slow", "messages": history, "rehydrate_mode": "replace"}
    assert _frame(cid, {"id": "h", "type": "rehydrate-conversation", "payload": rehydrate}) is None
    compact = {"id": "c", "type": "compact-history", "payload": {"conversation_ref": "slow", "force": True}}
    with invocation.running(_Invocation(4_000)):  # 2 s once the margin is kept
        answer = _frame(cid, compact)
    assert (
        answer["type"] == "context-compaction-failed" and "could not finish within 2s" in answer["payload"]["message"]
    )
    assert [f["type"] for f in sender.frames_to(cid) if f.get("id") == "c"] == ["context-compaction-started"]
    assert budgets.status(services, services.config.effective())["daily"]["used"] == 0  # reserved, then released
    listed = agent.call("sessions.list", {"limit": 100})["sessions"]
    key = next(s["sessionKey"] for s in listed if s.get("label") == "windie:aws-user:slow")
    assert runs.current_run(services, key) is None  # the session it held is free again
    assert len(agent.call("session.preview", {"sessionKey": key})["messages"]) == 6  # unchanged

    with invocation.running(_Invocation(1_500)):  # not even a second to try
        assert "more time" in _frame(cid, compact)["payload"]["message"]
    llm.responder = _guest_responder
    with invocation.running(_Invocation(20_000)):
        done = _frame(cid, compact)
    assert done["type"] == "context-compaction-completed" and done["payload"]["compacted"] is True
    assert runs.current_run(services, key) is None


def test_a_compaction_the_model_cannot_make_leaves_the_history_alone(token, flows, sender, services, agent, llm):
    """Asked for (`compact-history`), a compaction whose summary no model call makes fails and changes nothing,
    rather than replacing the history with a note that it was left out."""
    from orbital.ports import invocation

    def no_summaries(request: Any) -> Any:
        if "condense conversations" in json.dumps(request.body.get("messages", [])[:1]):
            return error(500, "the model is down")
        return rules.respond(request)

    llm.responder = no_summaries
    services.config.set_path("compaction.keepRecentTokens", 1)
    cid = _connected()
    history = [{"role": "user", "content": f"note {n}"} for n in range(6)]
    rehydrate = {"conversation_ref": "down", "messages": history, "rehydrate_mode": "replace"}
    assert _frame(cid, {"id": "h", "type": "rehydrate-conversation", "payload": rehydrate}) is None
    compact = {"id": "c", "type": "compact-history", "payload": {"conversation_ref": "down", "force": True}}
    with invocation.running(_Invocation(20_000)):
        answer = _frame(cid, compact)
    assert answer["type"] == "context-compaction-failed" and "history unchanged" in answer["payload"]["message"]
    listed = agent.call("sessions.list", {"limit": 100})["sessions"]
    key = next(s["sessionKey"] for s in listed if s.get("label") == "windie:aws-user:down")
    texts = [m["content"] for m in agent.call("session.preview", {"sessionKey": key})["messages"]]
    assert len(texts) == 6 and "note 0" in json.dumps(texts[0])


def test_a_query_sent_while_the_session_is_held_waits_for_it(token, flows, sender, services, agent, llm):
    from orbital.agent import runs

    llm.responder = rules.respond
    cid = _connected()
    _first_turn(sender, cid, "before", "held")
    key = next(f["session_id"] for f in sender.frames_to(cid) if f.get("turn_ref") == "before")
    assert runs.hold(services, key, "compact-x", 60_000, kind="compaction")
    assert not runs.hold(services, key, "compact-y", 60_000, kind="compaction")  # one holder at a time
    query = {
        "id": "after",
        "type": "query",
        "payload": {"text": "reply with exactly: AFTER", "conversation_ref": "held"},
    }
    assert _frame(cid, query) is None
    assert len(services.sessions.load_meta(key)["queue"]) == 1  # queued behind the holder, as behind a run
    runs.finish(services, key, "compact-x", None)
    assert _turn(sender, cid, "after")[-1]["payload"]["final_response"] == "AFTER"


def test_a_message_before_any_handshake_waits_only_where_one_could_be_accepted(
    token, flows, sender, services, monkeypatch
):
    from orbital.dialects.windie import handshake

    monkeypatch.setattr(handshake, "HANDSHAKE_GRACE_S", 30.0)
    pauses: list[float] = []
    real_sleep = handshake.time.sleep

    def counted(seconds: float) -> None:  # a wait, if there were one, is a pause of the handler's thread
        pauses.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(handshake.time, "sleep", counted)
    query = {"id": "q", "type": "query", "payload": {"text": "hi", "conversation_ref": "c"}}
    for headers in ({}, None):  # no bearer on a gateway with a token: nothing could ever accept it
        cid = _opened(headers) if headers is not None else f"unknown-{next(_ids)}"  # no connection record at all
        _frame(cid, query)
        assert pauses == []
        assert sender.frames_to(cid)[-1]["payload"]["message"].startswith("Invalid handshake")
    # a socket that showed the gateway's token may still have its handshake accepted: it waits (here, in vain)
    monkeypatch.setattr(handshake, "HANDSHAKE_GRACE_S", 0.3)
    cid = _opened({"Authorization": f"Bearer {TOKEN}"})
    _frame(cid, query)
    assert pauses


def test_nothing_of_a_stopped_turn_follows_the_ack(token, flows, sender, services, agent, llm, monkeypatch):
    """The step that streams goes on in its own Lambda after `stop-query` (Step Functions does not stop a running
    task): here, where the stop is handled by the step's own process, the model's stream is closed at once, and
    nothing of the turn follows the ack (and what a step elsewhere would still stream finds its subscription gone
    when it numbers its next event)."""
    from orbital.agent import turn

    monkeypatch.setattr(turn, "ABORT_CHECK_S", 60.0)  # the step streams its whole reply after the stop
    text = "slow " * 20

    def slow(request: Any) -> Any:
        if "SLOW_AWS" in json.dumps(request.body.get("messages", [])[-1:]):
            return reply(text, chunks=20, delay_per_chunk=0.1)
        return rules.respond(request)

    llm.responder = slow
    cid = _connected()
    query = {"id": "s1", "type": "query", "payload": {"text": "SLOW_AWS", "conversation_ref": "stopme"}}
    assert _frame(cid, query) is None
    wait_for(lambda: [f for f in sender.frames_to(cid) if f.get("type") == "streaming-response"], 30)
    ack = _frame(cid, {"id": "st", "type": "stop-query", "payload": {"conversation_ref": "stopme", "turn_ref": "s1"}})
    assert ack["type"] == "stop-query-ack" and ack["payload"]["stopped"] is True
    seen = len(sender.frames_to(cid))

    slow_request = next(r for r in llm.requests if "SLOW_AWS" in json.dumps(r.body.get("messages", [])[-1:]))
    assert slow_request.ended.wait(30)
    assert slow_request.disconnected and slow_request.frames_sent < slow_request.frames_total
    assert [f["type"] for f in sender.frames_to(cid)[seen:] if f.get("turn_ref") == "s1"] == []


PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000") + b"\x00" * 16


@pytest.mark.atomic_table  # an answer races the turn's wait registering its task token
def test_a_tool_results_screenshot_is_an_artifact_reference_with_a_size_cap(token, flows, sender, services, agent, llm):
    import base64

    from orbital.dialects import windie
    from orbital.store import artifacts

    llm.responder = rules.respond
    cid = _connected([READ_FILE])

    def answered(rid: str, data: dict[str, Any]) -> dict[str, Any]:
        """The stored tool result of a call answered with `data`."""
        query = {
            "id": rid,
            "type": "query",
            "payload": {"text": 'TOOL:read_file {"path":"a"}', "conversation_ref": rid},
        }
        assert _frame(cid, query) is None
        call = wait_for(
            lambda: next((f for f in sender.frames_to(cid) if f.get("type") == "tool-call" and f["id"] == rid), None),
            30,
        )
        result = {"request_id": call["payload"]["request_id"], "success": True, "data": {"output": "shot", **data}}
        assert _frame(cid, {"id": f"{rid}-r", "type": "tool-result", "payload": result}) is None
        events = _turn(sender, cid, rid)
        messages = agent.call("session.preview", {"sessionKey": events[0]["session_id"]})["messages"]
        return next(m for m in messages if m["role"] == "toolResult")

    inline = answered("inline", {"screenshot": base64.b64encode(PNG).decode()})
    (image,) = [b for b in inline["content"] if b["type"] == "image"]
    artifact = image["r2Key"].removeprefix("media/")
    stored = artifacts.head(services.workspace, artifact)  # kept as an artifact the gateway's credential alone reads
    assert stored is not None and stored.size_bytes == len(PNG) and stored.owner == artifacts.PRIVATE_OWNER
    assert not stored.readable_by("user_anyone") and stored.readable_by(None)
    assert base64.b64encode(PNG).decode() in json.dumps(llm.requests[-1].body)  # the model saw it

    mine = artifacts.save(services.workspace, PNG, owner=artifacts.GATEWAY_OWNER, mime_type="image/png")
    referenced = answered("ref", {"screenshot_ref": mine.artifact_id})
    assert [b.get("r2Key") for b in referenced["content"] if b["type"] == "image"] == [f"media/{mine.artifact_id}"]

    huge = artifacts.save(
        services.workspace,
        PNG + b"\x00" * windie.MAX_TOOL_IMAGE_BYTES,
        owner=artifacts.GATEWAY_OWNER,
        mime_type="image/png",
    )
    capped = answered("huge", {"screenshot_ref": huge.artifact_id})
    assert [b["type"] for b in capped["content"]] == ["text"] and "screenshot left out" in capped["content"][0]["text"]
    assert all(len(json.dumps(r.body)) < windie.MAX_TOOL_IMAGE_BYTES for r in llm.requests)


def test_no_node_can_take_the_id_a_client_sockets_calls_are_owned_by(token, services, connect):
    from tests.conftest import NODE_RUNTIME, NODE_TOOLS, Rpc

    for node_id in (client_tools.owner("windie-1"), "~anything"):
        rpc = Rpc(services, f"conn-{node_id}")
        params = {
            "minProtocol": 1,
            "client": {"mode": "node", "id": node_id},
            "tools": NODE_TOOLS,
            "nodeRuntime": NODE_RUNTIME,
            "auth": {"token": TOKEN},
        }
        error = rpc.error("connect", params)
        assert error["code"] == 103 and "reserved" in error["message"]
        assert services.connections.node(node_id) is None
    connect("node", "laptop")  # an ordinary id still connects


def test_stop_query_catches_a_turn_acknowledged_but_not_queued_yet(token, flows, sender, services, monkeypatch):
    """A turn is acknowledged before it is queued, and API Gateway may hand the next frame (its `stop-query`) to
    another invocation before the first has queued it: the stop waits a moment for it rather than miss it."""
    from orbital.agent import runs
    from orbital.dialects import base, windie
    from orbital.dialects.windie import conversations
    from orbital.dialects.windie import query as windie_query

    cid = _connected()
    conv = "race"
    key = windie.session_key(services.config.effective(), "aws-user", conv)
    services.sessions.get_or_create_meta(key)
    assert runs.hold(services, key, "busy", 60_000, kind="test")  # the session is busy: a new turn queues
    deferred_sends: list[Any] = []
    real_call = base.call

    def slow_send(services_: Any, conn: Any, method: str, params: Any, **kwargs: Any) -> Any:
        if method != "chat.send":
            return real_call(services_, conn, method, params, **kwargs)
        deferred_sends.append(lambda: real_call(services_, conn, method, params, **kwargs))
        return base.Called(True, {"status": "started"})  # as a queued turn answers: the rest comes from the run

    monkeypatch.setattr(windie_query.base, "call", slow_send)
    query = {"id": "late", "type": "query", "payload": {"text": "hello", "conversation_ref": conv}}
    assert _frame(cid, query) is None
    assert next(f["type"] for f in sender.frames_to(cid) if f.get("turn_ref") == "late") == "query-accepted"
    assert deferred_sends  # acknowledged, not queued yet
    monkeypatch.setattr(windie_query.base, "call", real_call)

    def other_invocation_queues_it(_seconds: float) -> None:  # while the stop waits, the query's chat.send lands
        while deferred_sends:
            deferred_sends.pop()()

    monkeypatch.setattr(windie_query.time, "sleep", other_invocation_queues_it)
    stop = {"id": "s", "type": "stop-query", "payload": {"conversation_ref": conv, "turn_ref": "late"}}
    ack = _frame(cid, stop)
    assert ack["type"] == "stop-query-ack" and ack["payload"]["stopped"] is True
    meta = services.sessions.load_meta(key) or {}
    assert not [
        q for q in meta.get("queue") or [] if str(q.get("runId", "")).startswith(conversations._run_prefix("late"))
    ]
