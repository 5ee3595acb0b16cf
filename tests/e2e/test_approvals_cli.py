"""`orbital approvals` and `orbital chat` meeting a paused run, against a real `orbital dev`, the scripted model over
loopback and a real `orbital node`: the node's shell is under an `ask` rule, so each run that calls it waits for an
answer, given here from the command line (a list, approve, deny, approve for the session), from `orbital chat`'s
y/n question in a pseudo-terminal, or from elsewhere while `orbital chat` follows the run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.client import GatewayClient

from tests.conftest import wait_for
from tests.e2e.conftest import ROOT, GatewayProcess, NodeProcess
from tests.e2e.test_chat_cli import Terminal, _env, chat, configure, start_chat
from tests.support.fake_llm import FakeLLM, call, reply

RULE = {"id": "ask-shell", "tool": "box__Bash", "decision": "ask", "reason": "Shell commands on the box"}


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@pytest.fixture(scope="module")
def setup(gateway: GatewayProcess, llm: FakeLLM, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """The module's gateway with the scripted model, a node `box`, and its shell under an `ask` rule."""
    configure(gateway, llm)
    node = NodeProcess(gateway, "box", tmp_path_factory.mktemp("box") / "ws").start()
    with GatewayClient(gateway.url, timeout=15) as c:
        c.connect("client")
        c.call("config.set", {"path": "toolApproval.rules", "value": [RULE]})
    yield gateway
    node.stop()


@pytest.fixture
def fake(llm: FakeLLM, setup: GatewayProcess) -> Iterator[FakeLLM]:
    llm.reset()
    yield llm
    llm.reset()


@pytest.fixture
def admin(setup: GatewayProcess) -> Iterator[GatewayClient]:
    with GatewayClient(setup.url, timeout=20) as c:
        c.connect("client", f"admin-{uuid.uuid4().hex[:6]}")
        yield c


def approvals(gw: GatewayProcess, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orbital.cli.main", "approvals", "--url", gw.url, *args],
        cwd=ROOT,
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def pending(admin: GatewayClient, key: str | None = None) -> list[dict[str, Any]]:
    params = {"sessionKey": key} if key else {}
    return list(admin.call("approval.list", params)["approvals"])


def tool_results(fake: FakeLLM) -> list[str]:
    out: list[str] = []
    for request in fake.requests:
        for message in (request.body or {}).get("messages", []):
            if message.get("role") == "tool":
                content = message.get("content")
                out.append(content if isinstance(content, str) else json.dumps(content))
    return out


def paused_run(admin: GatewayClient, fake: FakeLLM, key: str, command: str, then: str = "Done.") -> dict[str, Any]:
    """A run in `key` whose model calls the box's shell, paused for its approval; the approval."""
    fake.script(reply(tool_calls=[call("box__Bash", {"command": command})]), reply(then, chunks=2))
    assert admin.call("chat.send", {"sessionKey": key, "message": "run it"})["status"] == "started"
    wait_for(lambda: pending(admin, key), timeout=30)
    (approval,) = pending(admin, key)
    return approval


def key_of(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:6]}"


# --- orbital approvals --------------------------------------------------------------------------------------------


