"""The `toolApproval` and `owners` settings: their defaults, and what the schema refuses at `config.set` (a regex the
engine could not compile, `whenTainted: allow`, a malformed owner, a safe-list of everything)."""

from __future__ import annotations

from typing import Any

import pytest
from orbital.domain import config_schema
from orbital.domain.config import defaults, effective, set_path


def problems(path: str, value: Any) -> list[config_schema.Problem]:
    return config_schema.problems_at(effective(set_path({}, path, value)), path)


def test_the_defaults_ask_nothing_and_list_no_owner() -> None:
    base = defaults()
    assert base["toolApproval"]["defaultDecision"] == "allow"
    assert base["toolApproval"]["rules"] == []
    assert base["toolApproval"]["timeoutMs"] == 600000
    assert base["toolApproval"]["whenTainted"] == "ask"
    assert "mcp__*" in base["toolApproval"]["untrustedTools"]
    assert base["toolApproval"]["safeTools"] == []
    assert base["owners"] == []
    assert config_schema.problems_at(base, "toolApproval") == []


def test_a_gsv_clients_policy_is_accepted_whole() -> None:
    policy = {
        "defaultDecision": "allow",
        "rules": [
            {"tool": "n1__Write", "decision": "ask"},  # GSV documents the id as required but never asked for one
            {"id": "ask-hil-tool", "tool": "node-1__Bash", "decision": "ask"},
            {
                "id": "no-force",
                "tool": "*",
                "when": [
                    {"path": "options.force", "op": "equals", "value": True},
                    {"path": "command", "op": "regex", "value": "^rm\\s+-rf", "flags": "i"},
                    {"path": "steps.0.name", "op": "startsWith", "value": "deploy"},
                ],
                "decision": "deny",
                "reason": "no forced deletes",
            },
        ],
    }
    assert problems("toolApproval", policy) == []
    assert config_schema.unknown_keys("toolApproval", policy) == []


@pytest.mark.parametrize(
    ("source", "flags", "why"),
    [
        ("(rm", None, "unterminated subpattern"),
        ("(?<=a+)b", None, "look-behind"),
        ("rm", "q", "unknown regex flag"),
        ("rm", "ii", "repeated"),
    ],
)
def test_a_regex_the_engine_could_not_compile_is_refused(source: str, flags: str | None, why: str) -> None:
    condition: dict[str, Any] = {"path": "command", "op": "regex", "value": source}
    if flags is not None:
        condition["flags"] = flags
    rule = {"id": "r", "tool": "*__Bash", "when": [condition], "decision": "ask"}
    [problem] = problems("toolApproval.rules", [rule])
    assert problem.path == "toolApproval.rules.0.when.0"
    assert "a regex that compiles" in problem.expected and why in problem.expected
    assert '"op": "regex"' in problem.got


def test_javascript_flags_that_change_nothing_are_accepted() -> None:
    rule = {"id": "r", "tool": "*", "when": [{"path": "a", "op": "regex", "value": "x", "flags": "gimsuy"}]}
    assert problems("toolApproval.rules", [{**rule, "decision": "ask"}]) == []


def test_when_tainted_allow_is_refused_with_the_reason() -> None:
    [problem] = problems("toolApproval.whenTainted", "allow")
    assert problem.expected.startswith("`ask` or `deny`: `allow` would let a run that read someone else's content")
    assert "prompt injection" in problem.expected
    [other] = problems("toolApproval.whenTainted", "sometimes")
    assert other.expected == "one of `ask`, `deny`"
    assert problems("toolApproval.whenTainted", "deny") == []


@pytest.mark.parametrize(
    ("path", "value", "at", "expected"),
    [
        ("toolApproval.rules", [{"id": "a", "decision": "ask"}], "toolApproval.rules.0.tool", "(required)"),
        ("toolApproval.rules", [{"id": "", "tool": "x", "decision": "ask"}], "toolApproval.rules.0.id", "string"),
        (
            "toolApproval.rules",
            [{"id": "a", "tool": "x", "decision": "maybe"}],
            "toolApproval.rules.0.decision",
            "one of",
        ),
        (
            "toolApproval.rules",
            [{"id": "a", "tool": "x", "decision": "ask", "when": [{"path": "a", "op": "like", "value": "b"}]}],
            "toolApproval.rules.0.when.0.op",
            "`startsWith`",
        ),
        (
            "toolApproval.rules",
            [{"id": "a", "tool": "x", "decision": "ask"}, {"id": "a", "tool": "y", "decision": "deny"}],
            "toolApproval",
            "`a` is used twice",
        ),
        ("toolApproval.defaultDecision", "never", "toolApproval.defaultDecision", "one of `allow`"),
        ("toolApproval.timeoutMs", 5, "toolApproval.timeoutMs", "from 1000 to"),
        ("toolApproval.timeoutMs", 10**12, "toolApproval.timeoutMs", "from 1000 to"),
        ("toolApproval.safeTools", ["*"], "toolApproval.safeTools.0", "turns the taint rule off"),
        ("toolApproval.safeTools", ["**"], "toolApproval.safeTools.0", "turns the taint rule off"),
        ("toolApproval.untrustedTools", [""], "toolApproval.untrustedTools.0", "string"),
        ("owners", ["telegram:123", "123"], "owners.1", '"{channel}:{senderId}"'),
        ("owners", ["telegram:"], "owners.0", '"{channel}:{senderId}"'),
        ("owners", "telegram:123", "owners", "list of"),
    ],
)
def test_a_malformed_setting_is_refused_naming_where_and_what(path: str, value: Any, at: str, expected: str) -> None:
    found = problems(path, value)
    assert [p.path for p in found] == [at], found
    assert expected in found[0].expected


def test_owners_and_safe_tools_in_the_expected_form_pass() -> None:
    assert problems("owners", ["telegram:123456789", "whatsapp:+15551234567", "discord:some.user"]) == []
    assert problems("toolApproval.safeTools", ["mcp__calendar__*", "n1__Bash"]) == []
