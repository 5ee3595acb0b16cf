"""`orbital chat` and `orbital approvals` meeting a paused run, without a gateway: the driver fed scripted frames,
the text shown, the answer sent, and the approvals command's arguments."""

from __future__ import annotations

import io
from typing import Any

import pytest
from orbital.cli import approvals as approvals_cli
from orbital.cli import chat
from orbital.cli.chat import ChatDriver, PlainView, RunResult, Sent, TerminalDecision

from tests.unit.test_chat_cli import FakeConn, assistant, evt, sent

NOW = 1_800_000_000_000
APPROVAL = {
    "approvalId": "1a2b3c4d",
    "sessionKey": "main",
    "runId": "r1",
    "callId": "c1",
    "tool": "laptop__Bash",
    "args": {"command": "ls", "env": {"API_KEY": "sk-***"}},
    "ruleId": "ask-shell",
    "reason": "Shell commands need a yes",
    "taint": {"tainted": True, "sources": [{"kind": "channel", "detail": "telegram:555 (not an owner)", "at": NOW}]},
    "requestedAt": NOW,
    "expiresAt": NOW + 9 * 60_000 + 12_000,
    "prompt": "Run paused: tool approval required.\nTool: laptop__Bash",
    "state": "pending",
}
PROMPT = 'Run paused: tool approval required.\nTool: laptop__Bash\nArgs: {"command":"ls"}'


def paused(approval: dict[str, Any] | None = APPROVAL) -> dict[str, Any]:
    message = {"role": "assistant", "content": [{"type": "text", "text": PROMPT}], "timestamp": NOW}
    fields: dict[str, Any] = {"message": message}
    if approval is not None:
        fields["approval"] = approval
    return evt("r1", "paused", **fields)


def resolved(decision: str = "approve", **fields: Any) -> dict[str, Any]:
    payload = {
        "approvalId": "1a2b3c4d",
        "sessionKey": "main",
        "runId": "r1",
        "tool": "laptop__Bash",
        "decision": decision,
        "by": {"kind": "client", "id": "console-ab12", "label": "the console"},
        "via": "console",
        "decidedAt": NOW,
        **fields,
    }
    return {"type": "evt", "event": "approval.resolved", "payload": payload}


class Recorder:
    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []

    def started(self, sent: Sent) -> None:
        self.log.append(("started",))

    def text(self, piece: str) -> None:
        self.log.append(("text", piece))

    def segment(self, text: str, streamed: str, calls: list[Any]) -> None:
        self.log.append(("segment", text))

    def tools(self, calls: list[Any]) -> None:
        self.log.append(("tools", [c.name for c in calls]))

    def stopping(self, response: str | None) -> None:
        self.log.append(("stopping", response))

    def paused(self, text: str) -> None:
        self.log.append(("paused", text.splitlines()[0]))

    def note(self, line: str) -> None:
        self.log.append(("note", line))

    def resumed(self) -> None:
        self.log.append(("resumed",))

    def finished(self, result: RunResult, streamed: str) -> None:
        self.log.append(("finished", result.state))


class Scripted:
    """An approver that answers at once, and records what it was asked."""

    def __init__(self, answer: TerminalDecision) -> None:
        self.answer = answer
        self.asked: list[tuple[dict[str, Any], str]] = []

    def __call__(self, payload: dict[str, Any], run_id: str) -> TerminalDecision:
        self.asked.append((payload, run_id))
        return self.answer


def test_an_answer_at_the_terminal_resolves_that_approval_and_the_run_goes_on():
    conn = FakeConn(
        paused(),
        resolved(),  # the gateway's broadcast of this client's own answer: nothing new to say
        evt("r1", "final", message=assistant("Listed.")),
        answers={"approval.resolve": {"approvalId": "1a2b3c4d", "decision": "approve", "resolved": True}},
    )
    view = Recorder()
    approver = Scripted(TerminalDecision(decision="approve"))
    result = ChatDriver(conn, "main").follow(sent(), view, timeout=5, approver=approver)
    assert result.ok and result.text == "Listed."
    assert conn.calls == [("approval.resolve", {"approvalId": "1a2b3c4d", "decision": "approve", "via": "cli"})]
    assert approver.asked[0][1] == "r1"
    assert [entry[0] for entry in view.log] == ["started", "paused", "note", "resumed", "finished"]
    assert view.log[1][1].startswith("Approval needed: laptop__Bash (1a2b3c4d) · expires in ")
    assert view.log[2] == ("note", "Approved laptop__Bash.")
    assert view.log[4] == ("finished", "final")