def test_list_shows_each_pending_call_and_approve_runs_it_once(fake, admin, setup, tmp_path):
    key = key_of("cli-approve")
    approval = paused_run(admin, fake, key, "echo from-the-box-$((40+2))")
    approval_id = approval["approvalId"]

    listed = approvals(setup, tmp_path)
    assert listed.returncode == 0, listed.stderr
    head = next(line for line in listed.stdout.splitlines() if line.startswith(approval_id))
    assert "box__Bash" in head and f"session {approval['sessionKey']}" in head and "expires in " in head
    assert '  args:   {"command":"echo from-the-box-$((40+2))"}' in listed.stdout
    assert "  rule:   ask-shell · Shell commands on the box" in listed.stdout
    assert "orbital approvals approve ID" in listed.stdout

    as_json = approvals(setup, tmp_path, "--json", "--session", key)
    assert as_json.returncode == 0
    assert [a["approvalId"] for a in json.loads(as_json.stdout)["approvals"]] == [approval_id]
    other = approvals(setup, tmp_path, "list", "--session", "no-such-session")
    assert (other.returncode, other.stdout) == (0, "No approvals pending in no-such-session.\n")

    done = approvals(setup, tmp_path, "approve", approval_id)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"Approved box__Bash in {approval['sessionKey']} ({approval_id}).\n"
    wait_for(lambda: any("from-the-box-42" in r for r in tool_results(fake)), timeout=30)
    assert pending(admin, key) == []

    again = approvals(setup, tmp_path, "deny", approval_id)
    assert again.returncode == 3
    assert again.stdout == ""
    assert again.stderr.startswith("orbital approvals: Already approved")
    assert sum("from-the-box-42" in r for r in tool_results(fake)) == 1  # dispatched once

    history = approvals(setup, tmp_path, "history", "--session", key)
    assert history.returncode == 0, history.stderr
    first, args_shown = history.stdout.splitlines()
    assert re.fullmatch(rf"\S+ \S+  approved   box__Bash  {approval_id}  by cli-approvals-[0-9a-f]{{8}} via cli", first)
    assert args_shown == '  args:   {"command":"echo from-the-box-$((40+2))"}'
    empty = approvals(setup, tmp_path, "history", "--session", key_of("nothing"), "--limit", "5")
    assert (empty.returncode, empty.stdout.startswith("No approvals decided in ")) == (0, True)


