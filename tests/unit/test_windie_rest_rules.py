"""The rules behind WindieOS's REST routes, by piece: request size and shape checks, what an upload is stored as,
the tool policy and prompt previews, reading the model's summary and title, and the embeddings configuration."""

from __future__ import annotations

from typing import Any

import pytest
from orbital.agent import embeddings, semantic, windie_sdk
from orbital.domain.config import defaults, effective
from orbital.rest import windie
from pydantic import ValidationError

# --- request bodies ----------------------------------------------------------------------------------------------


def test_summarize_body_limits() -> None:
    ok = windie.SummarizeBody(conversations=["a" * windie.MAX_TEXT_BYTES] * 100, user_id="u")
    assert len(ok.conversations) == 100
    for bad in (
        {"conversations": ["a"] * 101, "user_id": "u"},
        {"conversations": ["a" * (windie.MAX_TEXT_BYTES + 1)], "user_id": "u"},
        {"conversations": ["€" * (windie.MAX_TEXT_BYTES // 3 + 1)], "user_id": "u"},  # bytes, not characters
        {"conversations": ["a"], "user_id": "default_user"},
        {"conversations": ["a"], "user_id": ""},
        {"conversations": "a", "user_id": "u"},
    ):
        with pytest.raises(ValidationError):
            windie.SummarizeBody(**bad)


def test_title_and_embedding_bodies() -> None:
    windie.TitleBody(user_message="a" * windie.MAX_TEXT_BYTES, assistant_message="b")
    with pytest.raises(ValidationError):
        windie.TitleBody(user_message="a" * (windie.MAX_TEXT_BYTES + 1), assistant_message="b")
    with pytest.raises(ValidationError):
        windie.TitleBody(user_id="default_user", user_message="a", assistant_message="b")
    assert windie.TitleBody(user_message="a", assistant_message="b", extra="ignored").user_id is None
    assert windie.EmbeddingBody(text="x" * 8192).model_name == "default"
    for bad in ({"text": "x" * 8193}, {"text": ""}, {"text": "a", "model_name": "m" * 129}):
        with pytest.raises(ValidationError):
            windie.EmbeddingBody(**bad)


def test_preview_bodies() -> None:
    assert windie.PlanBody(conversation_ref="c").include_tools is True
    with pytest.raises(ValidationError):
        windie.PreviewBody(interaction_mode="shell")
    with pytest.raises(ValidationError):
        windie.PreviewBody(user_query_raw="q" * (windie.MAX_TEXT_BYTES + 1))
    with pytest.raises(ValidationError):
        windie.PreviewBody(messages=[{}] * (windie.MAX_PREVIEW_MESSAGES + 1))


# --- uploads -----------------------------------------------------------------------------------------------------


def test_file_names_keep_their_last_part() -> None:
    assert windie._file_name("../../etc/passwd") == "passwd"
    assert windie._file_name("C:\\Users\\me\\shot.png") == "shot.png"
    assert windie._file_name("") is None and windie._file_name("/") is None
    assert len(windie._file_name("n" * 1000) or "") == 255


def test_stored_types() -> None:
    png = b"\x89PNG\r\n\x1a\n"
    assert windie._kept_type("image/png", b"", None) == "image/png"
    assert windie._kept_type("IMAGE/JPEG; q=1", b"", None) == "image/jpeg"
    assert windie._kept_type("application/octet-stream", png, "x") == "image/png"
    assert windie._kept_type(None, b"", "cv.pdf") == "application/pdf"
    for dangerous in ("text/html", "image/svg+xml", "application/xhtml+xml", "text/javascript"):
        assert windie._kept_type(dangerous, b"<html>", "x.html") == "application/octet-stream"


# --- tools and previews ------------------------------------------------------------------------------------------

GATEWAY_TOOLS = [
    {"name": "gsv__ReadFile", "description": "Read", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "laptop__Bash", "description": "Run"},
]


def _names(tools: list[dict[str, Any]]) -> list[str]:
    return [t["name"] for t in tools]


def test_function_objects() -> None:
    assert windie_sdk.function_object(GATEWAY_TOOLS[1]) == {
        "type": "function",
        "name": "laptop__Bash",
        "description": "Run",
        "parameters": {"type": "object", "properties": {}},
    }
    made = windie_sdk.function_object(GATEWAY_TOOLS[0])
    made["parameters"]["x"] = 1
    assert "x" not in GATEWAY_TOOLS[0]["inputSchema"]  # a copy


def test_tool_policy() -> None:
    manifest = {"version": 1, "tools": [{"name": "read_file", "schema": {"type": "object"}}]}

    def offered(tools: dict[str, Any] | None, mode: str | None = None) -> list[str]:
        definition = None if tools is None else {"tools": tools}
        return _names(windie_sdk.offered_tools(GATEWAY_TOOLS, definition, mode))

    assert offered(None) == ["gsv__ReadFile", "laptop__Bash"]
    assert offered(None, "chat") == []
    assert offered({"client_manifest": manifest}) == ["gsv__ReadFile", "laptop__Bash", "read_file"]
    assert offered({"mode": "client_only", "client_manifest": manifest}) == ["read_file"]
    explicit = {"mode": "explicit", "available_tools": ["read_file", "laptop__Bash"], "client_manifest": manifest}
    assert offered(explicit) == ["laptop__Bash", "read_file"]
    assert offered({"mode": "explicit"}) == ["gsv__ReadFile", "laptop__Bash"]
    assert offered({"disabled_tools": ["laptop__Bash", 5]}) == ["gsv__ReadFile"]
    clash = {"client_manifest": {"tools": [{"name": "gsv__ReadFile", "schema": {}}, {"name": "x"}, "junk"]}}
    assert offered(clash) == ["gsv__ReadFile", "laptop__Bash"]
    assert offered({"mode": 5, "client_manifest": "junk"}) == ["gsv__ReadFile", "laptop__Bash"]


def test_prompt_messages_and_the_user_message_payload() -> None:
    messages = [
        {"role": "assistant", "content": "hi"},
        {"role": "robot", "content": "dropped"},
        {"role": "user", "content": [{"type": "text", "text": "<user_query>open it</user_query>"}]},
    ]
    shaped = windie_sdk.prompt_messages(messages, None)
    assert [m["role"] for m in shaped] == ["assistant", "user"]
    assert windie_sdk.prompt_messages([], "q") == [{"role": "user", "content": "q"}]
    assert windie_sdk.prompt_messages([{"role": "assistant", "content": "a"}], "q")[-1] == {
        "role": "user",
        "content": "q",
    }
    full = windie_sdk.user_message_full(shaped, None)
    assert full is not None
    assert full["metadata"] == {
        "original_query": "open it",
        "context_type": "initial",
        "injected_context": "",
        "active_window": "",
    }
    assert windie_sdk.user_message_full([{"role": "assistant", "content": "a"}], None) is None


def test_models_and_snapshot() -> None:
    config = effective(
        {
            "model": {"provider": "openai", "id": "gpt-test"},
            "agents": {"list": [{"id": "ops", "model": "ollama/llama3"}, {"id": "x", "model": {"id": "gpt-test"}}]},
        }
    )
    listed = windie_sdk.models(config)
    assert [(m["provider"], m["id"], m["model_mode"]) for m in listed] == [
        ("openai", "gpt-test", "online"),
        ("ollama", "llama3", "local"),
    ]
    snapshot = windie_sdk.config_snapshot(config, windie_sdk.chosen_model(config, None, "anthropic"), "bogus")
    assert snapshot == {
        "model_mode": "online",
        "model_provider": "anthropic",
        "selected_model_id": "gpt-test",
        "interaction_mode": "agent",
    }


# --- semantic ----------------------------------------------------------------------------------------------------


def test_reading_a_summary_reply() -> None:
    assert semantic.parse_summary('Sure!\n```json\n{"summary": "S", "facts": ["a", " b ", 3, ""]}\n```') == (
        "S",
        ["a", "b"],
    )
    assert semantic.parse_summary("plain words") == ("plain words", [])
    assert semantic.parse_summary('{"summary": 5}') == ('{"summary": 5}', [])
    many = semantic.parse_summary('{"summary": "s", "facts": ' + str(["f"] * 80).replace("'", '"') + "}")
    assert len(many[1]) == semantic.MAX_FACTS


def test_batches_keep_order_within_a_budget() -> None:
    assert semantic.batches(["aa", "bb", "cc", "dddddd"], 4) == [["aa", "bb"], ["cc"], ["dddddd"]]
    assert semantic.batches([], 10) == []


def test_titles_are_cleaned() -> None:
    assert semantic.clean_title('"Trip to Lisbon."') == "Trip to Lisbon"
    assert semantic.clean_title("## Title: Budget review\nmore text") == "Budget review"
    assert semantic.clean_title("\u201cQuoted\u201d") == "Quoted"
    assert semantic.clean_title("   ") == semantic.DEFAULT_TITLE
    long = semantic.clean_title("word " * 40)
    assert len(long) <= semantic.MAX_TITLE_CHARS and not long.endswith(" ")


# --- embeddings configuration ------------------------------------------------------------------------------------


def test_embeddings_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(embeddings.NotConfigured, match=r"embeddings\.provider"):
        embeddings.setup(defaults())
    with pytest.raises(embeddings.NotConfigured, match="API key"):
        embeddings.setup(effective({"embeddings": {"provider": "openai", "model": "m"}}))
    local = embeddings.setup(effective({"embeddings": {"provider": "Ollama", "model": "nomic-embed-text"}}))
    assert local.provider == "ollama" and local.timeout_s == embeddings.DEFAULT_TIMEOUT_MS / 1000
    assert local.space_version == "ollama:nomic-embed-text:unknown"
    tuned = embeddings.setup(
        effective(
            {
                "embeddings": {"provider": "openai", "model": "text-embedding-3-large", "timeoutMs": 10**9},
                "apiKeys": {"openai": "sk-x"},
            }
        )
    )
    assert tuned.timeout_s == embeddings.MAX_TIMEOUT_MS / 1000 and tuned.expected_dimension() == 3072
    bad = effective({"embeddings": {"provider": "ollama", "model": "m", "dimensions": True, "timeoutMs": "x"}})
    assert embeddings.setup(bad).dimensions is None
