"""WindieOS's dialect, piece by piece: the handshake's validation, the client manifest, the per-run tool policy, the
events of a run, history conversion, the model catalog and first-frame detection."""

from __future__ import annotations

from typing import Any

import pytest
from orbital.agent import client_tools, context, model_catalog
from orbital.dialects import windie
from orbital.dialects.detect import GSV, WINDIE, detect
from orbital.dialects.windie import common, user_settings
from orbital.store.subscriptions import Subscription


class _NoNodes:
    def nodes(self) -> list[Any]:
        return []


class _NoMcp:
    def effective(self) -> dict[str, Any]:
        return {}


class _Services:
    """Just what manifest validation reads: the connected nodes (none) and the configuration (no MCP servers)."""

    connections = _NoNodes()
    config = _NoMcp()


def _handshake(**extra: Any) -> dict[str, Any]:
    return {"type": "handshake", "user_id": "u1", **extra}


# --- the handshake ------------------------------------------------------------------------------------------------


def test_a_minimal_handshake_has_the_default_policy():
    parsed = windie.parse_handshake(_handshake())
    assert parsed == {"user_id": "u1", "policy": {"mode": "default_plus_client"}, "runtime": {}, "manifest": []}


@pytest.mark.parametrize("field", windie.REMOVED_FIELDS)
def test_the_removed_top_level_fields_are_refused(field):
    with pytest.raises(common._InvalidFrameError, match=field):
        windie.parse_handshake(_handshake(**{field: ["x"]}))


def test_a_top_level_operating_system_is_folded_into_the_runtime():
    assert windie.parse_handshake(_handshake(operating_system="Windows"))["runtime"] == {"operating_system": "Windows"}
    inner = {"version": 1, "runtime": {"operating_system": "macOS"}}
    given = windie.parse_handshake(_handshake(operating_system="Windows", agent_definition=inner))
    assert given["runtime"] == {"operating_system": "macOS"}  # the canonical place wins
    with pytest.raises(common._InvalidFrameError):
        windie.parse_handshake(_handshake(operating_system={"name": "x"}))


@pytest.mark.parametrize(
    "definition",
    [
        "nope",
        {"version": 2},
        {"tools": {"mode": "everything"}},
        {"tools": {"available_tools": "read_file"}},
        {"tools": {"disabled_capabilities": ["teleport"]}},
        {"tools": {"client_manifest": {"tools": ["read_file"]}}},
        {"tools": {"client_manifest": {"tools": [{"name": f"t{n}", "schema": {}} for n in range(200)]}}},
        {"runtime": {"coordinate_methods": "manual"}},
    ],
)
def test_a_bad_agent_definition_is_refused(definition):
    with pytest.raises(common._InvalidFrameError):
        windie.parse_handshake(_handshake(agent_definition=definition))


def test_the_policy_and_client_only_mode_of_the_typescript_sdk():
    definition = {
        "version": 1,
        "tools": {
            "mode": "client_only",
            "available_tools": ["a"],
            "disabled_tools": ["b"],
            "disabled_capabilities": ["web_search", "ocr", "ocr"],
            "unknown": True,
        },
        "extra": {"ignored": True},
    }
    policy = windie.parse_handshake(_handshake(agent_definition=definition))["policy"]
    assert policy == {
        "mode": "client_only",
        "available": ["a"],
        "disabled": ["b"],
        "capabilities": ["ocr", "web_search"],
    }


def test_not_json_or_not_a_handshake_is_refused():
    for frame in (None, [], {"type": "query"}):
        with pytest.raises(common._InvalidFrameError):
            windie.parse_handshake(frame)