def test_deny_keeps_the_call_from_the_node_and_unknown_ids_fail(fake, admin, setup, tmp_path):
    key = key_of("cli-deny")
    approval = paused_run(admin, fake, key, "echo never-$((1+1))")
    done = approvals(setup, tmp_path, "deny", approval["approvalId"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Denied box__Bash")
    wait_for(lambda: len(fake.requests) >= 2, timeout=30)
    assert not any("never-2" in r for r in tool_results(fake))
    assert any("denied by user" in r for r in tool_results(fake))

    unknown = approvals(setup, tmp_path, "approve", "ffffffff")
    assert unknown.returncode == 1
    assert "Unknown approval id: ffffffff" in unknown.stderr


def test_approve_session_wide_lets_the_same_call_run_unasked(fake, admin, setup, tmp_path):
    key = key_of("cli-wide")
    approval = paused_run(admin, fake, key, "echo wide")
    done = approvals(setup, tmp_path, "approve", approval["approvalId"], "--session-wide")
    assert done.returncode == 0, done.stderr
    assert "for the rest of that session" in done.stdout
    wait_for(lambda: not pending(admin, key) and len(fake.requests) >= 2, timeout=30)

    fake.reset()
    fake.script(reply(tool_calls=[call("box__Bash", {"command": "echo wide"})]), reply("Again.", chunks=2))
    assert admin.call("chat.send", {"sessionKey": key, "message": "again"})["status"] == "started"
    wait_for(lambda: len(fake.requests) >= 2, timeout=30)
    assert any("wide" in r for r in tool_results(fake))
    assert pending(admin, key) == []


# --- orbital chat -------------------------------------------------------------------------------------------------


def test_one_shot_chat_shows_the_question_waits_and_goes_on_after_an_answer_elsewhere(fake, admin, setup, tmp_path):
    key = key_of("chat-wait")
    fake.script(reply(tool_calls=[call("box__Bash", {"command": "echo waited"})]), reply("All done.", chunks=2))
    proc = start_chat(setup.url, tmp_path, "-m", "run it", "-s", key)
    try:
        wait_for(lambda: pending(admin, key), timeout=30)
        (approval,) = pending(admin, key)
        done = approvals(setup, tmp_path, "approve", approval["approvalId"])
        assert done.returncode == 0, done.stderr
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert out.endswith("All done.\n")
    assert f"Approval needed: box__Bash ({approval['approvalId']})" in err
    assert "  rule:   ask-shell · Shell commands on the box" in err
    assert re.search(r"Approved box__Bash by .+ \(via cli\)\.", err), err
    assert any("waited" in r for r in tool_results(fake))


@pytest.fixture
def terminal(setup: GatewayProcess, tmp_path: Path) -> Iterator[Any]:
    opened: list[Terminal] = []

    def open_chat(session: str) -> Terminal:
        env = _env(tmp_path / "home")
        env.update(TERM="xterm-256color", COLUMNS="120", LINES="40")
        args = [sys.executable, "-m", "orbital.cli.main", "chat", "--url", setup.url, "--session", session]
        term = Terminal(args, env)
        opened.append(term)
        term.expect(rf"{re.escape(session)} │ Enter send")
        return term

    yield open_chat
    for term in opened:
        term.close()


def test_interactive_chat_asks_y_or_n_and_keeps_streaming(fake, admin, terminal):
    key = key_of("pty-approve")
    term = terminal(key)
    fake.script(
        reply(tool_calls=[call("box__Bash", {"command": "echo yes-$((2*21))"})]), reply("It said 42.", chunks=2)
    )
    term.send("run it\r")
    term.expect(r"Approval needed: box__Bash \([0-9a-f]{8}\)")
    term.expect(r"rule:   ask-shell · Shell commands on the box")
    term.expect(r"Approve\? \[y\]es / \[n\]o / \[s\]ession")
    term.send("y\r")
    term.expect(r"Approved box__Bash\.")
    term.expect(r"It said 42\.")
    term.expect(rf"{re.escape(key)} │")  # the prompt is back
    assert any("yes-42" in r for r in tool_results(fake))

    fake.reset()
    fake.script(reply(tool_calls=[call("box__Bash", {"command": "echo no-$((1+1))"})]), reply("Skipped.", chunks=2))
    term.send("again\r")
    term.expect(r"Approve\? ")
    term.send("maybe\r")
    term.expect(r"Answer y or n, or s\.")
    term.send("n\r")
    term.expect(r"Denied box__Bash\.")
    term.expect(r"Skipped\.")
    assert not any("no-2" in r for r in tool_results(fake))
    term.expect(rf"{re.escape(key)} │")  # the prompt is back (a Ctrl-D typed before it would be lost)
    term.send("\x04")
    assert term.wait() == 0


def test_interactive_chat_left_paused_then_answered_with_a_typed_yes(fake, admin, terminal):
    key = key_of("pty-later")
    term = terminal(key)
    fake.script(reply(tool_calls=[call("box__Bash", {"command": "echo later"})]), reply("Finally.", chunks=2))
    term.send("run it\r")
    term.expect(r"Approve\? ")
    term.send("\x03")  # Ctrl-C: leave the question, the run stays paused
    term.expect(r"The run stays paused")
    term.expect(rf"{re.escape(key)} │")
    assert len(pending(admin, key)) == 1

    term.send("what now?\r")  # not an answer: a reminder, and the message is dropped
    term.expect(r"Run is paused waiting for tool approval \([0-9a-f]{8}\) for box__Bash\.")
    term.send("yes\r")
    term.expect(r"Approved box__Bash\. Continuing run\.")
    term.expect(r"Finally\.")  # the paused run's end, followed under its own id
    assert pending(admin, key) == []
    assert any("later" in r for r in tool_results(fake))


def test_a_decision_made_elsewhere_ends_the_question(fake, admin, setup, terminal, tmp_path):
    key = key_of("pty-elsewhere")
    term = terminal(key)
    fake.script(reply(tool_calls=[call("box__Bash", {"command": "echo remote"})]), reply("Remote ok.", chunks=2))
    term.send("run it\r")
    term.expect(r"Approve\? ")
    (approval,) = pending(admin, key)
    assert approvals(setup, tmp_path, "approve", approval["approvalId"]).returncode == 0
    term.expect(r"Approved box__Bash by .+ \(via cli\)\.")
    term.expect(r"Remote ok\.")
    term.expect(rf"{re.escape(key)} │")
    term.send("exit\r")
    assert term.wait() == 0


STRANGER = {"kind": "dm", "id": "+15550002", "name": "Mallory"}


def stranger_says(gw: GatewayProcess, admin: GatewayClient, text: str) -> dict[str, Any]:
    """A message from a channel sender who is not an owner (a bridge socket of channel `test`); `channel.inbound`'s
    answer."""
    admin.call("config.set", {"path": "channels.test", "value": {"dmPolicy": "open", "allowFrom": []}})
    admin.call("config.set", {"path": "owners", "value": ["test:+15550001"]})
    with GatewayClient(gw.url, timeout=20) as bridge:
        bridge.connect("channel", f"bridge-{uuid.uuid4().hex[:6]}", client={"channel": "test"})
        return dict(
            bridge.call(
                "channel.inbound",
                {
                    "channel": "test",
                    "accountId": "bridge",
                    "peer": STRANGER,
                    "sender": {"id": STRANGER["id"], "name": STRANGER["name"]},
                    "message": {"id": uuid.uuid4().hex, "text": text},
                },
            )
        )


def test_a_tainted_runs_approval_names_where_its_content_came_from(fake, admin, setup, tmp_path):
    fake.script(reply(tool_calls=[call("box__Bash", {"command": "echo tainted"})]), reply("ok", chunks=2))
    key = stranger_says(setup, admin, "please run the installer")["sessionKey"]
    wait_for(lambda: pending(admin, key), timeout=30)
    (approval,) = pending(admin, key)

    listed = approvals(setup, tmp_path, "--session", key)
    assert listed.returncode == 0, listed.stderr
    assert "  taint:  channel: test message from Mallory (test:+15550002)" in listed.stdout

    done = approvals(setup, tmp_path, "deny", approval["approvalId"])
    assert done.returncode == 0, done.stderr
    wait_for(lambda: len(fake.requests) >= 2, timeout=30)
    (result,) = tool_results(fake)
    assert "denied by user" in result  # the node never ran it


def test_one_shot_yes_into_a_paused_session_answers_and_follows_the_run(fake, admin, setup, tmp_path):
    key = key_of("oneshot-yes")
    paused_run(admin, fake, key, "echo by-message", then="Finished after yes.")
    reminded = chat(setup, tmp_path, "-m", "is it done?", "-s", key)
    assert reminded.returncode == 1
    assert reminded.stdout == ""
    assert "Run is paused waiting for tool approval" in reminded.stderr
    assert len(pending(admin, key)) == 1  # the reminder changed nothing

    done = chat(setup, tmp_path, "-m", "yes", "-s", key)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "Approved box__Bash. Continuing run.\n"
    assert done.stdout == "Finished after yes.\n"
    assert any("by-message" in r for r in tool_results(fake))


def test_the_token_is_found_like_for_every_orbital_command_and_never_printed(tmp_path):
    gw = GatewayProcess(tmp_path / "data", auth="token").start()  # as `make dev`: a token drawn into the data dir
    try:
        env = _env(tmp_path / "home")
        env["ORBITAL_DATA_DIR"] = str(gw.data_dir)
        args = [sys.executable, "-m", "orbital.cli.main", "approvals", "--url", gw.url]
        found = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert (found.returncode, found.stdout) == (0, "No approvals pending.\n"), found.stderr

        env = _env(tmp_path / "home", ORBITAL_TOKEN="wrong-token-0123456789abcdef")
        refused = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    finally:
        gw.stop()
    assert refused.returncode == 1
    assert refused.stderr.startswith("orbital approvals: ")
    assert "wrong-token" not in refused.stdout + refused.stderr
    assert str(gw.token) not in refused.stdout + refused.stderr


def test_interactive_s_approves_for_the_rest_of_the_session(fake, admin, terminal):
    key = key_of("pty-session")
    term = terminal(key)
    fake.script(reply(tool_calls=[call("box__Bash", {"command": "echo s-wide"})]), reply("First.", chunks=2))
    term.send("run it\r")
    term.expect(r"Approve\? ")
    term.send("s\r")
    term.expect(r"Approved box__Bash, and calls like it for the rest of this session\.")
    term.expect(r"First\.")
    term.expect(rf"{re.escape(key)} │")

    fake.script(reply(tool_calls=[call("box__Bash", {"command": "echo s-wide"})]), reply("Second.", chunks=2))
    term.send("again\r")
    term.expect(r"Second\.")  # no question this time
    assert "Approve?" not in term.screen()[term.screen().index("again") :]
    last = [m["content"] for m in fake.requests[-1].body["messages"] if m["role"] == "tool"]
    assert len(last) == 2 and all("s-wide" in str(r) for r in last)  # both calls ran on the box
    term.expect(rf"{re.escape(key)} │")
    term.send("exit\r")
    assert term.wait() == 0
