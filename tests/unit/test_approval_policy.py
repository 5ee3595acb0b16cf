"""The tool-approval policy and the answers to a paused run (gsv-protocol-late.md §4.2, §4.4, §4.5)."""

from __future__ import annotations

import pytest
from orbital.domain.approval_policy import (
    MISSING,
    Verdict,
    args_preview,
    denied_by_policy,
    evaluate,
    matches_tool,
    parse_answer,
    prompt_text,
    regex_error,
    reminder_text,
    resolve_path,
    unknown_id_text,
)


def rule(tool="*", decision="ask", **extra):
    return {"id": "r1", "tool": tool, "decision": decision, **extra}


def cond(path, op, value, flags=None):
    c = {"path": path, "op": op, "value": value}
    if flags is not None:
        c["flags"] = flags
    return c


# --- defaults and malformed policies -----------------------------------------------------------------------------


@pytest.mark.parametrize("policy", [None, {}, "ask", 3, [], {"defaultDecision": "maybe"}, {"defaultDecision": None}])
def test_missing_or_invalid_policy_allows(policy):
    assert evaluate(policy, "n1__Bash", {}) == Verdict("allow")


@pytest.mark.parametrize("default", ["allow", "ask", "deny"])
def test_default_decision_applies_without_rules(default):
    assert evaluate({"defaultDecision": default}, "n1__Bash", {}) == Verdict(default)


def test_rules_that_are_not_a_list_mean_no_rules():
    assert evaluate({"defaultDecision": "deny", "rules": {"tool": "*"}}, "x", {}) == Verdict("deny")


def test_a_rule_without_a_string_tool_is_skipped():
    policy = {
        "rules": [
            {"id": "a", "decision": "deny"},
            {"id": "b", "tool": 5, "decision": "deny"},
            "junk",
            None,
            rule("*", "ask", id="c"),
        ]
    }
    assert evaluate(policy, "n1__Bash", {}) == Verdict("ask", "c")


def test_first_match_wins():
    policy = {"rules": [rule("n1__*", "deny", id="first"), rule("*", "ask", id="second")]}
    assert evaluate(policy, "n1__Bash", {}).rule_id == "first"
    assert evaluate(policy, "n2__Bash", {}).rule_id == "second"


def test_invalid_decision_on_the_matching_rule_falls_back_to_the_default():
    policy = {"defaultDecision": "deny", "rules": [rule("*", "perhaps", id="odd", reason="why")]}
    assert evaluate(policy, "x", {}) == Verdict("deny", "odd", "why")


def test_id_and_reason_only_when_strings():
    policy = {"rules": [{"tool": "*", "decision": "ask", "id": 7, "reason": ["x"]}]}
    assert evaluate(policy, "x", {}) == Verdict("ask", None, None)


def test_when_absent_or_not_a_list_means_no_conditions():
    assert evaluate({"rules": [rule(when="command")]}, "x", {}).decision == "ask"
    assert evaluate({"rules": [rule(when=None)]}, "x", {}).decision == "ask"


def test_all_conditions_must_match():
    policy = {"rules": [rule(when=[cond("a", "equals", 1), cond("b", "equals", 2)])]}
    assert evaluate(policy, "x", {"a": 1, "b": 2}).decision == "ask"
    assert evaluate(policy, "x", {"a": 1, "b": 3}).decision == "allow"


def test_a_condition_that_is_not_an_object_is_false():
    assert evaluate({"rules": [rule(when=["command"])]}, "x", {"command": "ls"}).decision == "allow"


# --- tool patterns -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "tool", "expected"),
    [
        ("node-1__*", "node-1__Bash", True),
        ("node-1__*", "node-2__Bash", False),
        ("*Read*", "gsv__ReadFile", True),
        ("*", "anything", True),
        ("  *  ", "anything", True),
        ("", "x", False),
        ("   ", "x", False),
        ("n1__Bash", "n1__Bash", True),
        (" n1__Bash ", "n1__Bash", True),
        ("n1__bash", "n1__Bash", False),
        ("n1__Bash", "n1__BashX", False),
        ("*__Bash", "n1__Bash", True),
        ("*__Bash", "n1__Bash2", False),
        ("n1.*", "n1xBash", False),  # only * is special
        ("n1.*", "n1.Bash", True),
        ("a*c*e", "abcde", True),
        ("a*c*e", "abcdef", False),
    ],
)
def test_tool_patterns(pattern, tool, expected):
    assert matches_tool(pattern, tool) is expected


