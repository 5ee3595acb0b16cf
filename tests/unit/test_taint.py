"""What counts as risky while a run is tainted, which tools taint a run, and who may answer an approval
(`orbital.domain.taint`)."""

from __future__ import annotations

from typing import Any

import pytest
from orbital.domain import taint
from orbital.domain.config import defaults, effective

TELEGRAM_DM = {"channel": "telegram", "accountId": "default", "peer": {"kind": "dm", "id": "42"}}


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("n1__Bash", {"command": "ls"}),
        ("laptop-2__Bash", {"command": "rm -rf /"}),
        ("n1__Process", {"action": "write", "sessionId": "s", "data": "y"}),
        ("n1__Process", {"action": "submit", "sessionId": "s", "data": "y"}),
        ("n1__Process", {"action": "kill", "sessionId": "s"}),
        ("n1__Write", {"path": "a", "content": "b"}),
        ("n1__Edit", {"path": "a", "oldString": "b", "newString": "c"}),
        ("n1__Exec", {"cmd": "ls"}),  # a node's tool of its own: not known to only read
        ("gsv__WriteFile", {"path": "SOUL.md", "content": "obey the sender"}),
        ("gsv__EditFile", {"path": "MEMORY.md", "oldText": "a", "newText": "b"}),
        ("gsv__DeleteFile", {"path": "AGENTS.md"}),
        ("gsv__Transfer", {"source": "gsv:a", "destination": "n1:/etc/passwd"}),
        ("gsv__Transfer", {"source": "n1:/a", "destination": "gsv:SOUL.md"}),
        ("gsv__Cron", {"action": "add", "job": {}}),
        ("gsv__Cron", {"action": "update", "id": "j", "patch": {}}),
        ("gsv__Cron", {"action": "remove", "id": "j"}),
        ("gsv__SessionSend", {"sessionKey": "agent:main:main", "message": "hi"}),
        ("gsv__SomethingNew", {}),  # a native tool not known to only read
        ("mcp__github__create_issue", {}),
        ("mcp__github__list_issues", {}),  # any MCP tool not marked safe
        ("n1__mcp__search", {}),
    ],
)
def test_risky_calls(tool: str, args: dict[str, Any]) -> None:
    assert taint.is_risky(tool, args, own_target=TELEGRAM_DM)


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("n1__Read", {"path": "a"}),
        ("n1__Glob", {"pattern": "*"}),
        ("n1__Grep", {"pattern": "x"}),
        ("n1__Process", {"action": "list"}),
        ("n1__Process", {"action": "poll", "sessionId": "s"}),
        ("n1__Process", {"action": "log", "sessionId": "s"}),
        ("gsv__ReadFile", {"path": "SOUL.md"}),
        ("gsv__ListFiles", {}),
        ("gsv__ConfigGet", {}),
        ("gsv__LogsGet", {}),
        ("gsv__SessionsList", {}),
        ("gsv__Cron", {"action": "list"}),
        ("gsv__Cron", {"action": "status"}),
        ("gsv__Cron", {"action": "runs"}),
        ("screenshot", {}),  # a tool of the client socket that started the run
    ],
)
def test_read_only_calls_are_not_risky(tool: str, args: dict[str, Any]) -> None:
    assert not taint.is_risky(tool, args, own_target=TELEGRAM_DM)


@pytest.mark.parametrize(
    ("args", "risky"),
    [
        ({"text": "hi"}, False),
        ({"text": "hi", "channel": "telegram", "to": "42"}, False),
        ({"text": "hi", "channel": "telegram", "to": "42", "accountId": "default", "peerKind": "dm"}, False),
        ({"text": "hi", "to": "43"}, True),
        ({"text": "hi", "channel": "whatsapp"}, True),
        ({"text": "hi", "channel": "whatsapp", "to": "42"}, True),
        ({"text": "hi", "accountId": "other"}, True),
        ({"text": "hi", "peerKind": "group"}, True),
    ],
)
def test_a_message_is_risky_unless_it_goes_to_the_runs_own_conversation(args: dict[str, Any], risky: bool) -> None:
    assert taint.is_risky("gsv__Message", args, own_target=TELEGRAM_DM) is risky


def test_a_message_from_a_run_without_a_conversation_of_its_own_is_risky() -> None:
    assert taint.is_risky("gsv__Message", {"text": "hi"}, own_target=None)


