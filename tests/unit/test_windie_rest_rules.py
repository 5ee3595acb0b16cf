"""The rules behind WindieOS's REST routes, by piece: request size and shape checks, what an upload is stored as,
the shapes of the prompt previews and the model a query calls, reading the model's summary and title, and the
embeddings configuration."""

from __future__ import annotations

import pytest
from orbital.agent import client_tools, embeddings, semantic
from orbital.dialects import windie as dialect
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
    jpeg = b"\xff\xd8\xff\xe0"
    assert windie._kept_type("image/png", png, None) == "image/png"
    assert windie._kept_type("IMAGE/JPEG; q=1", jpeg, None) == "image/jpeg"
    assert windie._kept_type("image/png", jpeg, None) == "image/jpeg"  # what the bytes are
    assert windie._kept_type("application/octet-stream", png, "x") == "image/png"
    # bytes that are no image are never kept as one, whatever was declared
    assert windie._kept_type("image/png", b"root:x:0:0", "shadow.png") == "application/octet-stream"
    assert windie._kept_type("IMAGE/JPEG; q=1", b"", None) == "application/octet-stream"
    assert windie._kept_type(None, b"", "cv.pdf") == "application/pdf"
    for dangerous in ("text/html", "image/svg+xml", "application/xhtml+xml", "text/javascript"):
        assert windie._kept_type(dangerous, b"<html>", "x.html") == "application/octet-stream"


# --- previews ----------------------------------------------------------------------------------------------------


def test_flat_function_objects_are_the_functions_of_tool_schemas() -> None:
    tool = {"name": "gsv__ReadFile", "description": "Read", "inputSchema": {"type": "object", "properties": {}}}
    made = windie.function_object(tool)
    assert made == {"type": "function", **client_tools.openai_schemas([tool])[0]["function"]}
    assert windie.function_object({"name": "laptop__Bash"}) == {
        "type": "function",
        "name": "laptop__Bash",
        "parameters": {"type": "object", "properties": {}},
    }


def test_prompt_messages_and_the_user_message_payload() -> None:
    messages = [
        {"role": "assistant", "content": "hi"},
        {"role": "robot", "content": "dropped"},
        {"role": "user", "content": [{"type": "text", "text": "<user_query>open it</user_query>"}]},
    ]
    shaped = windie.prompt_messages(messages, None)
    assert [m["role"] for m in shaped] == ["assistant", "user"]
    assert windie.prompt_messages([], "q") == [{"role": "user", "content": "q"}]
    assert windie.prompt_messages([{"role": "assistant", "content": "a"}], "q")[-1] == {
        "role": "user",
        "content": "q",
    }
    full = windie.user_message_full(shaped, None)
    assert full is not None
    assert full["metadata"] == {
        "original_query": "open it",
        "context_type": "initial",
        "injected_context": "",
        "active_window": "",
    }
    assert windie.user_message_full([{"role": "assistant", "content": "a"}], None) is None


def test_the_model_a_query_calls_and_its_snapshot() -> None:
    offered = {"apiKeys": {"openai": "sk-test"}, "providers": {"openai": {"models": ["gpt-test", "gpt-5.4"]}}}
    config = effective({"model": {"provider": "openai", "id": "gpt-test"}, **offered})
    chosen = {"model_provider": "openai", "selected_model_id": "gpt-5.4@@gpt-5-4-none-thinking"}
    assert dialect.query_model(config, {}, {}) == {"provider": "openai", "id": "gpt-test"}
    assert dialect.query_model(config, {}, chosen) == {"provider": "openai", "id": "gpt-5.4"}
    session = {"settings": {"model": {"provider": "anthropic", "id": "claude-x"}}}
    assert dialect.query_model(config, session, {}) == {"provider": "anthropic", "id": "claude-x"}
    assert dialect.query_model(config, session, chosen)["id"] == "gpt-5.4"  # the user's choice over the session's
    # a preview's what-if over all of them
    assert dialect.query_model(config, {}, chosen, "o3@@high") == {"provider": "openai", "id": "o3"}
    assert dialect.query_model(config, {}, chosen, None, "ollama") == {"provider": "ollama", "id": "gpt-5.4"}
    snapshot = dialect.config_snapshot(dialect.query_model(config, {}, {}, None, "anthropic"), "bogus")
    assert snapshot == {
        "model_mode": "online",
        "model_provider": "anthropic",
        "selected_model_id": "gpt-test",
        "interaction_mode": "agent",
    }
    assert dialect.config_snapshot({"provider": "Ollama", "id": "llama3"}, "chat")["model_mode"] == "local"


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
    with pytest.raises(embeddings.EmbeddingsNotConfiguredError, match=r"embeddings\.provider"):
        embeddings.setup(defaults())
    with pytest.raises(embeddings.EmbeddingsNotConfiguredError, match="API key"):
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