def test_approve_for_the_session_sends_remember_and_deny_says_so():
    conn = FakeConn(
        paused(),
        evt("r1", "final", message=assistant("ok")),
        answers={"approval.resolve": {"approvalId": "1a2b3c4d", "decision": "approve", "resolved": True}},
    )
    view = Recorder()
    ChatDriver(conn, "main").follow(
        sent(), view, timeout=5, approver=Scripted(TerminalDecision("approve", remember=True))
    )
    assert conn.calls[0][1] == {"approvalId": "1a2b3c4d", "decision": "approve", "via": "cli", "remember": "session"}
    assert ("note", "Approved laptop__Bash, and calls like it for the rest of this session.") in view.log

    conn = FakeConn(
        paused(),
        evt("r1", "final", message=assistant("Not run.")),
        answers={"approval.resolve": {"approvalId": "1a2b3c4d", "decision": "deny", "resolved": True}},
    )
    view = Recorder()
    ChatDriver(conn, "main").follow(sent(), view, timeout=5, approver=Scripted(TerminalDecision("deny")))
    assert conn.calls[0][1] == {"approvalId": "1a2b3c4d", "decision": "deny", "via": "cli"}
    assert ("note", "Denied laptop__Bash.") in view.log


def test_an_answer_that_came_second_shows_who_decided_first():
    message = "Already denied by telegram:1 at 12:00:03"
    conn = FakeConn(
        paused(),
        evt("r1", "final", message=assistant("done")),
        answers={
            "approval.resolve": {"approvalId": "1a2b3c4d", "decision": "deny", "resolved": False, "message": message}
        },
    )
    view = Recorder()
    ChatDriver(conn, "main").follow(sent(), view, timeout=5, approver=Scripted(TerminalDecision("approve")))
    assert ("note", message) in view.log


def test_a_gateway_without_the_approval_in_its_event_gets_yes_as_a_message():
    reply = {"status": "paused", "runId": "r1", "response": "Approved laptop__Bash. Continuing run."}
    conn = FakeConn(paused(None), evt("r1", "final", message=assistant("ok")), answers={"chat.send": reply})
    view = Recorder()
    approver = Scripted(TerminalDecision("approve"))
    ChatDriver(conn, "main").follow(sent(), view, timeout=5, approver=approver)
    assert conn.calls == [("chat.send", {"sessionKey": "main", "message": "yes"})]
    assert ("note", "Approved laptop__Bash. Continuing run.") in view.log
    assert view.log[1] == ("paused", "Run paused: tool approval required.")  # the event's own text


def test_without_a_terminal_the_run_waits_and_a_decision_from_elsewhere_is_shown():
    out, progress = io.StringIO(), io.StringIO()
    conn = FakeConn(
        evt("r1", "delta", text="Let me look."),
        evt("r1", "partial", message=assistant("Let me look.", ("c1", "laptop__Bash", {"command": "ls"}))),
        paused(),
        resolved(),
        evt("r1", "final", message=assistant("Found 3 files.")),
    )
    result = ChatDriver(conn, "main").follow(sent(), PlainView(out, progress), timeout=5)
    assert result.ok
    assert conn.calls == []  # nothing answered from here
    lines = progress.getvalue().splitlines()[1:]  # after the tool call's line
    assert lines[0].startswith("Approval needed: laptop__Bash (1a2b3c4d) · expires in ")
    assert lines[1:4] == [
        '  args:   {"command":"ls","env":{"API_KEY":"sk-***"}}',
        "  rule:   ask-shell · Shell commands need a yes",
        "  taint:  channel: telegram:555 (not an owner)",
    ]
    assert lines[4] == "Waiting for an answer: `orbital approvals approve|deny 1a2b3c4d`, or the console."
    assert lines[5] == "Approved laptop__Bash by the console (via console)."
    assert out.getvalue() == "Let me look.\nFound 3 files.\n"


def test_leaving_the_question_ends_the_wait_with_the_run_still_paused():
    later = evt("r1", "final", message=assistant("never read"))
    conn = FakeConn(paused())
    approver = Scripted(TerminalDecision(leave=True, held=[later]))
    out = io.StringIO()
    result = ChatDriver(conn, "main").follow(sent(), PlainView(out, out), timeout=5, approver=approver)
    assert result.state == "paused" and not result.ok and result.cause == "paused"
    assert conn.calls == []
    assert out.getvalue().rstrip().endswith(chat.STAYS_PAUSED)


