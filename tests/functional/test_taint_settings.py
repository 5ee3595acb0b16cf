"""The approval and taint settings through the real dispatcher: `config.get` shows GSV's defaults (and Orbital's
taint keys), `config.set` refuses a regex the engine could not compile, `whenTainted: allow` and a malformed owner
with the configuration's error shape, and stores nothing."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def admin(connect: Any) -> Any:
    return connect("client", "admin")


def refused(client: Any, path: str, value: Any) -> dict[str, Any]:
    res = client.frame("config.set", {"path": path, "value": value})
    assert res is not None and res["ok"] is False, res
    error: dict[str, Any] = res["error"]
    assert error["code"] == 400 and error["message"].endswith("(nothing was stored)")
    return error


def test_config_get_shows_the_defaults(admin: Any) -> None:
    value = admin.call("config.get", {"path": "toolApproval"})["value"]
    assert value["defaultDecision"] == "allow" and value["rules"] == []
    assert value["timeoutMs"] == 600000 and value["whenTainted"] == "ask" and value["safeTools"] == []
    assert admin.call("config.get", {"path": "owners"})["value"] == []
    assert admin.call("config.get", {})["config"]["toolApproval"]["rules"] == []


def test_a_gsv_policy_is_stored_without_a_warning(admin: Any) -> None:
    policy = {"defaultDecision": "allow", "rules": [{"id": "ask-hil-tool", "tool": "n1__Bash", "decision": "ask"}]}
    assert admin.call("config.set", {"path": "toolApproval", "value": policy}) == {"ok": True, "path": "toolApproval"}
    stored = admin.call("config.get", {"path": "toolApproval"})["value"]
    assert stored["rules"] == policy["rules"] and stored["whenTainted"] == "ask"  # the rest keeps its defaults


def test_a_bad_regex_is_refused_at_config_set(admin: Any, services: Any) -> None:
    rule = {
        "id": "r",
        "tool": "*__Bash",
        "when": [{"path": "command", "op": "regex", "value": "(rm"}],
        "decision": "ask",
    }
    error = refused(admin, "toolApproval.rules", [rule])
    [problem] = error["details"]["problems"]
    assert problem["path"] == "toolApproval.rules.0.when.0"
    assert "a regex that compiles" in problem["expected"] and "unterminated subpattern" in problem["expected"]
    assert problem["got"].startswith("{")
    assert "toolApproval" not in services.config.overrides()
    flagged = {**rule, "when": [{"path": "command", "op": "regex", "value": "rm", "flags": "x"}]}
    [problem] = refused(admin, "toolApproval.rules", [flagged])["details"]["problems"]
    assert "unknown regex flag(s): x" in problem["expected"]


def test_when_tainted_allow_and_a_malformed_owner_are_refused(admin: Any, services: Any) -> None:
    [problem] = refused(admin, "toolApproval.whenTainted", "allow")["details"]["problems"]
    assert problem == {
        "path": "toolApproval.whenTainted",
        "expected": problem["expected"],
        "got": '"allow"',
    }
    assert "prompt injection" in problem["expected"]
    [problem] = refused(admin, "owners", ["telegram:123", "123"])["details"]["problems"]
    assert problem["path"] == "owners.1" and '"{channel}:{senderId}"' in problem["expected"]
    assert "owners" not in services.config.overrides()
    assert admin.call("config.set", {"path": "owners", "value": ["telegram:123"]}) == {"ok": True, "path": "owners"}