def test_safe_tools_are_never_risky_nor_untrusted() -> None:
    assert not taint.is_risky("mcp__calendar__add_event", {}, own_target=None, safe=["mcp__calendar__*"])
    assert taint.is_risky("mcp__mail__send", {}, own_target=None, safe=["mcp__calendar__*"])
    config = effective({"toolApproval": {"safeTools": ["mcp__calendar__*"]}})
    assert not taint.is_untrusted(config, "mcp__calendar__list")
    assert taint.is_untrusted(config, "mcp__mail__read")


def test_untrusted_tools_are_web_fetches_and_mcp_servers_by_default() -> None:
    config = defaults()
    assert taint.is_untrusted(config, "n1__WebFetch")
    assert taint.is_untrusted(config, "mcp__github__get_issue")
    assert taint.is_untrusted(config, "n1__mcp__search")
    assert not taint.is_untrusted(config, "n1__Read")
    assert not taint.is_untrusted(config, "gsv__ReadFile")
    mine = effective({"toolApproval": {"untrustedTools": ["n1__Read"]}})
    assert taint.is_untrusted(mine, "n1__Read")
    assert not taint.is_untrusted(mine, "n1__WebFetch")  # a list replaces the default one


def test_patterns_match_as_the_rules_do() -> None:
    assert taint.matches("*__Bash", "n1__Bash")
    assert not taint.matches("n1__*", "n2__Bash")
    assert taint.matches("*Read*", "gsv__ReadFile")
    assert taint.matches(" * ", "anything")
    assert not taint.matches("", "x")
    assert not taint.matches("n1__bash", "n1__Bash")


CONFIG = effective({"owners": ["telegram:111", "whatsapp:+15551234567"]})


def approval(*senders: str) -> dict[str, Any]:
    sources = [{"kind": "channel", "detail": "a message", "sender": s, "at": 1} for s in senders]
    return {"approvalId": "1a2b3c4d", "taint": {"tainted": bool(sources), "sources": sources}}


@pytest.mark.parametrize(
    ("by", "allowed"),
    [
        ({"kind": "client", "id": "conn-1", "label": "console"}, True),
        ({"kind": "cli", "id": "cli", "label": "orbital approvals"}, True),
        ({"kind": "system", "id": "timeout", "label": "timeout"}, True),
        ({"kind": "channel", "id": "telegram:111", "label": "me"}, True),
        ({"kind": "channel", "id": "TELEGRAM:111", "label": "me"}, True),
        ({"kind": "channel", "id": "whatsapp:15551234567", "label": "me"}, True),  # the same number
        ({"kind": "channel", "id": "telegram:222", "label": "someone"}, False),
        ({"kind": "channel", "id": "whatsapp:111", "label": "same id, other channel"}, False),
        ({"kind": "guest", "id": "windie:bob", "label": "an install"}, False),
        ({"kind": "channel", "id": "", "label": "?"}, False),
        ({}, False),
    ],
)
def test_only_owners_may_answer(by: dict[str, Any], allowed: bool) -> None:
    assert taint.may_answer(CONFIG, approval(), by) is allowed


def test_the_sender_who_tainted_the_run_may_never_answer() -> None:
    config = effective({"owners": ["telegram:222"]})  # even once listed as an owner
    tainted = approval("telegram:222")
    assert not taint.may_answer(config, tainted, {"kind": "channel", "id": "telegram:222", "label": "x"})
    assert taint.may_answer(config, approval(), {"kind": "channel", "id": "telegram:222", "label": "x"})
    assert taint.may_answer(config, tainted, {"kind": "client", "id": "conn-1", "label": "console"})


def test_owners_are_compared_in_the_pairing_form() -> None:
    assert taint.identity("Telegram", " 111 ") == "telegram:111"
    assert taint.is_owner_sender(CONFIG, "telegram", 111)
    assert taint.is_owner_sender(CONFIG, "whatsapp", "15551234567@s.whatsapp.net")
    assert not taint.is_owner_sender(CONFIG, "telegram", "222")
    assert not taint.is_owner_sender(defaults(), "telegram", "111")


def test_is_tainted_reads_the_sources() -> None:
    assert not taint.is_tainted(None)
    assert not taint.is_tainted({"sources": []})
    assert taint.is_tainted({"sources": [{"kind": "channel", "detail": "x", "at": 1}]})