# --- paths -------------------------------------------------------------------------------------------------------


def test_paths_resolve_objects_and_array_indices():
    args = {"command": "ls", "options": {"force": True}, "steps": [{"name": "a"}, {"name": "b"}]}
    assert resolve_path(args, "command") == "ls"
    assert resolve_path(args, "options.force") is True
    assert resolve_path(args, "steps.1.name") == "b"
    assert resolve_path(args, " steps..0.name ") == "a"  # trimmed, empty segments dropped


@pytest.mark.parametrize("path", ["", "  ", ".", "missing", "command.length", "steps.9.name", "steps.x", 5, None])
def test_paths_that_lead_nowhere_are_missing(path):
    args = {"command": "ls", "steps": [{"name": "a"}]}
    assert resolve_path(args, path) is MISSING


# --- operators ---------------------------------------------------------------------------------------------------


def matches(condition, args):
    return evaluate({"rules": [rule(when=[condition])]}, "t", args).decision == "ask"


@pytest.mark.parametrize(
    ("value", "arg", "expected"),
    [
        ("1", 1, False),
        (1, "1", False),
        (1, 1, True),
        (1, 1.0, True),
        (True, 1, False),
        (True, True, True),
        (None, None, True),
        ("ls", "ls", True),
        ({"a": 1}, {"a": 1}, False),  # objects compare by identity in the original
        ([1], [1], False),
    ],
)
def test_equals_is_strict(value, arg, expected):
    assert matches(cond("x", "equals", value), {"x": arg}) is expected


def test_equals_null_matches_only_an_explicit_null():
    assert matches(cond("x", "equals", None), {"x": None}) is True
    assert matches(cond("x", "equals", None), {}) is False


def test_contains_and_starts_with_need_strings():
    assert matches(cond("c", "contains", "rm"), {"c": "sudo rm -rf"}) is True
    assert matches(cond("c", "contains", "rm"), {"c": "ls"}) is False
    assert matches(cond("c", "contains", 1), {"c": "1"}) is False
    assert matches(cond("c", "contains", "1"), {"c": 1}) is False
    assert matches(cond("c", "contains", "a"), {"c": ["a"]}) is False
    assert matches(cond("c", "startsWith", "sudo"), {"c": "sudo ls"}) is True
    assert matches(cond("c", "startsWith", "ls"), {"c": "sudo ls"}) is False
    assert matches(cond("c", "startsWith", "s"), {}) is False


def test_regex_searches_with_flags():
    assert matches(cond("c", "regex", r"^rm\s"), {"c": "rm -rf /"}) is True
    assert matches(cond("c", "regex", "rm"), {"c": "sudo rm"}) is True  # a search, not a full match
    assert matches(cond("c", "regex", "^RM"), {"c": "rm x"}) is False
    assert matches(cond("c", "regex", "^RM", "i"), {"c": "rm x"}) is True
    assert matches(cond("c", "regex", "^b", "m"), {"c": "a\nb"}) is True
    assert matches(cond("c", "regex", "^b"), {"c": "a\nb"}) is False
    assert matches(cond("c", "regex", "a.b", "s"), {"c": "a\nb"}) is True
    assert matches(cond("c", "regex", "a.b"), {"c": "a\nb"}) is False
    assert matches(cond("c", "regex", "b", "gu"), {"c": "abc"}) is True
    assert matches(cond("c", "regex", "b", "y"), {"c": "abc"}) is False  # sticky: at the start only
    assert matches(cond("c", "regex", "(?<w>a)\\k<w>"), {"c": "xaa"}) is True  # JavaScript's named groups


