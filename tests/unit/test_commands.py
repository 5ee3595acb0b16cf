"""Slash commands and inline directives (spec §6.1, §6.2; acceptance rows §15.1)."""

from __future__ import annotations

import pytest
from orbital.domain import commands as c

# --- §15.1 normalizeThinkLevel --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        ("", None),
        ("off", "none"),
        ("none", "none"),
        ("0", "none"),
        ("OFF", "none"),
        ("minimal", "minimal"),
        ("min", "minimal"),
        ("1", "minimal"),
        ("MINIMAL", "minimal"),
        ("low", "low"),
        ("2", "low"),
        ("LOW", "low"),
        ("medium", "medium"),
        ("med", "medium"),
        ("3", "medium"),
        ("MEDIUM", "medium"),
        ("high", "high"),
        ("4", "high"),
        ("HIGH", "high"),
        ("xhigh", "xhigh"),
        ("max", "xhigh"),
        ("5", "xhigh"),
        ("XHIGH", "xhigh"),
        ("invalid", None),
        ("super", None),
        ("6", None),
        ("  High ", "high"),
    ],
)
def test_normalize_think_level(raw, expected):
    assert c.normalize_think_level(raw) == expected


# --- §15.1 parseDirectives ------------------------------------------------------------------------------------------


def test_think_directive_inside_text():
    d = c.parse_directives("Hello /think:high world")
    assert d.has_think is True and d.think_level == "high" and d.cleaned == "Hello world"


def test_think_directive_at_end():
    d = c.parse_directives("What is 2+2? /t:medium")
    assert d.has_think is True and d.think_level == "medium" and d.cleaned == "What is 2+2?"


@pytest.mark.parametrize(
    ("value", "level"),
    [
        ("off", "none"),
        ("minimal", "minimal"),
        ("low", "low"),
        ("medium", "medium"),
        ("high", "high"),
        ("xhigh", "xhigh"),
        ("max", "xhigh"),
    ],
)
def test_think_directive_levels(value, level):
    d = c.parse_directives(f"/t:{value} test")
    assert d.think_level == level and d.cleaned == "test"


def test_think_directive_at_start_and_end():
    assert c.parse_directives("/t:high Explain quantum physics").cleaned == "Explain quantum physics"
    d = c.parse_directives("Explain quantum physics /t:high")
    assert d.think_level == "high" and d.cleaned == "Explain quantum physics"


def test_think_and_model_directives_with_fallback_provider():
    d = c.parse_directives("/t:high /m:claude-opus-4-6 What is life?", fallback_provider="anthropic")
    assert d.think_level == "high"
    assert d.has_model is True
    assert d.model == {"provider": "anthropic", "id": "claude-opus-4-6"}
    assert d.raw_model == "claude-opus-4-6"
    assert d.cleaned == "What is life?"


def test_model_directive_with_provider_needs_no_fallback():
    d = c.parse_directives("/m:anthropic/claude-opus-4-6 Explain quantum physics")
    assert d.model == {"provider": "anthropic", "id": "claude-opus-4-6"}
    assert d.cleaned == "Explain quantum physics"


# --- §6.2 directive edge cases --------------------------------------------------------------------------------------


def test_only_the_first_occurrence_is_extracted():
    d = c.parse_directives("/t:low first /t:high second /m:a/b third /m:c/d")
    assert d.think_level == "low"
    assert d.model == {"provider": "a", "id": "b"}
    assert d.cleaned == "first /t:high second third /m:c/d"


def test_whitespace_is_collapsed_once_a_directive_is_removed():
    assert c.parse_directives("  line one\n\n  /t:high\tline   two  ").cleaned == "line one line two"


def test_text_without_directives_is_untouched():
    text = "  keep\n\nthis   layout "
    d = c.parse_directives(text)
    assert d.cleaned == text
    assert not (d.has_think or d.has_model or d.has_status)


def test_status_directive_is_only_stripped():
    d = c.parse_directives("How are we doing? /status")
    assert d.has_status is True and d.cleaned == "How are we doing?"
    assert "Session" not in d.cleaned
    assert c.format_directive_ack(d) is None


def test_invalid_think_level_still_counts_as_a_think_directive():
    d = c.parse_directives("/t:super go")
    assert d.has_think is True and d.think_level is None and d.cleaned == "go"
    bare = c.parse_directives("think about it /think")
    assert bare.has_think is True and bare.think_level is None and bare.cleaned == "think about it"