def test_events_read_while_asking_are_handled_after_the_question_in_order():
    held = [resolved("deny", by={"kind": "channel", "id": "telegram:42", "label": "Ann"}, via="telegram")]
    conn = FakeConn(paused(), evt("r1", "final", message=assistant("Skipped it.")))
    view = Recorder()
    result = ChatDriver(conn, "main").follow(sent(), view, timeout=5, approver=Scripted(TerminalDecision(held=held)))
    assert result.ok
    assert conn.calls == []
    assert view.log[2:] == [("resumed",), ("note", "Denied laptop__Bash by Ann (via telegram)."), ("finished", "final")]


def test_a_timeout_decision_reads_as_such():
    timed_out = resolved("timeout", by={"kind": "system", "id": "timeout", "label": ""}, via="timeout")
    assert chat.decided_text(timed_out["payload"]) == "Nobody answered in time: laptop__Bash was denied."
    stopped = resolved("cancel", by={"kind": "system", "id": "gateway", "label": "gateway"}, via="stop")
    assert chat.decided_text(stopped["payload"]) == "Cancelled laptop__Bash: the run was stopped."


@pytest.mark.parametrize(
    ("result", "resumes"),
    [
        ({"status": "paused", "runId": "r1", "response": "Approved n1__Bash. Continuing run."}, True),
        (
            {"status": "paused", "runId": "r1", "response": "Denied n1__Bash. Continuing run without executing it."},
            True,
        ),
        ({"status": "paused", "runId": "r1", "response": "Run is paused waiting…", "approvalId": "1a2b3c4d"}, False),
        ({"status": "paused", "runId": "r1", "response": "No active run is waiting for approval anymore."}, False),
        ({"status": "started", "runId": "r1"}, False),
    ],
)
def test_a_yes_typed_as_a_message_is_followed_only_when_it_decided(result, resumes):
    assert chat.resumes_run(result) is resumes


def test_time_left_and_arguments_lines():
    assert chat.time_left(NOW + 3_600_000 + 5 * 60_000, NOW) == "expires in 1h 05m"
    assert chat.time_left(NOW + 42_000, NOW) == "expires in 42s"
    assert chat.time_left(NOW - 1, NOW) == "expiring now"
    assert chat.time_left(None, NOW) == "no expiry"
    assert len(chat.args_line({"x": "y" * 1000})) == 400
    assert chat.taint_lines({"tainted": False, "sources": [{"kind": "web"}]}) == []


def test_the_approvals_command_is_registered_and_checks_its_arguments(capsys):
    from orbital.cli.main import build_parser, main

    args = build_parser().parse_args(["approvals"])
    assert args.func is approvals_cli.run and args.action == "list" and args.approval_id is None
    args = build_parser().parse_args(["approvals", "approve", "1a2b3c4d", "--session-wide"])
    assert (args.action, args.approval_id, args.session_wide) == ("approve", "1a2b3c4d", True)
    assert main(["approvals", "approve"]) == 2
    assert main(["approvals", "deny", "1a2b3c4d", "--session-wide"]) == 2
    assert main(["approvals", "list", "1a2b3c4d"]) == 2
    assert main(["approvals", "approve", "1a2b3c4d", "--session", "main"]) == 2
    assert main(["approvals", "--session", " "]) == 2
    assert main(["approvals", "history", "1a2b3c4d"]) == 2
    assert main(["approvals", "list", "--limit", "3"]) == 2
    assert main(["approvals", "history", "--limit", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("orbital approvals: ") == 8
    assert "needs the approval's ID" in err


def test_this_clients_own_answer_is_not_told_twice():
    conn = FakeConn(
        resolved(by={"kind": "client", "id": "chat-me", "label": "chat-me"}, via="chat"),  # a "yes" sent from here
        resolved(by={"kind": "client", "id": "console-1", "label": "console-1"}),
        evt("r1", "final", message=assistant("ok")),
    )
    conn.client_id = "chat-me"  # type: ignore[attr-defined]
    view = Recorder()
    ChatDriver(conn, "main").follow(sent(), view, timeout=5)
    assert [e for e in view.log if e[0] == "note"] == [("note", "Approved laptop__Bash by console-1 (via console).")]