def test_the_manifest_accepts_and_rejects_with_reasons():
    schema = {"type": "object"}
    entries = [
        {"name": "read_file", "description": "r", "schema": schema},
        {"name": "gsv__ReadFile", "schema": schema},
        {"name": "gsv__Anything", "schema": schema},
        {"name": "no_schema"},
        {"name": "bad name!", "schema": schema},
        {"name": "read_file", "schema": schema},
    ]
    tools, accepted, rejected = windie.validate_manifest(_Services(), entries)  # type: ignore[arg-type]
    assert tools == [{"name": "read_file", "description": "r", "inputSchema": schema}]
    assert accepted == [{"name": "read_file", "description": "r", "execution_target": "local_runtime"}]
    assert [(r["name"], r["reason"]) for r in rejected[:3]] == [
        ("gsv__ReadFile", windie.RESERVED),
        ("gsv__Anything", windie.RESERVED),
        ("no_schema", "a tool needs a JSON schema"),
    ]
    assert [r["name"] for r in rejected] == ["gsv__ReadFile", "gsv__Anything", "no_schema", "bad name!", "read_file"]


def test_a_guests_manifest_cannot_probe_the_backends_names():
    class Exploding:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"read {name}")

    schema = {"type": "object"}
    entries = [{"name": n, "schema": schema} for n in ("laptop__Bash", "nobody__Thing", "gsv__ReadFile", "note")]
    tools, _, rejected = windie.validate_manifest(Exploding(), entries, guest=True)  # type: ignore[arg-type]
    assert _names(tools) == ["note"]
    assert rejected == [
        {"name": n, "reason": windie.RESERVED} for n in ("laptop__Bash", "nobody__Thing", "gsv__ReadFile")
    ]
    assert windie.validate_manifest(_Services(), entries[:2])[1] == [  # type: ignore[arg-type]
        {"name": n, "description": "", "execution_target": "local_runtime"} for n in ("laptop__Bash", "nobody__Thing")
    ]


# --- the tool policy ----------------------------------------------------------------------------------------------

BACKEND = [{"name": "gsv__ListFiles"}, {"name": "laptop__Bash"}, {"name": "laptop__browser_open"}]
CLIENT = [{"name": "read_file"}, {"name": "screenshot"}]


def _names(tools: list[dict[str, Any]]) -> list[str]:
    return [t["name"] for t in tools]


def test_the_modes_choose_the_tools():
    assert _names(client_tools.narrowed(BACKEND, CLIENT, {})) == _names(BACKEND + CLIENT)
    assert _names(client_tools.narrowed(BACKEND, CLIENT, {"mode": "client_only"})) == ["read_file", "screenshot"]
    explicit = {"mode": "explicit", "available": ["laptop__Bash", "screenshot", "unknown"]}
    assert _names(client_tools.narrowed(BACKEND, CLIENT, explicit)) == ["laptop__Bash", "screenshot"]
    assert _names(client_tools.narrowed(BACKEND, CLIENT, {"mode": "explicit"})) == ["read_file", "screenshot"]


def test_disabled_tools_and_capabilities_narrow_further():
    policy = {"disabled": ["read_file", "gsv__ListFiles"], "capabilities": ["browser"]}
    assert _names(client_tools.narrowed(BACKEND, CLIENT, policy)) == ["laptop__Bash", "screenshot"]
    # a client's own tool is never removed by a capability, and never takes a backend tool's name
    own = [{"name": "browser_helper"}, {"name": "gsv__ListFiles", "description": "mine"}]
    narrowed = client_tools.narrowed(BACKEND, own, {"capabilities": ["browser"]})
    assert _names(narrowed) == ["gsv__ListFiles", "laptop__Bash", "browser_helper"]
    assert narrowed[0] == BACKEND[0]


def test_a_restricted_policy_keeps_no_backend_tool():
    backend = [{"name": "gsv__ReadFile"}, {"name": "gsv__ConfigGet"}, {"name": "laptop__Bash"}]
    assert _names(client_tools.narrowed(backend, CLIENT, {"restricted": True})) == _names(CLIENT)
    explicit = {"mode": "explicit", "available": ["gsv__ReadFile", "read_file"], "restricted": True}
    assert _names(client_tools.narrowed(backend, CLIENT, explicit)) == ["read_file"]
    # a backend tool it cannot reach still keeps its name from a client's tool
    own = [{"name": "laptop__Bash"}, {"name": "note"}]
    assert _names(client_tools.narrowed(backend, own, {"restricted": True})) == ["note"]