def test_model_directive_without_fallback_is_unresolved():
    d = c.parse_directives("/m:claude-opus-4-6 hi")
    assert d.has_model is True and d.model is None and d.raw_model == "claude-opus-4-6" and d.cleaned == "hi"
    assert c.format_directive_ack(d) == (
        "_Invalid model selector: claude-opus-4-6 (Use provider/model-id, or model-id to keep the current provider.)_"
    )


def test_directive_names_and_boundaries():
    assert c.parse_directives("/THINKING:HIGH x").think_level == "high"
    assert c.parse_directives("/model:openai/gpt-4.1 x").model == {"provider": "openai", "id": "gpt-4.1"}
    # not preceded by whitespace, or followed by more name characters: not directives
    for text in ("a/t:high b", "see /tmp/file", "/models are cool", "/t: x", "/statusbar"):
        d = c.parse_directives(text)
        assert not (d.has_think or d.has_model or d.has_status), text
        assert d.cleaned == text


def test_directive_ack():
    d = c.parse_directives("/t:high /m:openai/gpt-4.1 hi")
    assert c.format_directive_ack(d) == "_Thinking: high | Model: openai/gpt-4.1_"
    assert c.format_directive_ack(c.parse_directives("/t:off")) == "_Thinking: none_"
    assert c.format_directive_ack(c.parse_directives("/t:bogus hi")) is None
    assert c.format_directive_ack(c.parse_directives("plain")) is None


# --- §15.1 parseModelSelection --------------------------------------------------------------------------------------


def test_parse_model_selection():
    assert c.parse_model_selection("anthropic/claude-opus-4-6") == {"provider": "anthropic", "id": "claude-opus-4-6"}
    assert c.parse_model_selection("claude-opus-4-6", "anthropic") == {"provider": "anthropic", "id": "claude-opus-4-6"}
    assert c.parse_model_selection("claude-opus-4-6") is None
    assert c.parse_model_selection("anthropic/claude-opus-4-6 hello") is None


def test_parse_model_selection_details():
    assert c.parse_model_selection("  OpenRouter/anthropic/claude-sonnet-4 ") == {
        "provider": "openrouter",
        "id": "anthropic/claude-sonnet-4",
    }
    assert c.parse_model_selection("gpt-4.1", " OpenAI ") == {"provider": "openai", "id": "gpt-4.1"}
    assert c.parse_model_selection("gpt-4.1", "  ") is None
    assert c.parse_model_selection("/gpt") is None
    assert c.parse_model_selection("openai/") is None
    assert c.parse_model_selection("") is None
    assert c.parse_model_selection(None, "openai") is None


# --- §15.1 parseCommand ---------------------------------------------------------------------------------------------


def test_parse_command_think():
    assert c.parse_command("/think") == c.Command("think", "")
    assert c.parse_command("/think high") == c.Command("think", "high")


@pytest.mark.parametrize("level", ["off", "minimal", "low", "medium", "high", "xhigh", "max"])
def test_parse_command_think_levels(level):
    assert c.parse_command(f"/think {level}") == c.Command("think", level)


@pytest.mark.parametrize(
    ("text", "name", "args"),
    [
        ("/new", "reset", ""),
        ("/reset", "reset", ""),
        ("/new hello there", "reset", "hello there"),
        ("/compact", "compact", ""),
        ("/compact 5", "compact", "5"),
        ("/stop", "stop", ""),
        ("/status", "status", ""),
        ("/model", "model", ""),
        ("/model openai/gpt-4.1", "model", "openai/gpt-4.1"),
        ("/thinking low", "think", "low"),
        ("/t high", "think", "high"),
        ("/help", "help", ""),
        ("  /HELP  ", "help", ""),
        ("/model\n  multi\nline  ", "model", "multi\nline"),
    ],
)
def test_parse_command_aliases(text, name, args):
    assert c.parse_command(text) == c.Command(name, args)


@pytest.mark.parametrize(
    "text", ["/unknowncommand", "/?", "/t:high hello", "hello /new", "new", "", "/", "/ new", "/néw", None]
)
def test_not_commands(text):
    assert c.parse_command(text) is None


# --- §6.1 responses -------------------------------------------------------------------------------------------------