@pytest.mark.parametrize(
    "condition",
    [
        cond("c", "regex", "("),  # invalid pattern
        cond("c", "regex", "a", "x"),  # unknown flag
        cond("c", "regex", "a", "ii"),  # repeated flag
        cond("c", "regex", "a", 3),  # flags not a string
        cond("c", "regex", 5),  # pattern not a string
        cond("n", "regex", "1"),  # argument not a string
        cond("c", "like", "a"),  # unknown op
        {"path": "c", "value": "a"},  # no op
    ],
)
def test_conditions_that_are_false(condition):
    assert matches(condition, {"c": "a", "n": 1}) is False


def test_regex_error_explains_what_the_schema_refuses():
    assert regex_error("^rm", "i") is None
    assert regex_error("(") is not None
    assert "flag" in (regex_error("a", "q") or "")
    assert "repeated" in (regex_error("a", "gg") or "")


# --- answers -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("word", ["yes", "y", "approve", "approved", "ok", "okay", "YES", "  Yes  ", "OkAy"])
def test_approve_words(word):
    assert parse_answer(word) == ("approve", None)


@pytest.mark.parametrize("word", ["no", "n", "deny", "denied", "reject", "rejected", "NO", " Deny "])
def test_deny_words(word):
    assert parse_answer(word) == ("deny", None)


@pytest.mark.parametrize("text", ["yes!", "sure", "", "   ", "still waiting?", "yesno", None, 5, "please yes"])
def test_not_an_answer(text):
    assert parse_answer(text) == (None, None)


def test_the_second_word_is_an_approval_id():
    assert parse_answer("yes 1a2b3c4d") == ("approve", "1a2b3c4d")
    assert parse_answer("no   1A2B3C4D  extra") == ("deny", "1a2b3c4d")
    assert parse_answer("yes please") == ("approve", "please")


def test_one_leading_envelope_is_stripped():
    assert parse_answer("[whatsapp · 1:23 PM UTC] yes") == ("approve", None)
    assert parse_answer("[cron · x]no") == ("deny", None)
    assert parse_answer("[a] [b] yes") == (None, None)  # only one envelope
    assert parse_answer("x [a] yes") == (None, None)


# --- texts -------------------------------------------------------------------------------------------------------


def test_prompt_text_matches_gsv():
    text = prompt_text("n1__Bash", {"command": "ls"}, "ask-shell", None)
    assert text == (
        'Run paused: tool approval required.\nTool: n1__Bash\nArgs: {"command":"ls"}\nPolicy rule: ask-shell\n'
        'Reply with "yes" to approve or "no" to deny.'
    )
    assert prompt_text("t", {}, None, "because") == (
        'Run paused: tool approval required.\nTool: t\nArgs: {}\nReason: because\nReply with "yes" to approve or '
        '"no" to deny.'
    )


def test_args_preview_is_cut_at_400():
    short = {"a": "x" * 390}
    assert args_preview(short) == '{"a":"' + "x" * 390 + '"}'
    long = {"a": "x" * 500}
    preview = args_preview(long)
    assert len(preview) == 400 and preview.endswith("...") and preview.startswith('{"a":"xxx')
    assert args_preview({"a": object()}) == "{}"
    assert args_preview({"é": "ü"}) == '{"é":"ü"}'


def test_reply_strings():
    assert reminder_text("1a2b3c4d", "n1__Bash") == (
        'Run is paused waiting for tool approval (1a2b3c4d) for n1__Bash.\nReply with "yes" to approve or "no" to deny.'
    )
    assert unknown_id_text("please", "1a2b3c4d", "t").startswith("Unknown approval id: please. Run is paused")


def test_denied_by_policy_texts():
    assert denied_by_policy(Verdict("deny", "r", "too risky")) == "Tool execution denied by policy: too risky"
    assert denied_by_policy(Verdict("deny", "r", None)) == "Tool execution denied by policy: rule r"
    assert denied_by_policy(Verdict("deny")) == "Tool execution denied by policy"