def test_a_guests_prompt_names_only_its_tools_and_model():
    prompt = context.guest_system_prompt([{"name": "note", "description": "Take a note"}], {"provider": "p", "id": "m"})
    assert "- note: Take a note" in prompt and "Model: p/m" in prompt
    assert "USER.md" not in prompt and "agents/" not in prompt and "gsv__" not in prompt
    assert "No tools are attached" in context.guest_system_prompt([], {"provider": "p", "id": "m"})
    assert client_tools.is_guest({"restricted": True}) and not client_tools.is_guest({"mode": "client_only"})


def test_only_the_sockets_own_offered_tools_go_to_it():
    client = client_tools.ClientTools("c", [{"name": "laptop__Bash"}, {"name": "note"}, {"name": "off"}], {})
    client.policy = {"disabled": ["off"]}
    offered = client.offer(BACKEND)
    assert _names(offered) == [*_names(BACKEND), "note"]
    assert client.own == {"note"}  # the node's laptop__Bash, which connected later, is the node's
    assert client_tools.ClientTools("c", [{"name": "note"}]).own == set()  # nothing offered: nothing routed


def test_a_run_without_client_tools_reads_nothing():
    class Exploding:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"read {name}")

    assert client_tools.for_run(Exploding(), {"origin": {"kind": "chat", "connectionId": "c"}}) is None  # type: ignore[arg-type]
    assert client_tools.for_run(Exploding(), {}) is None  # type: ignore[arg-type]


def test_openai_schemas():
    tools = [{"name": "a", "description": "d", "inputSchema": {"type": "object"}}, {"name": "b", "description": ""}]
    schemas = client_tools.openai_schemas(tools)
    assert schemas == [
        {"type": "function", "function": {"name": "a", "description": "d", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "b", "parameters": {"type": "object", "properties": {}}}},
    ]
    schemas[0]["function"]["parameters"]["x"] = 1
    assert "x" not in tools[0]["inputSchema"]  # a copy


def test_the_backend_a_policy_can_reach():
    backend = [{"name": "gsv__ReadFile"}, {"name": "gsv__ConfigGet"}, {"name": "laptop__Bash"}]
    assert client_tools.reachable(backend, {"mode": "client_only"}) == backend
    assert client_tools.reachable(backend, {"restricted": True}) == []
    assert windie.caller_policy({"mode": "explicit"}, admin=True) == {"mode": "explicit"}
    assert windie.caller_policy({"mode": "explicit"}, admin=False) == {"mode": "explicit", "restricted": True}


def test_an_agent_definition_as_a_callers_tools():
    manifest = {
        "tools": [{"name": "read_file", "schema": {"type": "object"}}, {"name": "gsv__WriteFile", "schema": {}}]
    }
    definition = {"tools": {"mode": "client_only", "client_manifest": manifest}}
    policy, own = windie.definition_tools(_Services(), definition, admin=False)  # type: ignore[arg-type]
    assert policy == {"mode": "client_only", "restricted": True}
    assert _names(own) == ["read_file"]
    assert windie.definition_tools(_Services(), None, admin=True) == ({"mode": "default_plus_client"}, [])  # type: ignore[arg-type]
    for bad in ({"tools": {"mode": 5}}, {"tools": {"client_manifest": "junk"}}, "nope"):
        with pytest.raises(ValueError):
            windie.definition_tools(_Services(), bad, admin=True)  # type: ignore[arg-type]


def test_the_first_turns_events_leave_out_what_does_not_fit():
    preview = windie.QueryPreview("k", {"provider": "p", "id": "m"}, [], [{"name": "a"}], [], "PROMPT")
    assert preview.first_turn_events() == [
        ("system-prompt", {"content": "PROMPT"}),
        ("tool-schemas", {"tool_schemas": client_tools.openai_schemas([{"name": "a"}])}),
    ]
    preview.system_prompt = "x" * windie.MAX_EVENT_BYTES
    assert [kind for kind, _ in preview.first_turn_events()] == ["tool-schemas"]


