"""The pure parts of the approval engine (`orbital.agent.approvals`): what users are shown, the timeout setting,
what `remember: "session"` allows, and who may answer."""

from __future__ import annotations

import pytest
from orbital.agent import approvals
from orbital.domain.approval_policy import Verdict, timed_out_text


def test_shown_args_mask_secrets_and_cut_strings() -> None:
    shown = approvals.shown_args(
        {"command": "x" * 500, "apiKey": "sk-1", "headers": {"Authorization": "Bearer t"}, "list": ["y" * 401, 3]}
    )
    assert shown["command"] == "x" * 397 + "..."
    assert shown["apiKey"] == "***"
    assert shown["headers"]["Authorization"] == "***"
    assert shown["list"] == ["y" * 397 + "...", 3]


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, 600_000), ("fast", 600_000), (True, 600_000), (5, 1_000), (30_000, 30_000), (10**12, 7 * 86_400_000)],
)
def test_timeout_setting(value: object, expected: int) -> None:
    config = {"toolApproval": {"timeoutMs": value}} if value is not None else {}
    assert approvals.timeout_ms(config) == expected


def test_timed_out_texts() -> None:
    assert timed_out_text(600_000) == "Tool execution denied: no answer to the approval request within 10 minutes"
    assert timed_out_text(60_000) == "Tool execution denied: no answer to the approval request within 1 minute"
    assert timed_out_text(1_500) == "Tool execution denied: no answer to the approval request within 1.5 s"


def test_decide_reads_the_configured_policy() -> None:
    config = {"toolApproval": {"rules": [{"id": "r", "tool": "*__Bash", "decision": "ask"}]}}
    assert approvals.decide(config, "n1__Bash", {}, None) == Verdict("ask", "r")
    assert approvals.decide({}, "n1__Bash", {}, None) == Verdict("allow")


def grant(approval: dict[str, object], session_id: str = "s1") -> dict[str, object]:
    return {**approvals.grant_of(approval), "sessionId": session_id}


def test_a_rule_grant_allows_whatever_the_rule_asks_about() -> None:
    meta = {"sessionId": "s1", "approvalGrants": [grant({"ruleId": "ask-shell", "tool": "n1__Bash"})]}
    assert approvals.remembered(meta, Verdict("ask", "ask-shell"), "n1__Bash", {"command": "any"})
    assert not approvals.remembered(meta, Verdict("ask", "other"), "n1__Bash", {"command": "any"})
    assert not approvals.remembered(meta, Verdict("ask"), "n1__Bash", {"command": "any"})


def test_a_grant_without_a_rule_allows_only_the_same_call() -> None:
    approval = {"ruleId": None, "tool": "n1__Bash", "argsHash": approvals.args_hash("n1__Bash", {"command": "ls"})}
    meta = {"sessionId": "s1", "approvalGrants": [grant(approval)]}
    assert approvals.remembered(meta, Verdict("ask"), "n1__Bash", {"command": "ls"})
    assert not approvals.remembered(meta, Verdict("ask"), "n1__Bash", {"command": "ls -a"})
    assert not approvals.remembered(meta, Verdict("ask"), "n2__Bash", {"command": "ls"})
    assert not approvals.remembered({**meta, "sessionId": "s2"}, Verdict("ask"), "n1__Bash", {"command": "ls"})


def test_who_may_answer() -> None:
    config = {"owners": ["telegram:1"]}
    source = {"kind": "channel", "detail": "a message from telegram:1", "sender": "telegram:1"}  # as recorded
    tainted = {"taint": {"tainted": True, "sources": [source]}}
    assert approvals.may_answer(config, {}, {"kind": "client", "id": "console"})
    assert not approvals.may_answer(config, {}, {"kind": "client", "id": "g", "guest": True})
    assert approvals.may_answer(config, {}, {"kind": "channel", "id": "telegram:1"})
    assert not approvals.may_answer(config, {}, {"kind": "channel", "id": "telegram:2"})
    assert not approvals.may_answer({}, {}, {"kind": "channel", "id": "telegram:1"})
    assert not approvals.may_answer(config, tainted, {"kind": "channel", "id": "telegram:1"})
    assert not approvals.may_answer(config, {}, {"kind": "stranger", "id": "x"})


def test_approval_items_have_their_kinds() -> None:
    from orbital.store import keys, portable

    assert keys.item_kind(*keys.approval("1a2b3c4d")) == "approval"
    assert keys.item_kind(*keys.approval_history("agent:main:main", 1, "1a2b3c4d")) == "approval-history"
    assert "approval" in portable.LIVE_ITEM_KINDS  # work in flight: never exported
    assert "approval-history" not in portable.LIVE_ITEM_KINDS
    assert not keys.process_bound(*keys.approval("1a2b3c4d"))  # durable: a paused run outlives a restart


def test_a_wait_group_outlives_a_long_deadline() -> None:
    import time

    from orbital.engines import waitgroup

    now = time.time()
    week = int((now + 7 * 86400) * 1000)
    assert waitgroup._ttl({"deadlineMs": week}) >= now + 8 * 86400 - 1
    assert waitgroup._ttl({}) >= now + waitgroup.TTL_SECONDS - 1
