"""The model-provider layer against the scripted fake LLM server, over real HTTP on loopback, for all four wires."""

from __future__ import annotations

import base64
import importlib
import json
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from orbital.agent import providers
from orbital.agent.providers import ModelError, ModelRequest, _runner, complete, context_window, has_credentials
from orbital.agent.providers._convert import parse_arguments, prepare
from orbital.agent.providers._errors import sanitize

from tests.conftest import wait_for
from tests.support.fake_llm import FakeLLM, call, error, hang, reply

KEYS = {
    "anthropic": "sk-ant-test-DISTINCTIVE-4f1c9a77e2",
    "openai": "sk-test-DISTINCTIVE-9b3e55d01a",
    "google": "AIzaTEST-DISTINCTIVE-77aa01bb22cc",
}
MODELS = {
    "anthropic": "claude-sonnet-4-20250514",
    "openai": "gpt-4.1",
    "google": "gemini-2.5-flash",
    "bedrock": "anthropic.claude-sonnet-4-20250514-v1:0",
}
WIRES = ["anthropic", "openai", "google", "bedrock"]
TOOLS = [
    {
        "name": "laptop__Bash",
        "description": "Run a shell command",
        "inputSchema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
    {"name": "gsv__ReadFile", "description": "Read a file", "inputSchema": {"type": "object"}},
]
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nfake-image-bytes").decode()


@pytest.fixture(scope="module")
def server() -> Any:
    llm = FakeLLM().start()
    yield llm
    llm.stop()


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits between attempts, recorded instead of slept."""
    waited: list[float] = []
    monkeypatch.setattr(_runner, "pause", lambda seconds, cancel: waited.append(seconds))
    return waited


@pytest.fixture
def llm(server: FakeLLM, monkeypatch: pytest.MonkeyPatch, pauses: list[float]) -> Any:
    server.reset()
    for var in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "GOOGLE_GEMINI_BASE_URL",
        "OPENROUTER_API_KEY",
        "GROQ_API_KEY",
    ):
        monkeypatch.delenv(var, raising=False)
    yield server
    server.reset()


def config_for(llm: FakeLLM, wire: str, **extra: Any) -> dict[str, Any]:
    base = llm.base_url + ("/v1" if wire == "openai" else "")
    config: dict[str, Any] = {"providers": {wire: {"baseUrl": base, **extra}}}
    if wire in KEYS:
        config["apiKeys"] = {wire: KEYS[wire]}
    return config


def request(llm: FakeLLM, wire: str, messages: list[dict[str, Any]] | None = None, **kw: Any) -> ModelRequest:
    config = kw.pop("config", None) or config_for(llm, wire)
    return ModelRequest(
        provider=kw.pop("provider", wire),
        model=kw.pop("model", MODELS[wire]),
        system=kw.pop("system", "You are a test assistant."),
        messages=messages if messages is not None else [user("Hi there")],
        tools=kw.pop("tools", TOOLS),
        config=config,
        timeout_s=kw.pop("timeout_s", 20.0),
        **kw,
    )


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content, "timestamp": 1}


def tool_result(call_id: str, name: str, text: str, *, error: bool = False, image: bool = False) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if image:
        content.append({"type": "image", "data": PNG, "mimeType": "image/png"})
    return {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": name,
        "content": content,
        "isError": error,
        "timestamp": 2,
    }


class Sink:
    def __init__(self) -> None:
        self.texts: list[str] = []
        self.thoughts: list[str] = []

    def text(self, delta: str) -> None:
        self.texts.append(delta)

    def thinking(self, delta: str) -> None:
        self.thoughts.append(delta)


def either(obj: dict[str, Any], snake: str, camel: str) -> Any:
    """Nested Gemini fields go out in either spelling (the API takes both)."""
    return obj[snake] if snake in obj else obj[camel]


def body(llm: FakeLLM, index: int = -1) -> dict[str, Any]:
    result = llm.requests[index].body
    assert isinstance(result, dict)
    return result


# --- streaming text, stored shape, usage ---------------------------------------------------------------------------


API_NAMES = {
    "anthropic": "anthropic-messages",
    "openai": "openai-completions",
    "google": "google-generative-ai",
    "bedrock": "bedrock-converse-stream",
}


@pytest.mark.parametrize("wire", WIRES)
def test_streamed_text_reaches_the_sink_in_order_and_the_message_is_stored_shape(llm: FakeLLM, wire: str) -> None:
    usage = {"input": 120, "output": 33, "cacheRead": 40, "cacheWrite": 5 if wire in ("anthropic", "bedrock") else 0}
    llm.script(reply("Hello from the fake model!", chunks=5, usage=usage))
    sink = Sink()
    message = complete(request(llm, wire), sink)

    assert len(sink.texts) == 5
    assert "".join(sink.texts) == "Hello from the fake model!"
    assert set(message) == {"role", "content", "api", "provider", "model", "usage", "stopReason", "timestamp"}
    assert message["role"] == "assistant"
    assert message["content"] == [{"type": "text", "text": "Hello from the fake model!"}]
    assert message["api"] == API_NAMES[wire]
    assert message["provider"] == wire
    assert message["model"] == MODELS[wire]
    assert message["stopReason"] == "stop"
    assert isinstance(message["timestamp"], int) and message["timestamp"] > 1_600_000_000_000
    assert message["usage"] == {
        "input": 120,
        "output": 33,
        "cacheRead": 40,
        "cacheWrite": usage["cacheWrite"],
        "totalTokens": 120 + 33 + 40 + usage["cacheWrite"],
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
    }
    assert len(llm.requests) == 1


@pytest.mark.parametrize("wire", WIRES)
def test_system_prompt_tools_and_max_tokens_are_sent(llm: FakeLLM, wire: str) -> None:
    llm.script(reply("ok"))
    complete(request(llm, wire, config=config_for(llm, wire, maxTokens=1234)))
    sent = body(llm)
    if wire == "anthropic":
        assert sent["system"][0]["text"] == "You are a test assistant."
        assert [t["name"] for t in sent["tools"]] == ["laptop__Bash", "gsv__ReadFile"]
        assert sent["tools"][0]["input_schema"]["required"] == ["command"]
        assert sent["max_tokens"] == 1234
        assert sent["stream"] is True
        sent_key = llm.requests[-1].header("x-api-key") or llm.requests[-1].header("authorization")
        assert sent_key in (KEYS["anthropic"], f"Bearer {KEYS['anthropic']}")
    elif wire == "openai":
        assert sent["messages"][0] == {"role": "system", "content": "You are a test assistant."}
        assert [t["function"]["name"] for t in sent["tools"]] == ["laptop__Bash", "gsv__ReadFile"]
        assert sent["tools"][0]["function"]["parameters"]["required"] == ["command"]
        assert sent["max_completion_tokens"] == 1234
        assert sent["stream_options"] == {"include_usage": True}
        assert "reasoning_effort" not in sent
        assert llm.requests[-1].header("authorization") == f"Bearer {KEYS['openai']}"
    elif wire == "google":
        assert sent["systemInstruction"]["parts"][0]["text"] == "You are a test assistant."
        declarations = sent["tools"][0]["functionDeclarations"]
        assert [d["name"] for d in declarations] == ["laptop__Bash", "gsv__ReadFile"]
        assert sent["generationConfig"]["maxOutputTokens"] == 1234
        assert llm.requests[-1].header("x-goog-api-key") == KEYS["google"]
        assert llm.requests[-1].stream
    else:
        assert sent["system"] == [{"text": "You are a test assistant."}]
        specs = sent["toolConfig"]["tools"]
        assert [s["toolSpec"]["name"] for s in specs] == ["laptop__Bash", "gsv__ReadFile"]
        assert specs[0]["toolSpec"]["inputSchema"]["json"]["required"] == ["command"]
        assert sent["inferenceConfig"] == {"maxTokens": 1234}
        assert llm.requests[-1].path.endswith("/converse-stream")
        assert llm.requests[-1].model == MODELS["bedrock"]
        assert str(llm.requests[-1].header("authorization")).startswith("AWS4-HMAC-SHA256")


@pytest.mark.parametrize("wire", WIRES)
def test_no_tools_means_no_tool_declarations_and_tool_history_as_text(llm: FakeLLM, wire: str) -> None:
    history = [
        user("list files"),
        assistant_with_call(wire, "c1", "laptop__Bash", {"command": "ls"}),
        tool_result("c1", "laptop__Bash", "a.txt"),
        user("summarize"),
    ]
    llm.script(reply("summary"))
    complete(request(llm, wire, history, tools=[]))
    sent = json.dumps(body(llm))
    assert "laptop__Bash" in sent  # as text
    for key in ("tool_use", "tool_result", "tool_calls", "functionCall", "functionResponse", "toolUse", "toolResult"):
        assert f'"{key}"' not in sent, key
    assert '"tools"' not in sent and "toolConfig" not in sent


# --- tool calls round trip -----------------------------------------------------------------------------------------


def assistant_with_call(wire: str, call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "toolCall", "id": call_id, "name": name, "arguments": args}],
        "api": API_NAMES[wire],
        "provider": wire,
        "model": MODELS[wire],
        "usage": {},
        "stopReason": "toolUse",
        "timestamp": 1,
    }


@pytest.mark.parametrize("wire", WIRES)
def test_tool_calls_round_trip_in_the_models_call_order(llm: FakeLLM, wire: str) -> None:
    llm.script(
        reply(
            "Let me look.",
            tool_calls=[call("laptop__Bash", {"command": "ls -la"}), call("gsv__ReadFile", {"path": "a.txt"})],
        ),
        reply("Done."),
    )
    sink = Sink()
    first = complete(request(llm, wire, [user("What is here?")]), sink)
    calls = [b for b in first["content"] if b["type"] == "toolCall"]
    assert [c["name"] for c in calls] == ["laptop__Bash", "gsv__ReadFile"]
    assert [c["arguments"] for c in calls] == [{"command": "ls -la"}, {"path": "a.txt"}]
    assert all(c["id"] for c in calls) and calls[0]["id"] != calls[1]["id"]
    assert first["stopReason"] == "toolUse"
    assert first["content"][0] == {"type": "text", "text": "Let me look."}

    # results stored out of order: the wire carries them in the model's call order
    history = [
        user("What is here?"),
        first,
        tool_result(calls[1]["id"], "gsv__ReadFile", "no such file", error=True),
        tool_result(calls[0]["id"], "laptop__Bash", "a.txt\nb.txt", image=True),
    ]
    second = complete(request(llm, wire, history))
    assert second["content"] == [{"type": "text", "text": "Done."}]
    sent = body(llm)

    if wire == "anthropic":
        assistant, results = sent["messages"][1], sent["messages"][2]
        assert [b["id"] for b in assistant["content"] if b["type"] == "tool_use"] == [c["id"] for c in calls]
        assert assistant["content"][1]["input"] == {"command": "ls -la"}
        assert results["role"] == "user"
        blocks = results["content"]
        assert [b["tool_use_id"] for b in blocks] == [calls[0]["id"], calls[1]["id"]]
        assert blocks[0]["content"][0] == {"type": "text", "text": "a.txt\nb.txt"}
        assert blocks[0]["content"][1]["source"] == {"type": "base64", "media_type": "image/png", "data": PNG}
        assert "is_error" not in blocks[0]
        assert blocks[1]["is_error"] is True
        assert len(sent["messages"]) == 3
    elif wire == "openai":
        roles = [m["role"] for m in sent["messages"]]
        assert roles == ["system", "user", "assistant", "tool", "tool", "user"]
        assistant = sent["messages"][2]
        assert assistant["content"] == "Let me look."
        assert [tc["id"] for tc in assistant["tool_calls"]] == [c["id"] for c in calls]
        assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"command": "ls -la"}
        assert sent["messages"][3] == {"role": "tool", "tool_call_id": calls[0]["id"], "content": "a.txt\nb.txt"}
        assert sent["messages"][4] == {"role": "tool", "tool_call_id": calls[1]["id"], "content": "no such file"}
        images = sent["messages"][5]["content"]
        assert images[1] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    elif wire == "google":
        model_turn, results = sent["contents"][1], sent["contents"][2]
        assert model_turn["role"] == "model"
        names = [p["functionCall"]["name"] for p in model_turn["parts"] if "functionCall" in p]
        assert names == ["laptop__Bash", "gsv__ReadFile"]
        assert all("id" not in p["functionCall"] for p in model_turn["parts"] if "functionCall" in p)
        assert results["role"] == "user"
        responses = [p["functionResponse"] for p in results["parts"] if "functionResponse" in p]
        assert [r["name"] for r in responses] == ["laptop__Bash", "gsv__ReadFile"]
        assert responses[0]["response"] == {"output": "a.txt\nb.txt"}
        assert responses[1]["response"] == {"error": "no such file"}
        inline = [p for p in results["parts"] if "inlineData" in p]
        assert inline and either(inline[0]["inlineData"], "mime_type", "mimeType") == "image/png"
        assert base64.b64decode(inline[0]["inlineData"]["data"]) == base64.b64decode(PNG)
    else:
        assistant, results = sent["messages"][1], sent["messages"][2]
        uses = [b["toolUse"] for b in assistant["content"] if "toolUse" in b]
        assert [u["toolUseId"] for u in uses] == [c["id"] for c in calls]
        blocks = [b["toolResult"] for b in results["content"]]
        assert [b["toolUseId"] for b in blocks] == [calls[0]["id"], calls[1]["id"]]
        assert blocks[0]["status"] == "success" and blocks[1]["status"] == "error"
        assert blocks[0]["content"][0] == {"text": "a.txt\nb.txt"}
        assert blocks[0]["content"][1]["image"]["format"] == "png"
        assert base64.b64decode(blocks[0]["content"][1]["image"]["source"]["bytes"]) == base64.b64decode(PNG)


@pytest.mark.parametrize("wire", WIRES)
def test_invalid_tool_argument_json_is_kept_raw(llm: FakeLLM, wire: str) -> None:
    if wire == "google":
        pytest.skip("Gemini sends function arguments as parsed JSON, never as text")
    llm.script(reply(tool_calls=[call("laptop__Bash", raw='{"command": "ls')]))
    message = complete(request(llm, wire))
    assert message["content"] == [
        {
            "type": "toolCall",
            "id": message["content"][0]["id"],
            "name": "laptop__Bash",
            "arguments": {"_raw": '{"command": "ls'},
        }
    ]


def test_parse_arguments() -> None:
    assert parse_arguments("") == {}
    assert parse_arguments('{"a": 1}') == {"a": 1}
    assert parse_arguments("[1, 2]") == {"_raw": "[1, 2]"}
    assert parse_arguments("{oops") == {"_raw": "{oops"}


def test_missing_results_are_filled_in_and_orphans_dropped() -> None:
    calls = {
        "role": "assistant",
        "content": [
            {"type": "toolCall", "id": "a", "name": "x", "arguments": {}},
            {"type": "toolCall", "id": "b", "name": "y", "arguments": {}},
        ],
        "stopReason": "toolUse",
    }
    out = prepare([user("go"), calls, tool_result("b", "y", "B"), tool_result("zzz", "q", "orphan"), user("next")])
    assert [m["role"] for m in out] == ["user", "assistant", "toolResult", "toolResult", "user"]
    assert out[2]["toolCallId"] == "a" and out[2]["isError"] is True
    assert out[2]["content"] == [{"type": "text", "text": "No result provided"}]
    assert out[3]["toolCallId"] == "b"
    errored = {"role": "assistant", "content": [{"type": "text", "text": "x"}], "stopReason": "error"}
    assert prepare([user("a"), errored, user("b")]) == [user("a"), user("b")]


# --- thinking ------------------------------------------------------------------------------------------------------


THINKING_MODELS = {
    "anthropic": "claude-sonnet-4-20250514",
    "openai": "o3-mini",
    "google": "gemini-2.5-pro",
    "bedrock": "us.anthropic.claude-sonnet-4-20250514-v1:0",
}


@pytest.mark.parametrize("wire", WIRES)
def test_thinking_level_is_sent_and_signed_thinking_comes_back_and_is_resent(llm: FakeLLM, wire: str) -> None:
    signature = base64.b64encode(b"signature-" + wire.encode()).decode()
    call_signature = base64.b64encode(b"call-signature").decode()
    llm.script(
        reply(
            "Checking.",
            thinking="The user wants files. I should run ls.",
            signature=signature,
            tool_calls=[call("laptop__Bash", {"command": "ls"}, signature=call_signature)],
        ),
        reply("All done."),
    )
    sink = Sink()
    model = THINKING_MODELS[wire]
    first = complete(request(llm, wire, [user("files?")], model=model, thinking="high"), sink)
    sent = body(llm)
    if wire == "anthropic":
        assert sent["thinking"] == {"type": "enabled", "budget_tokens": 20000}
        assert sent["max_tokens"] > 20000
    elif wire == "openai":
        assert sent["reasoning_effort"] == "high"
        assert sent["messages"][0]["role"] == "developer"
    elif wire == "google":
        thinking = sent["generationConfig"]["thinkingConfig"]
        assert either(thinking, "thinking_budget", "thinkingBudget") == 20000
        assert either(thinking, "include_thoughts", "includeThoughts") is True
    else:
        assert sent["additionalModelRequestFields"] == {"thinking": {"type": "enabled", "budget_tokens": 20000}}
        assert sent["inferenceConfig"]["maxTokens"] > 20000

    assert "".join(sink.thoughts) == "The user wants files. I should run ls."
    thinking_block = first["content"][0]
    assert thinking_block["type"] == "thinking"
    assert thinking_block["thinking"] == "The user wants files. I should run ls."
    tool_call = next(b for b in first["content"] if b["type"] == "toolCall")
    if wire == "openai":
        assert "thinkingSignature" not in thinking_block  # compatible servers' reasoning text is unsigned
    else:
        assert thinking_block["thinkingSignature"] == signature
    if wire == "google":
        assert tool_call["thoughtSignature"] == call_signature

    history = [user("files?"), first, tool_result(tool_call["id"], "laptop__Bash", "a.txt")]
    complete(request(llm, wire, history, model=model, thinking="high"))
    sent = body(llm)
    if wire == "anthropic":
        assistant = sent["messages"][1]["content"]
        assert assistant[0] == {"type": "thinking", "thinking": thinking_block["thinking"], "signature": signature}
        assert [b["type"] for b in assistant] == ["thinking", "text", "tool_use"]
    elif wire == "openai":
        assert "reasoning" not in json.dumps(sent["messages"][2])
        assert "The user wants files" not in json.dumps(sent["messages"])
    elif wire == "google":
        parts = sent["contents"][1]["parts"]
        assert parts[0]["thought"] is True and parts[0]["text"] == thinking_block["thinking"]
        assert parts[0]["thoughtSignature"] == signature
        fc = next(p for p in parts if "functionCall" in p)
        assert fc["thoughtSignature"] == call_signature
    else:
        reasoning = sent["messages"][1]["content"][0]["reasoningContent"]["reasoningText"]
        assert reasoning == {"text": thinking_block["thinking"], "signature": signature}


def test_reasoning_effort_is_never_sent_to_models_without_it(llm: FakeLLM) -> None:
    llm.script(reply("a"), reply("b"), reply("c"))
    complete(request(llm, "openai", model="gpt-4o", thinking="high"))
    assert "reasoning_effort" not in body(llm)
    complete(request(llm, "openai", model="gpt-5-mini", thinking="xhigh"))
    assert body(llm)["reasoning_effort"] == "high"
    complete(request(llm, "openai", model="o4-mini", thinking="minimal"))
    assert body(llm)["reasoning_effort"] == "low"


@pytest.mark.parametrize("level", ["none", None])
def test_thinking_off_sends_no_thinking(llm: FakeLLM, level: str | None) -> None:
    llm.script(reply("a"), reply("b"))
    complete(request(llm, "anthropic", thinking=level))
    assert "thinking" not in body(llm)
    complete(request(llm, "bedrock", thinking=level))
    assert "additionalModelRequestFields" not in body(llm)


def test_anthropic_redacted_thinking_round_trips(llm: FakeLLM) -> None:
    llm.script(
        reply("Sure.", redacted="ENCRYPTED-BLOB", tool_calls=[call("laptop__Bash", {"command": "ls"})]), reply("ok")
    )
    first = complete(request(llm, "anthropic", thinking="low"))
    assert first["content"][0] == {"type": "thinking", "thinking": "", "redacted": True, "data": "ENCRYPTED-BLOB"}
    tool_call = first["content"][-1]
    complete(request(llm, "anthropic", [user("Hi there"), first, tool_result(tool_call["id"], "laptop__Bash", "x")]))
    assert body(llm)["messages"][1]["content"][0] == {"type": "redacted_thinking", "data": "ENCRYPTED-BLOB"}


@pytest.mark.parametrize("wire", ["anthropic", "google", "bedrock"])
def test_foreign_or_unsigned_thinking_is_not_sent(llm: FakeLLM, wire: str) -> None:
    foreign = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "private musings", "thinkingSignature": "c2lnbmVk"},
            {"type": "text", "text": "Answer."},
        ],
        "api": "openai-completions",
        "provider": "openai",
        "model": "gpt-4.1",
        "stopReason": "stop",
    }
    unsigned = {**foreign, "api": API_NAMES[wire], "provider": wire}
    unsigned["content"] = [{"type": "thinking", "thinking": "more musings"}, {"type": "text", "text": "Again."}]
    llm.script(reply("fine"))
    complete(request(llm, wire, [user("q"), foreign, user("q2"), unsigned, user("q3")]))
    sent = json.dumps(body(llm))
    assert "musings" not in sent
    assert "Answer." in sent and "Again." in sent


# --- wire forms kept with a session's history ------------------------------------------------------------------------


def rich_history(wire: str) -> list[dict[str, Any]]:
    """A history with every kind of message a provider converts: text and image users, signed thinking of this
    provider and of another, tool calls with results (one with an image, one missing), an errored reply."""
    signature = base64.b64encode(b"signature-" + wire.encode()).decode()
    own = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "plan", "thinkingSignature": signature},
            {"type": "text", "text": "Looking."},
            {"type": "toolCall", "id": "call-1", "name": "laptop__Bash", "arguments": {"command": "ls"}},
        ],
        "api": API_NAMES[wire],
        "provider": wire,
        "model": MODELS[wire],
        "stopReason": "toolUse",
        "timestamp": 1,
    }
    foreign = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "elsewhere", "thinkingSignature": "c2lnbmVk"},
            {"type": "text", "text": "From another model."},
        ],
        "api": "other-api",
        "provider": "other",
        "model": "m",
        "stopReason": "stop",
        "timestamp": 1,
    }
    errored = {"role": "assistant", "content": [{"type": "text", "text": "x"}], "stopReason": "error"}
    return [
        user("first"),
        user([{"type": "text", "text": "look at this"}, {"type": "image", "data": PNG, "mimeType": "image/png"}]),
        own,
        tool_result("call-1", "laptop__Bash", "a.txt", image=True),
        foreign,
        errored,
        user("again"),
        assistant_with_call(wire, "call-2", "gsv__ReadFile", {"path": "a"}),
        user("last"),
    ]


@pytest.mark.parametrize("with_tools", [True, False])
@pytest.mark.parametrize("wire", WIRES)
def test_wire_forms_kept_for_the_next_call_change_nothing_sent(llm: FakeLLM, wire: str, with_tools: bool) -> None:
    """A call whose messages' wire forms come from the history's memo sends exactly what a call without it sends,
    and the memo is not changed by what a provider does to the request (e.g. Anthropic's cache marks)."""
    from orbital.store.history import MessageMemo

    history = rich_history(wire)

    class Counting(MessageMemo):
        made = 0  # wire forms made of the history's own messages (a result filled in for a missing one is not)

        def get(self, kind: str, message: Any, make: Any) -> Any:
            def counted(m: Any) -> Any:
                self.made += any(m is kept for kept in history)
                return make(m)

            return super().get(kind, message, counted)

    memo = Counting()
    memo.own(history)
    llm.responder = lambda request: reply("ok")
    tools = TOOLS if with_tools else []
    complete(request(llm, wire, history, tools=tools))
    complete(request(llm, wire, history, tools=tools, memo=memo))
    made = memo.made
    complete(request(llm, wire, history, tools=tools, memo=memo))
    assert made > 0 and memo.made == made  # the third call made nothing again
    sent = [r.body for r in llm.requests]
    assert sent[0] == sent[1] == sent[2]


@pytest.mark.parametrize("wire", WIRES)
def test_a_growing_history_sends_what_it_would_send_without_the_memo(
    llm: FakeLLM, wire: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Call after call, as a session grows (a reply, a tool round, a user message right after tool results, two
    user messages in a row, an image the turn hydrated), what is sent with the kept wire forms is what is sent
    without them."""
    from orbital.store.history import MessageMemo

    memo = MessageMemo()
    history: list[dict[str, Any]] = []
    hydrated_image = user([{"type": "text", "text": "see"}, {"type": "image", "data": PNG, "mimeType": "image/png"}])
    steps: list[list[dict[str, Any]]] = [
        rich_history(wire),
        [reply_message(wire, "Sure."), user("next")],
        [assistant_with_call(wire, "call-3", "laptop__Bash", {"command": "pwd"})],
        [tool_result("call-3", "laptop__Bash", "/home")],
        [user("after the tools")],
        [user("and again")],
        [reply_message(wire, "Fine."), user("one more")],
    ]
    module = importlib.import_module(f"orbital.agent.providers.{wire}")
    converted: list[int] = []
    convert = module._history

    def counted(request: ModelRequest, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        converted.append(len(messages))
        return convert(request, messages)

    monkeypatch.setattr(module, "_history", counted)
    llm.responder = lambda request: reply("ok")
    for added in steps:
        memo.own(added)
        history = [*history, *added]
        for messages in (history, [*history, hydrated_image]):  # the copy of a hydrated message is not kept
            complete(request(llm, wire, messages))
            converted.clear()
            complete(request(llm, wire, messages, memo=memo))
            without, with_memo = (r.body for r in llm.requests[-2:])
            assert with_memo == without
    assert sum(converted) <= 4 < len(history)  # the last call converted its last turn and the image, no more


def reply_message(wire: str, text: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "api": API_NAMES[wire],
        "provider": wire,
        "model": MODELS[wire],
        "usage": {},
        "stopReason": "stop",
        "timestamp": 1,
    }


# --- retries, budget, cancel -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
def test_transient_errors_are_retried_then_succeed(llm: FakeLLM, wire: str, pauses: list[float]) -> None:
    llm.script(error(503), error(429, retry_after=0), reply("Recovered."))
    message = complete(request(llm, wire))
    assert message["content"] == [{"type": "text", "text": "Recovered."}]
    assert len(llm.requests) == 3
    # the first wait is backoff (half to all of BACKOFF_BASE_S, jittered), the second the Retry-After of 0
    assert len(pauses) == 2 and _runner.BACKOFF_BASE_S / 2 <= pauses[0] <= _runner.BACKOFF_BASE_S
    assert pauses[1] == 0


@pytest.mark.parametrize("wire", ["anthropic", "openai"])
def test_gives_up_after_three_retries(llm: FakeLLM, wire: str) -> None:
    llm.script(*[error(503, "upstream overloaded")] * 4, reply("never"))
    with pytest.raises(ModelError) as caught:
        complete(request(llm, wire))
    assert caught.value.kind == "transient"
    assert caught.value.retryable
    assert caught.value.message.startswith("Model provider unavailable after 3 retries: 503")
    assert "upstream overloaded" in caught.value.message
    assert len(llm.requests) == 4


def test_retry_after_is_honoured(llm: FakeLLM, pauses: list[float]) -> None:
    llm.script(error(429, retry_after=0.4), reply("ok"))
    complete(request(llm, "openai"))
    assert pauses == [0.4]
    assert len(llm.requests) == 2


def test_backoff_grows_between_retries_and_is_capped(llm: FakeLLM, pauses: list[float]) -> None:
    llm.script(*[error(503)] * 4, reply("never"))
    with pytest.raises(ModelError):
        complete(request(llm, "openai", timeout_s=60))
    assert len(pauses) == _runner.MAX_RETRIES
    for retry, waited in enumerate(pauses):
        ceiling = min(_runner.BACKOFF_MAX_S, _runner.BACKOFF_BASE_S * 2**retry)
        assert ceiling / 2 <= waited <= ceiling


def test_a_cancel_during_the_wait_ends_the_call() -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(ModelError) as caught:
        _runner.pause(30, cancel)
    assert caught.value.kind == "cancelled"


def test_retry_after_past_the_budget_fails_at_once(llm: FakeLLM) -> None:
    llm.script(error(429, "slow down", retry_after=60), reply("never"))
    started = time.monotonic()
    with pytest.raises(ModelError) as caught:
        complete(request(llm, "anthropic", timeout_s=5))
    assert time.monotonic() - started < 5
    assert caught.value.kind == "transient"
    assert len(llm.requests) == 1


@pytest.mark.parametrize("wire", WIRES)
def test_no_retry_once_text_was_streamed(llm: FakeLLM, wire: str) -> None:
    llm.script(reply("Partial answer that breaks", chunks=2, end="drop"), reply("should not be asked"))
    sink = Sink()
    with pytest.raises(ModelError) as caught:
        complete(request(llm, wire), sink)
    assert caught.value.kind == "transient"
    assert "".join(sink.texts) == "Partial answer that breaks"
    assert len(llm.requests) == 1


@pytest.mark.parametrize("wire", WIRES)
def test_a_dropped_stream_before_any_text_is_retried(llm: FakeLLM, wire: str) -> None:
    llm.script(reply(tool_calls=[call("laptop__Bash", {"command": "ls"})], end="drop"), reply("Second try."))
    message = complete(request(llm, wire))
    assert message["content"] == [{"type": "text", "text": "Second try."}]
    assert len(llm.requests) == 2


@pytest.mark.parametrize("wire", WIRES)
def test_timeout_budget_ends_a_hanging_call(llm: FakeLLM, wire: str) -> None:
    llm.script(hang(max_s=30))
    with pytest.raises(ModelError) as caught:
        complete(request(llm, wire, timeout_s=1.0))
    assert caught.value.kind == "transient"
    assert "timed out" in caught.value.message
    # the request may or may not have reached the server by then (on a loaded machine a client can spend the whole
    # budget before it sends): either way the call ended with the budget, and the hang is let go
    llm.release()


def test_timeout_budget_ends_a_stream_that_stalls_after_text(llm: FakeLLM) -> None:
    llm.script(reply("some text", end="hang"))
    sink = Sink()
    with pytest.raises(ModelError) as caught:
        complete(request(llm, "anthropic", timeout_s=1.0), sink)
    assert caught.value.kind == "transient"
    assert "".join(sink.texts) == "some text"
    assert len(llm.requests) == 1
    llm.release()


def test_cancel_ends_the_call(llm: FakeLLM) -> None:
    llm.script(hang(max_s=30))
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(ModelError) as caught:
        complete(request(llm, "openai", cancel=cancel, timeout_s=30))
    assert caught.value.kind == "cancelled"
    assert time.monotonic() - started < 10
    llm.release()


def test_text_reaches_the_sink_while_the_stream_is_still_open(llm: FakeLLM) -> None:
    llm.script(reply("abcdef", chunks=3, delay_per_chunk=0.05, end="hang"))
    sink = Sink()
    outcome: list[BaseException] = []

    def call_model() -> None:
        try:
            complete(request(llm, "openai", timeout_s=30), sink)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=call_model)
    worker.start()
    wait_for(lambda: "".join(sink.texts) == "abcdef", 10, 0.01, what="the streamed text")
    assert sink.texts == ["ab", "cd", "ef"]
    assert worker.is_alive() and not outcome  # the server still holds the stream open
    llm.release()
    worker.join(10)
    assert isinstance(outcome[0], ModelError) and "broke off after output began" in outcome[0].message
    assert len(llm.requests) == 1


@pytest.mark.parametrize("wire", WIRES)
def test_an_in_stream_error_before_output_is_retried(llm: FakeLLM, wire: str) -> None:
    llm.script(reply(None, end="error"), reply("Fine now."))
    assert complete(request(llm, wire))["content"] == [{"type": "text", "text": "Fine now."}]
    assert len(llm.requests) == 2


@pytest.mark.parametrize("wire", WIRES)
def test_an_in_stream_error_after_output_is_not_retried(llm: FakeLLM, wire: str) -> None:
    llm.script(reply("Half an answer", end="error"), reply("never"))
    sink = Sink()
    with pytest.raises(ModelError) as caught:
        complete(request(llm, wire), sink)
    assert caught.value.kind == "transient"
    assert "".join(sink.texts) == "Half an answer"
    assert len(llm.requests) == 1


def test_unscripted_requests_get_a_clear_error(llm: FakeLLM) -> None:
    with pytest.raises(ModelError) as caught:
        complete(request(llm, "openai"))
    assert "fake LLM: no scripted reply" in caught.value.message
    assert len(llm.requests) == 4


# --- error mapping ---------------------------------------------------------------------------------------------------

OVERFLOW = {
    "anthropic": error(400, "prompt is too long: 250000 tokens > 200000 maximum"),
    "openai": error(
        400,
        "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
        code="context_length_exceeded",
    ),
    "google": error(400, "The input token count (2000000) exceeds the maximum number of tokens allowed (1048576)."),
    "bedrock": error(400, "Input is too long for requested model.", code="ValidationException"),
}


@pytest.mark.parametrize("wire", WIRES)
def test_status_codes_map_to_error_kinds(llm: FakeLLM, wire: str) -> None:
    llm.script(
        error(401, "invalid credentials supplied"),
        error(404, "model: nope not found"),
        OVERFLOW[wire],
        error(400, "messages: unexpected field 'bogus'"),
    )
    kinds = []
    for _ in range(4):
        with pytest.raises(ModelError) as caught:
            complete(request(llm, wire, model="nope"))
        kinds.append(caught.value)
    assert kinds[0].kind == "auth" and "invalid credentials supplied" in kinds[0].message
    assert kinds[1].kind == "not_found" and kinds[1].message == f"Model not found: {wire}/nope"
    assert kinds[2].kind == "overflow"
    assert kinds[3].kind == "bad_request" and "bogus" in kinds[3].message
    assert not any(k.retryable for k in kinds)
    assert len(llm.requests) == 4


@pytest.mark.parametrize("wire", ["anthropic", "openai", "google"])
def test_the_key_never_appears_in_an_error(llm: FakeLLM, wire: str) -> None:
    key = KEYS[wire]
    llm.script(
        error(401, f"Incorrect API key provided: {key}"),
        error(400, f"bad request from key={key} header x-api-key: {key}"),
        *[error(500, f"internal error for {key}")] * 4,
    )
    messages = []
    for _ in range(3):
        with pytest.raises(ModelError) as caught:
            complete(request(llm, wire))
        messages += [caught.value.message, str(caught.value), repr(caught.value)]
    assert messages and all(key not in m for m in messages), messages
    assert all(key[8:30] not in m for m in messages)


BASIC = "Basic cmVsYXk6aHVudGVyMi1zZWNyZXQtcGFzcw=="
RELAY_KEY = "relay-7f3a9c2e11d4b5a6"


@pytest.mark.parametrize("wire", ["anthropic", "openai", "google"])
def test_header_values_never_appear_in_a_log_or_an_error(
    llm: FakeLLM, wire: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Configured headers are credentials (an Authorization header of a proxy, a relay key): a provider answer that
    echoes them reaches neither the log records nor the error a user sees."""
    headers = {"Authorization": BASIC, "X-Relay-Key": RELAY_KEY}
    config = config_for(llm, wire, headers=headers)
    llm.script(
        error(401, f"rejected Authorization: {BASIC}"),
        error(403, f"the relay key {RELAY_KEY} may not use this model ({BASIC.split()[1]})"),
        *[error(503, f"relay {RELAY_KEY} overloaded")] * 4,
    )
    caplog.set_level("DEBUG")
    messages = []
    for _ in range(3):
        with pytest.raises(ModelError) as caught:
            complete(request(llm, wire, config=config))
        messages += [caught.value.message, str(caught.value), repr(caught.value)]
    assert llm.requests[0].header("x-relay-key") == RELAY_KEY  # the headers were sent
    logged = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert "retry" in logged and "failed" in logged
    for secret in (BASIC.split()[1], RELAY_KEY):
        assert secret not in logged
        assert all(secret not in m for m in messages), messages


def test_provider_info_shows_no_header_values() -> None:
    relay = {"baseUrl": "https://relay.example.com/v1", "headers": {"X-Relay-Key": RELAY_KEY}}
    config = {"providers": {"relay": relay}, "apiKeys": {"relay": "sk-relay-0123456789"}}
    info = providers.resolve_provider(config, "relay")
    assert info.headers == {"X-Relay-Key": RELAY_KEY}
    assert RELAY_KEY not in repr(info) and "sk-relay-0123456789" not in repr(info)


def test_connection_refused_is_transient_and_keyless(llm: FakeLLM) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = {
        "apiKeys": {"openai": KEYS["openai"]},
        "providers": {"openai": {"baseUrl": f"http://127.0.0.1:{port}/v1"}},
    }
    with pytest.raises(ModelError) as caught:
        complete(request(llm, "openai", config=config, timeout_s=10))
    assert caught.value.kind == "transient"
    assert KEYS["openai"] not in caught.value.message


def test_empty_response_is_an_error(llm: FakeLLM) -> None:
    llm.script(reply(None), reply(""))
    for wire in ("anthropic", "openai"):
        with pytest.raises(ModelError) as caught:
            complete(request(llm, wire))
        assert caught.value.kind == "other"
        assert caught.value.message == "LLM returned empty response"
    assert len(llm.requests) == 2


def test_length_stop_reason(llm: FakeLLM) -> None:
    for wire in WIRES:
        llm.script(reply("truncated", stop="length"))
        assert complete(request(llm, wire))["stopReason"] == "length"


def test_sanitize() -> None:
    text = "Authorization: Bearer abcdefghijklmnop and ?key=AIzaSECRET&x=1 and sk-ant-api03-abcdefghijklmnopqrst"
    clean = sanitize(text, ("my-secret-value",))
    assert "abcdefghijklmnop" not in clean and "AIzaSECRET" not in clean and "api03" not in clean
    assert sanitize("value my-secret-value here", ("my-secret-value",)) == "value *** here"


# --- credentials and endpoints --------------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["anthropic", "openai", "google", "openrouter", "groq"])
def test_missing_key(llm: FakeLLM, provider: str) -> None:
    with pytest.raises(ModelError) as caught:
        complete(ModelRequest(provider, "m", "", [user("hi")], [], config={}))
    assert caught.value.kind == "auth"
    assert caught.value.message == f"API key not configured for provider: {provider}"
    assert not has_credentials({}, provider)
    assert llm.requests == []


def test_env_fallback_for_key_and_base_url(llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-openai-key-0001")
    monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url + "/v1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env-key-0002")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", llm.base_url)
    monkeypatch.setenv("GOOGLE_API_KEY", "AIza-env-key-0003")
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", llm.base_url)
    llm.script(reply("a"), reply("b"), reply("c"))
    complete(ModelRequest("openai", "gpt-4.1", "", [user("hi")], [], config={}))
    assert llm.requests[-1].header("authorization") == "Bearer sk-env-openai-key-0001"
    complete(ModelRequest("anthropic", "claude-sonnet-4-20250514", "", [user("hi")], [], config={}))
    sent_key = llm.requests[-1].header("x-api-key") or llm.requests[-1].header("authorization")
    assert sent_key in ("sk-ant-env-key-0002", "Bearer sk-ant-env-key-0002")
    complete(ModelRequest("google", "gemini-2.5-flash", "", [user("hi")], [], config={}))
    assert llm.requests[-1].header("x-goog-api-key") == "AIza-env-key-0003"
    assert has_credentials({}, "openai")


def test_config_key_wins_over_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    assert providers.resolve_provider({"apiKeys": {"openai": "from-config"}}, "openai").api_key == "from-config"
    assert providers.resolve_provider({"apiKeys": {"openai": ""}}, "openai").api_key == "from-env"


def test_resolve_compatible_and_custom_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENROUTER_API_KEY", "GROQ_API_KEY", "MY_LLM_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    resolve = providers.resolve_provider
    info = resolve({"apiKeys": {"openrouter": "k1"}}, "openrouter")
    assert (info.api, info.base_url, info.api_key) == ("openai", "https://openrouter.ai/api/v1", "k1")
    monkeypatch.setenv("GROQ_API_KEY", "k2")
    assert resolve({}, "groq").base_url == "https://api.groq.com/openai/v1"
    ollama = resolve({}, "ollama")
    assert (ollama.base_url, ollama.local) == ("http://localhost:11434/v1", True)
    assert ollama.api_key  # a placeholder: local servers need none
    assert resolve({}, "lmstudio").base_url == "http://localhost:1234/v1"
    with pytest.raises(ModelError) as caught:
        resolve({}, "vllm")
    assert caught.value.kind == "not_found" and "providers.vllm.baseUrl" in caught.value.message
    assert resolve({"providers": {"vllm": {"baseUrl": "http://gpu-box:8000/v1"}}}, "vllm").local

    with pytest.raises(ModelError) as caught:
        resolve({}, "mystery")
    assert (caught.value.kind, caught.value.message) == ("not_found", "Unknown model provider: mystery")
    with pytest.raises(ModelError) as caught:
        resolve({"apiKeys": {"mystery": "k"}}, "mystery")
    assert caught.value.kind == "not_found" and "providers.mystery.baseUrl" in caught.value.message

    custom = {"providers": {"my-llm": {"baseUrl": "https://llm.example.com/v1", "headers": {"X-Team": "a"}}}}
    with pytest.raises(ModelError) as caught:
        resolve(custom, "my-llm")
    assert caught.value.message == "API key not configured for provider: my-llm"
    monkeypatch.setenv("MY_LLM_API_KEY", "k3")
    info = resolve(custom, "my-llm")
    assert (info.api, info.api_key, info.headers) == ("openai", "k3", {"X-Team": "a"})
    loopback = {"providers": {"box": {"baseUrl": "http://127.0.0.1:9/v1", "api": "anthropic"}}}
    info = resolve(loopback, "box")
    assert (info.api, info.local) == ("anthropic", True)
    assert "k3" not in repr(info)

    bedrock = resolve({"providers": {"bedrock": {"region": "eu-west-1"}}}, "amazon-bedrock")
    assert (bedrock.name, bedrock.api, bedrock.api_key, bedrock.region) == ("bedrock", "bedrock", None, "eu-west-1")
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    assert resolve({}, "bedrock").region == "ap-south-1"
    assert has_credentials({}, "bedrock")


def test_custom_anthropic_compatible_provider_on_loopback(llm: FakeLLM) -> None:
    config = {"providers": {"proxy": {"baseUrl": llm.base_url, "api": "anthropic"}}}
    llm.script(reply("via proxy"))
    message = complete(ModelRequest("proxy", "claude-x", "", [user("hi")], [], config=config))
    assert message["api"] == "anthropic-messages" and message["provider"] == "proxy"
    assert llm.requests[-1].path == "/v1/messages"
    assert "cache_control" not in json.dumps(body(llm))  # prompt caching marks only for Anthropic itself


def test_compatible_provider_uses_max_tokens_and_its_headers(llm: FakeLLM) -> None:
    config = {"providers": {"ollama": {"baseUrl": llm.base_url + "/v1", "headers": {"X-Extra": "1"}}}}
    llm.script(reply("local"))
    complete(ModelRequest("ollama", "llama3.1", "sys", [user("hi")], [], config=config))
    sent = body(llm)
    assert sent["max_tokens"] == 8192 and "max_completion_tokens" not in sent
    assert llm.requests[-1].header("x-extra") == "1"


def test_context_window() -> None:
    assert context_window({}, "anthropic", "claude-sonnet-4-20250514") == 200_000
    assert context_window({}, "openai", "gpt-4.1-mini") == 1_047_576
    assert context_window({}, "openai", "gpt-4o") == 128_000
    assert context_window({}, "openai", "o3-mini") == 200_000
    assert context_window({}, "openrouter", "openai/o1") == 200_000
    assert context_window({}, "google", "gemini-2.5-flash") == 1_048_576
    assert context_window({}, "ollama", "llama3.1:8b") == 128_000
    assert context_window({}, "bedrock", "anthropic.claude-3-5-sonnet-20240620-v1:0") == 200_000
    assert context_window({}, "custom", "mystery-model") == 128_000
    assert context_window({"providers": {"ollama": {"contextWindow": 32768}}}, "ollama", "llama3.1") == 32768


def test_importing_the_package_imports_no_sdk() -> None:
    code = (
        "import sys; import orbital.agent.providers as p; "
        "loaded = [m for m in ('anthropic', 'openai', 'google.genai', 'boto3', 'httpx2') if m in sys.modules]; "
        "assert not loaded, loaded"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


# --- the fake server's own non-streaming endpoints, read by the real SDKs -------------------------------------------


def test_fake_server_non_streaming_endpoints(llm: FakeLLM) -> None:
    import anthropic
    import boto3
    import openai
    from google import genai

    items = [reply("plain", tool_calls=[call("t", {"a": 1})], usage={"input": 3, "output": 2}) for _ in range(4)]
    llm.script(*items)
    oa = openai.OpenAI(api_key="k", base_url=llm.base_url + "/v1", max_retries=0)
    done: Any = oa.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert done.choices[0].message.content == "plain"
    assert json.loads(done.choices[0].message.tool_calls[0].function.arguments) == {"a": 1}
    an = anthropic.Anthropic(api_key="k", base_url=llm.base_url, max_retries=0)
    msg = an.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert [b.type for b in msg.content] == ["text", "tool_use"] and msg.usage.output_tokens == 2
    gc = genai.Client(api_key="k", http_options={"base_url": llm.base_url})
    res: Any = gc.models.generate_content(model="gemini-x", contents="hi")
    assert res.text == "plain" and res.function_calls[0].args == {"a": 1}
    br = boto3.client("bedrock-runtime", endpoint_url=llm.base_url, region_name="us-east-1")
    out = br.converse(modelId="m", messages=[{"role": "user", "content": [{"text": "hi"}]}])
    assert out["output"]["message"]["content"][0] == {"text": "plain"}
    assert out["usage"]["inputTokens"] == 3
    assert [r.stream for r in llm.requests] == [False, False, False, False]


def test_fake_server_responder_sees_the_request(llm: FakeLLM) -> None:
    def echo(req: Any) -> Any:
        last = req.body["messages"][-1]["content"]
        return reply(f"echo: {last}")

    llm.responder = echo
    message = complete(request(llm, "openai", [user("ping")]))
    assert message["content"][0]["text"] == "echo: ping"


# --- request parameters that need no server ------------------------------------------------------------------------


def _req(provider: str, model: str, thinking: str | None, max_tokens: int | None = None) -> ModelRequest:
    return ModelRequest(provider, model, "", [user("hi")], [], thinking=thinking, max_tokens=max_tokens)


def test_anthropic_thinking_budget_fits_the_models_output_cap() -> None:
    from orbital.agent.providers import anthropic as adapter

    thinking, limit = adapter.thinking_params(_req("anthropic", "claude-opus-4-1-20250805", "xhigh"), 8192)
    assert limit == 32_000 and thinking is not None and thinking["budget_tokens"] < limit
    thinking, limit = adapter.thinking_params(_req("anthropic", "claude-sonnet-4-5", "minimal"), 8192)
    assert (thinking, limit) == ({"type": "enabled", "budget_tokens": 1024}, 8192 + 1024)
    assert adapter.thinking_params(_req("anthropic", "claude-3-5-sonnet-20241022", "high"), 8192) == (None, 8192)
    assert adapter.thinking_params(_req("anthropic", "claude-sonnet-4", "bogus"), 4000) == (None, 4000)


def test_gemini_thinking_config_by_generation() -> None:
    from orbital.agent.providers import google as adapter

    assert adapter.thinking_config(_req("google", "gemini-3-pro-preview", "medium")) == {
        "thinking_level": "HIGH",
        "include_thoughts": True,
    }
    assert adapter.thinking_config(_req("google", "gemini-2.5-pro", "xhigh")) == {
        "thinking_budget": 24576,
        "include_thoughts": True,
    }
    assert adapter.thinking_config(_req("google", "gemini-2.5-flash", None)) == {"thinking_budget": 0}
    assert adapter.thinking_config(_req("google", "gemini-2.5-pro", "none")) is None


def test_bedrock_thinking_only_for_anthropic_models() -> None:
    from orbital.agent.providers import bedrock as adapter

    info = providers.resolve_provider({}, "bedrock")
    params = adapter.build_params(_req("bedrock", "meta.llama3-1-70b-instruct-v1:0", "high"), info)
    assert "additionalModelRequestFields" not in params and params["inferenceConfig"] == {"maxTokens": 8192}
    params = adapter.build_params(_req("bedrock", "us.anthropic.claude-sonnet-4-20250514-v1:0", "low", 2000), info)
    assert params["additionalModelRequestFields"]["thinking"]["budget_tokens"] == 4096
    assert params["inferenceConfig"]["maxTokens"] == 6096


def test_progress_says_how_far_a_call_got(llm: FakeLLM) -> None:
    from orbital.agent.providers import Progress

    llm.script(error(400, "bad request"), reply("abcdef", chunks=3, end="error"))
    refused = request(llm, "openai")
    refused.progress = Progress()
    with pytest.raises(ModelError):
        complete(refused)
    assert not refused.progress.sent and not refused.progress.reached  # an HTTP error: nothing was spent
    broken = request(llm, "openai")
    broken.progress = Progress()
    with pytest.raises(ModelError):
        complete(broken, Sink())
    assert broken.progress.reached and broken.progress.streamed_text() == "abcdef"


def test_a_cancel_closes_the_connection_of_a_stream_waiting_for_its_next_chunk(llm: FakeLLM) -> None:
    from orbital.agent.providers import Cancel

    llm.script(reply("abcdef", chunks=3, hold_after=1))  # one chunk, then the server holds the stream (30 s)
    cancel = Cancel()
    sink = Sink()
    outcome: list[BaseException] = []

    def call_model() -> None:
        try:
            complete(request(llm, "openai", timeout_s=60, cancel=cancel), sink)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=call_model)
    worker.start()
    wait_for(lambda: sink.texts == ["ab"])
    cancel.set()  # the read blocked on the socket must not keep the connection open
    assert llm.requests[0].ended.wait(10)
    assert llm.requests[0].disconnected
    worker.join(10)
    assert isinstance(outcome[0], ModelError) and outcome[0].kind == "cancelled"