# --- the run's events ---------------------------------------------------------------------------------------------


def _sub(**ref: Any) -> Subscription:
    base = {"turn": "turn-1", "conv": "conv_a", "user": "u1", "session": "agent:main:windie:group:x", "startedAt": 1}
    return Subscription("turn-1#abc", "cid", WINDIE, "agent:main:windie:group:x", {**base, **ref})


class _Followed:
    """A table of subscriptions, each with its event counter; one that is `dropped` is not there (a conditional
    write on it fails, as it would on a real table)."""

    def __init__(self) -> None:
        self.counters: dict[Any, int] = {}
        self.dropped: set[Any] = set()
        self.writes = 0

    def update(self, key: Any, *, add: dict[str, int], condition: Any) -> Any:
        from orbital.errors import ConflictError
        from orbital.store.table import Record

        self.writes += 1
        if key in self.dropped:
            raise ConflictError("gone")
        ((name, amount),) = add.items()
        self.counters[key] = self.counters.get(key, 0) + amount
        return Record(key[0], key[1], {}, {name: self.counters[key]})


class _Following:
    def __init__(self) -> None:
        self.table = _Followed()


_FOLLOWING = _Following()


def _encode(sub: Subscription, **payload: Any) -> list[dict[str, Any]]:
    return windie.encode(_FOLLOWING, sub, {"runId": sub.run_id, **payload})  # type: ignore[arg-type]


def test_every_event_carries_the_turn_and_its_number_in_it():
    sub = _sub(turn="turn-1")
    _FOLLOWING.table.counters.clear()
    frames = _encode(sub, state="delta", text="PO") + _encode(sub, state="delta", text="NG")
    frames += _encode(sub, state="final", message={"role": "assistant", "content": [{"type": "text", "text": "PONG"}]})
    assert [f["type"] for f in frames] == [
        "streaming-response",
        "streaming-response",
        "assistant-message-full",
        "streaming-complete",
    ]
    for frame in frames:
        assert frame["id"] == frame["turn_ref"] == "turn-1" and frame["conversation_ref"] == "conv_a"
        assert frame["user_id"] == "u1" and frame["session_id"] == "agent:main:windie:group:x"
        assert frame["event_id"].startswith("turn-1-evt-") and frame["event_id"].endswith(frame["type"])
    assert [f["sequence"] for f in frames] == [1, 2, 3, 4]
    assert frames[-1]["payload"] == {"final_response": "PONG"}


def test_a_final_too_large_for_one_message_leaves_out_the_optional_parts():
    big = "x" * (windie.MAX_EVENT_BYTES + 1)
    frames = _encode(_sub(), state="final", message={"role": "assistant", "content": [{"type": "text", "text": big}]})
    assert [f["type"] for f in frames] == ["streaming-complete"] and frames[0]["payload"] == {}


def test_thinking_comes_as_a_thought():
    message = {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "A"}]}
    frames = _encode(_sub(), state="final", message=message)
    assert frames[0]["type"] == "llm-thought" and frames[0]["payload"] == {"status": "hmm"}


def test_tools_the_client_ran_are_not_reported_back_and_others_are():
    sub = _sub()
    ran = {"toolName": "read_file", "toolCallId": "c1", "content": "x", "isError": False}
    assert _encode(sub, state="toolResult", onClient=True, **ran) == []
    (same_name,) = _encode(sub, state="toolResult", **ran)  # a backend tool of that name: it ran elsewhere
    assert same_name["type"] == "tool-output"
    (output,) = _encode(sub, state="toolResult", toolName="gsv__ListFiles", toolCallId="c2", content="a", isError=True)
    assert output["type"] == "tool-output"
    assert output["payload"]["success"] is False and output["payload"]["error"] == "a"
    assert _encode(sub, state="tool", tools=[{"id": "c2", "name": "gsv__ListFiles"}]) == []
    (call,) = _encode(
        sub, state=client_tools.CALL_STATE, callId="req-1", toolName="read_file", arguments={"p": 1}, toolCallId="c3"
    )
    assert call["type"] == "tool-call"
    assert call["payload"] == {
        "tool_name": "read_file",
        "parameters": {"p": 1},
        "request_id": "req-1",
        "metadata": {"tool_call_id": "c3"},
    }