HELP = "Use provider/model-id, or model-id to keep the current provider."


def test_help_text_lists_every_section():
    for channel in (False, True):
        text = c.help_text(channel)
        for needle in (
            "/new",
            "/reset",
            "/compact [N]",
            "20",
            "/stop",
            "/status",
            "/model [provider/model-id|model-id]",
            "/think [level]",
            "off, minimal, low, medium, high, xhigh",
            "/t:high message",
            "/m:model-id message",
            "/m:provider/model-id message",
            "/help",
            "Session",
            "Settings",
            "Inline Directives",
            "Info",
        ):
            assert needle in text, (channel, needle)


def test_status_chat_variant():
    text = c.format_status("agent:main:main", 4, 120, 30, {"provider": "openai", "id": "gpt-4.1"}, "high", "daily")
    assert text == (
        "Session: agent:main:main\nMessages: 4\nTokens: 120 in / 30 out\nModel: openai/gpt-4.1\nThinking: high\n"
        "Reset: daily"
    )
    bare = c.format_status("s", 0, 0, 0, "anthropic/claude", None, None)
    assert bare == "Session: s\nMessages: 0\nTokens: 0 in / 0 out\nModel: anthropic/claude"


def test_status_channel_variant():
    text = c.format_status("k", 1, 2, 3, "p/m", None, "idle", channel=True, extra_lines=["Queue: 2"])
    assert text == (
        "**Session Status**\n• Session: `k`\n• Messages: 1\n• Tokens: 2 in / 3 out\n• Model: p/m\n• Reset: idle\n"
        "• Queue: 2"
    )


def test_stop_responses():
    assert c.format_stop(None, 0) == "No run in progress." == c.NO_RUN
    assert c.format_stop("r1", 0) == "Stopped run r1."
    assert c.format_stop("r1", 2) == "Stopped run r1, cancelled 2 pending tool(s)."
    assert c.format_stop("r1", 1, channel=True) == "Stopped run `r1`, cancelled 1 pending tool(s)."


def test_reset_and_compact_responses():
    assert c.reset_response(7) == "Session reset. Archived 7 messages."
    assert c.compact_response(20, 5) == "Compacted session. Kept 20 messages, archived 5."
    assert c.COMPACT_USAGE == "Invalid count. Usage: /compact [N]"
    assert c.command_failed(ValueError("boom")) == "Command failed: boom"


@pytest.mark.parametrize(
    ("args", "count"),
    [("", 20), ("5", 5), (" 12 ", 12), ("3.7", 3), ("10 more", 10), ("0", None), ("-2", None), ("abc", None)],
)
def test_compact_count(args, count):
    assert c.compact_count(args) == count


def test_model_command():
    effective = {"provider": "anthropic", "id": "claude-sonnet-4-20250514"}
    assert c.model_command("", effective) == c.CommandReply(
        response=f"Current model: anthropic/claude-sonnet-4-20250514\n{HELP}"
    )
    assert c.model_command("", effective, channel=True).response == (
        f"Current model: anthropic/claude-sonnet-4-20250514\n\n{HELP}"
    )
    reply = c.model_command("claude-opus-4-6", effective)
    assert reply.response == "Model set to anthropic/claude-opus-4-6"
    assert reply.settings_patch == {"model": {"provider": "anthropic", "id": "claude-opus-4-6"}}
    reply = c.model_command("openai/gpt-4.1", effective)
    assert reply.response == "Model set to openai/gpt-4.1" and reply.error is None
    reply = c.model_command("two words", effective)
    assert reply == c.CommandReply(error=f"Invalid model selector: two words\n{HELP}")


def test_think_command():
    levels = "Levels: off, minimal, low, medium, high, xhigh"
    assert c.THINK_LEVELS == levels
    assert c.think_command("", None).response == f"Thinking level: off\n{levels}"
    assert c.think_command("", "high", channel=True).response == f"Thinking level: high\n\n{levels}"
    reply = c.think_command("off", "high")
    assert reply.response == "Thinking level set to none" and reply.settings_patch == {"thinkingLevel": "none"}
    assert c.think_command("max", None).settings_patch == {"thinkingLevel": "xhigh"}
    assert c.think_command("ultra", None) == c.CommandReply(error=f"Invalid level: ultra\n{levels}")
