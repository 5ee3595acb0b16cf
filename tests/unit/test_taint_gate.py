"""The taint rule inside the approval gate (`orbital.agent.approvals.decide`): a tainted run asks (or is denied)
before a risky call whatever the policy says, a rule's deny stays, and "approve for this session" never skips it."""

from __future__ import annotations

from typing import Any

from orbital.agent import approvals
from orbital.domain import config_schema
from orbital.domain.approval_policy import Verdict
from orbital.domain.config import effective, set_path
from orbital.domain.taint import TAINT_RULE

STRANGER = {"kind": "channel", "detail": "test message from test:+15550002", "at": 1, "sender": "test:+15550002"}
TARGET = {"kind": "chat", "channel": "test", "accountId": "bridge", "peer": {"kind": "dm", "id": "+15550002"}}
TAINTED = {"runId": "r1", "taint": {"sources": [STRANGER]}, "deliver": TARGET}
CLEAN = {"runId": "r2", "deliver": TARGET}


def config(**tool_approval: Any) -> dict[str, Any]:
    return effective({"toolApproval": tool_approval}) if tool_approval else effective({})


def test_an_untainted_run_gets_the_policy() -> None:
    assert approvals.decide(config(), "n1__Bash", {"command": "ls"}, CLEAN) == Verdict("allow")
    assert approvals.decide(config(), "n1__Bash", {"command": "ls"}, None) == Verdict("allow")


def test_a_tainted_run_asks_before_a_risky_call_although_the_policy_allows_it() -> None:
    verdict = approvals.decide(config(), "n1__Bash", {"command": "ls"}, TAINTED)
    assert verdict.decision == "ask" and verdict.rule_id == TAINT_RULE
    assert verdict.reason is not None and "test:+15550002" in verdict.reason and "n1__Bash" in verdict.reason
    allowing = config(rules=[{"id": "shell-ok", "tool": "*__Bash", "decision": "allow"}])
    assert approvals.decide(allowing, "n1__Bash", {"command": "ls"}, TAINTED).decision == "ask"
    asking = config(rules=[{"id": "ask-shell", "tool": "*__Bash", "decision": "ask"}])
    assert approvals.decide(asking, "n1__Bash", {"command": "ls"}, TAINTED).rule_id == TAINT_RULE


def test_when_tainted_deny_denies_and_a_rules_deny_stays() -> None:
    denying = config(whenTainted="deny")
    assert approvals.decide(denying, "gsv__WriteFile", {"path": "SOUL.md"}, TAINTED) == Verdict(
        "deny", TAINT_RULE, approvals.decide(config(), "gsv__WriteFile", {"path": "SOUL.md"}, TAINTED).reason
    )
    ruled = config(rules=[{"id": "no-rm", "tool": "*__Bash", "decision": "deny", "reason": "never"}])
    assert approvals.decide(ruled, "n1__Bash", {"command": "rm"}, TAINTED) == Verdict("deny", "no-rm", "never")


def test_a_stored_allow_for_when_tainted_is_read_as_ask() -> None:
    stored = effective({"toolApproval": {"whenTainted": "allow"}})  # written before the schema refused it
    assert approvals.decide(stored, "n1__Bash", {"command": "ls"}, TAINTED).decision == "ask"


def test_calls_that_are_not_risky_get_the_policy_in_a_tainted_run() -> None:
    assert approvals.decide(config(), "n1__Read", {"path": "a"}, TAINTED) == Verdict("allow")
    assert approvals.decide(config(), "gsv__Message", {"text": "hi"}, TAINTED) == Verdict("allow")  # its own chat
    assert approvals.decide(config(), "gsv__Message", {"text": "hi", "to": "+1999"}, TAINTED).decision == "ask"
    safe = config(safeTools=["n1__Bash"])
    assert approvals.decide(safe, "n1__Bash", {"command": "ls"}, TAINTED) == Verdict("allow")


def test_a_message_of_a_tainted_run_without_a_conversation_asks() -> None:
    run = {"runId": "r3", "taint": {"sources": [STRANGER]}}
    assert approvals.decide(config(), "gsv__Message", {"text": "hi"}, run).decision == "ask"


def test_approve_for_this_session_never_skips_the_taint_rule() -> None:
    args = {"command": "ls"}
    verdict = approvals.decide(config(), "n1__Bash", args, TAINTED)
    meta = {
        "sessionId": "s1",
        "approvalGrants": [
            {"sessionId": "s1", "ruleId": TAINT_RULE},
            {"sessionId": "s1", "tool": "n1__Bash", "argsHash": approvals.args_hash("n1__Bash", args)},
        ],
    }
    assert approvals.remembered(meta, verdict, "n1__Bash", args) is False
    plain = Verdict("ask")
    assert approvals.remembered(meta, plain, "n1__Bash", args) is True  # the same grant, for an untainted run


def test_no_rule_may_take_the_taint_rules_id() -> None:
    rule = {"id": TAINT_RULE, "tool": "*", "decision": "allow"}
    cfg = effective(set_path({}, "toolApproval.rules", [rule]))
    [problem] = config_schema.problems_at(cfg, "toolApproval.rules")
    assert problem.path == "toolApproval.rules.0" and TAINT_RULE in problem.expected


def test_a_guest_and_the_tainting_sender_may_not_answer() -> None:
    approval = {"approvalId": "1a2b3c4d", "taint": {"tainted": True, "sources": [STRANGER]}}
    cfg = effective({"owners": ["test:+15550002", "test:+15550001"]})
    assert approvals.may_answer(cfg, approval, {"kind": "client", "id": "c1", "label": "console"})
    assert not approvals.may_answer(cfg, approval, {"kind": "client", "id": "c2", "label": "x", "guest": True})
    assert not approvals.may_answer(cfg, approval, {"kind": "channel", "id": "test:+15550002", "label": "x"})
    assert approvals.may_answer(cfg, approval, {"kind": "channel", "id": "test:+15550001", "label": "me"})