def test_usage_and_errors():
    (count,) = _encode(_sub(), state="usage", usage={"input": 10, "output": 4, "cacheRead": 2, "totalTokens": 16})
    assert count["payload"] == {
        "prompt_tokens": 12,
        "visible_output_tokens": 4,
        "thinking_tokens": None,
        "output_tokens_total": 4,
        "total_tokens": 16,
        "conversation_tokens": 16,
        "usage_source": "provider",
    }
    (error,) = _encode(_sub(), state="error", error="boom")
    assert error["type"] == "error" and error["payload"] == {"message": "boom", "turn_ref": "turn-1"}


# --- history ------------------------------------------------------------------------------------------------------


def test_history_converts_tool_calls_and_their_results():
    entries = [
        {"role": "user", "content": "hi", "timestamp": "2026-02-02T20:00:00Z"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "function": {"name": "read_file", "arguments": '{"path": "a"}'}}],
        },
        {"role": "tool", "content": "data", "tool_call_id": "c1", "tool_name": "read_file"},
        {"role": "tool", "content": "stray", "tool_name": "other"},
        {"role": "assistant", "content": "done"},
    ]
    messages = windie.convert_history(None, "k", entries, None, 1000)  # type: ignore[arg-type]
    assert [m["role"] for m in messages] == ["user", "assistant", "toolResult", "user", "assistant"]
    assert messages[0]["timestamp"] == 1770062400000
    assert messages[1]["content"] == [{"type": "toolCall", "id": "c1", "name": "read_file", "arguments": {"path": "a"}}]
    assert messages[2]["toolCallId"] == "c1" and messages[2]["toolName"] == "read_file"
    assert messages[3]["content"] == "[output of other]\nstray"
    with pytest.raises(common._InvalidFrameError):
        windie.convert_history(None, "k", [{"role": "system", "content": "x"}], None, 1)  # type: ignore[arg-type]


# --- settings, models, detection ----------------------------------------------------------------------------------


def test_provider_keys_keep_a_blank_key_and_check_their_shape():
    enabled, keys = user_settings._provider_keys(
        {"openai": {"enabled": False, "api_key": ""}, "groq": {"api_key": " k "}}
    )
    assert enabled == {"openai": False} and keys == {"groq": "k"}
    for bad in ([], {"bad name": {}}, {"openai": {"enabled": "yes"}}, {"openai": {"api_key": 1}}):
        with pytest.raises(common._InvalidFrameError):
            user_settings._provider_keys(bad)


def test_the_model_catalog_comes_from_the_configuration(monkeypatch):
    for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    config = {
        "model": {"provider": "openai", "id": "gpt-test"},
        "apiKeys": {"openai": "sk-secret", "anthropic": ""},
        "providers": {"ollama": {"models": ["llama3", {"id": "llava", "name": "LLaVA"}]}},
    }
    found = model_catalog.catalog(config)
    online = {m["id"]: m for m in found["online"]}
    assert next(iter(online)) == "gpt-test" and online["gpt-test"]["is_default"] is True
    assert {m["provider"] for m in found["online"]} == {"openai"}  # anthropic has no key
    assert [m["id"] for m in found["local"]] == ["llama3", "llava"] and found["local"][1]["display_name"] == "LLaVA"
    assert {"id": "llava", "provider": "ollama", "display_name": "LLaVA"} in found["vision"]
    assert "sk-secret" not in repr(found)
    assert model_catalog.is_local("LMStudio") and not model_catalog.is_local("openai")
    assert model_catalog.runtime_model_id("gpt-5.4@@gpt-5-4-none-thinking") == "gpt-5.4"


def test_detection_of_windie_first_frames():
    assert detect({"type": "handshake"}) == WINDIE
    assert detect({"type": "query", "payload": {}}) == WINDIE
    assert detect({"type": ["query"]}) is None
    assert detect({"type": "req", "id": "1", "method": "x"}) == GSV


def test_a_tool_result_references_only_uploaded_artifacts():
    from types import SimpleNamespace

    from orbital.agent import tools
    from orbital.domain.config import defaults

    services = SimpleNamespace(config=SimpleNamespace(effective=defaults))  # read_file is no untrusted tool
    entry = {"toolCallId": "c1", "name": "read_file"}
    artifact = {"type": "image", "r2Key": "media/0a1b2c3d-0000-4000-8000-000000000000.png", "mimeType": "image/png"}
    kept = tools.tool_result_message(
        services, "k", entry, {"result": {"content": [{"type": "text", "text": "t"}, artifact]}}
    )  # type: ignore[arg-type]
    assert kept["content"][1] == artifact
    for key in ("agents/main/USER.md", "media/agent:main:main/x.png", "media/../agents/main/USER.md"):
        sneaky = {"type": "image", "r2Key": key, "mimeType": "image/png"}
        message = tools.tool_result_message(services, "k", entry, {"result": {"content": [sneaky]}})  # type: ignore[arg-type]
        assert [b["type"] for b in message["content"]] == ["text"], key  # not an image: shown as JSON text


def test_events_are_numbered_from_one_by_the_turns_counter_and_a_dropped_turn_gets_none() -> None:
    """A turn's events take their numbers from the counter of its subscription (one atomic addition per event of the
    run, however many frames it makes), so that steps that each start with an empty memory (another process, another
    Lambda) go on where the last one stopped; a subscription `stop-query` dropped gets nothing, and takes no number."""
    services = _Following()
    sub = _sub()
    final = {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "A"}]}
    first = windie.encode(services, sub, {"runId": sub.run_id, "state": "delta", "text": "A"})  # type: ignore[arg-type]
    again = _sub()  # the next step: the same subscription read afresh, an empty scratch
    rest = windie.encode(services, again, {"runId": sub.run_id, "state": "final", "message": final})  # type: ignore[arg-type]
    assert [f["sequence"] for f in first + rest] == [1, 2, 3, 4] and services.table.writes == 2
    assert [f["event_id"] for f in rest] == [
        "turn-1-evt-000002-llm-thought",
        "turn-1-evt-000003-assistant-message-full",
        "turn-1-evt-000004-streaming-complete",
    ]
    assert windie.encode(services, sub, {"runId": sub.run_id, "state": "toolResult", "onClient": True}) == []  # type: ignore[arg-type]
    assert services.table.writes == 2  # nothing to send: no number taken
    services.table.dropped = set(services.table.counters)  # stop-query dropped the subscription
    stopped = _sub()
    assert windie.encode(services, stopped, {"runId": sub.run_id, "state": "delta", "text": "B"}) == []  # type: ignore[arg-type]
    assert stopped.scratch.get("stopped")
    writes = services.table.writes
    assert windie.encode(services, stopped, {"runId": sub.run_id, "state": "final", "message": final}) == []  # type: ignore[arg-type]
    assert services.table.writes == writes  # once gone, never asked again in this step


@pytest.mark.parametrize("kind", [["query"], {"query": 1}])
def test_a_first_frame_whose_type_is_a_list_or_an_object_is_refused_not_a_crash(kind: Any) -> None:
    """A socket forced to WindieOS (`?dialect=windie`) whose first frame's `type` is no string: refused as a bad
    handshake (an error, then 1008), not a handler that raises (no answer at all)."""
    import json

    from orbital.protocol.registry import DialectClose, DialectInbound

    frame = {"id": "1", "type": kind, "payload": {}}
    answer = windie.receive(None, DialectInbound("c1", json.dumps(frame), frame, None))  # type: ignore[arg-type]
    assert answer[0]["type"] == "error" and answer[0]["payload"]["message"].startswith("Invalid handshake")
    assert isinstance(answer[1], DialectClose) and answer[1].code == windie.CLOSE_CODE
