"""Tool approvals in the console, in a real browser against a real `orbital dev`, the scripted model and a real
`orbital node`: a node tool under an `ask` rule pauses the run; the console shows the call as a card in its session
and a badge on every view; Approve makes the node run it, Deny and a decision made elsewhere take the card away and
say who decided, and the paused event leaves the transcript as it is."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from orbital.client import GatewayClient
from playwright.sync_api import Page, expect

from tests.browser.conftest import PHONE, SOCKET_SPY, TOKEN, Console, HeldAnswers
from tests.browser.test_console_chat import HeldSocket
from tests.conftest import wait_for
from tests.e2e.conftest import NodeProcess
from tests.support.fake_llm import FakeLLM, call, reply

RULE = {"id": "ask-shell", "tool": "laptop__Bash", "decision": "ask", "reason": "Shell commands on the laptop"}


@pytest.fixture
def ask_shell(admin: GatewayClient, node: NodeProcess) -> Iterator[None]:
    """The laptop's shell asks first (the rest of the policy as it was)."""
    admin.call("config.set", {"path": "toolApproval.rules", "value": [RULE]})
    try:
        yield
    finally:
        admin.call("config.set", {"path": "toolApproval.rules", "value": []})


def session_key() -> str:
    return f"agent:main:console-approve-{uuid.uuid4().hex[:6]}"


def pending(admin: GatewayClient, key: str) -> list[dict[str, Any]]:
    return list(admin.call("approval.list", {"sessionKey": key})["approvals"])


def tool_results(fake: FakeLLM) -> list[str]:
    """The tool results the model was sent, as text, over every request so far."""
    out: list[str] = []
    for request in fake.requests:
        for message in (request.body or {}).get("messages", []):
            if message.get("role") == "tool":
                content = message.get("content")
                out.append(content if isinstance(content, str) else json.dumps(content))
    return out


def start_paused_run(admin: GatewayClient, fake: FakeLLM, key: str, command: str) -> dict[str, Any]:
    """A run in `key` whose model calls the laptop's shell, paused for its approval; the approval."""
    fake.script(reply(tool_calls=[call("laptop__Bash", {"command": command})]), reply("Done.", chunks=2))
    started = admin.call("chat.send", {"sessionKey": key, "message": "run it"})
    assert started["status"] == "started"
    wait_for(lambda: pending(admin, key), timeout=30)
    (approval,) = pending(admin, key)
    return approval


def card(page: Page) -> Any:
    return page.get_by_role("region", name="Conversation").locator("section.approval")


def test_a_paused_run_shows_on_every_view_and_approve_runs_the_call_on_the_node(
    console: Console, fake: FakeLLM, admin: GatewayClient, ask_shell: None
) -> None:
    key = session_key()
    approval = start_paused_run(admin, fake, key, "echo approved-$((6*7))")
    assert tool_results(fake) == []  # nothing ran yet

    # opened after the pause, on another view: the badge comes from approval.list at connect
    page = console.open("#/nodes").page
    badge = page.locator("#approvals")
    expect(badge).to_have_text("1 approval waiting")
    badge.click()
    expect(page).to_have_url(f"{console.base}/#/chat/{key.replace(':', '%3A')}")
    box = card(page)
    expect(box).to_have_count(1)
    expect(box).to_contain_text("Approval needed")
    expect(box.locator(".approval-tool")).to_have_text("The agent wants to run Bash on laptop.")
    expect(box.locator(".approval-args")).to_contain_text("echo approved-$((6*7))")
    expect(box.locator(".approval-rule")).to_have_text("Rule ask-shell: Shell commands on the laptop")
    expect(box.locator(".approval-expiry")).to_contain_text("left")
    expect(box.locator(".approval-taint")).to_have_count(0)  # the owner's own run
    expect(page.locator(".runbar")).to_contain_text("The agent waits for your approval")

    box.get_by_role("button", name="Approve", exact=True).click()
    conversation = page.get_by_role("region", name="Conversation")
    expect(card(page)).to_have_count(0)
    expect(conversation.locator(".note.small")).to_contain_text(f"Approved {approval['tool']} by you via console")
    expect(conversation.locator(".msg.assistant").last).to_contain_text("Done.")
    expect(badge).to_be_hidden()
    assert any("approved-42" in r for r in tool_results(fake))  # the node ran the command: its output reached the model
    assert pending(admin, key) == []

    # the prompt never became a message: after a reload the transcript is the stored one
    page.reload()
    expect(conversation.locator(".msg.user")).to_have_count(1)
    expect(conversation.locator(".msg.user")).to_contain_text("run it")
    expect(conversation).not_to_contain_text("Run paused")
    expect(conversation.locator("details.tool")).to_contain_text("Bash")
    expect(conversation.locator(".msg.assistant").last).to_contain_text("Done.")


def test_deny_and_a_decision_made_elsewhere_take_the_card_away_and_say_who(
    console: Console, fake: FakeLLM, admin: GatewayClient, ask_shell: None
) -> None:
    key = session_key()
    page = console.open(f"#/chat/{key}").page  # open first: the card comes from the live events
    start_paused_run(admin, fake, key, "echo denied-here")
    box = card(page)
    expect(box).to_have_count(1)
    expect(page.locator("#approvals")).to_have_text("1 approval waiting")
    conversation = page.get_by_role("region", name="Conversation")
    # the `paused` event: the run shows as waiting, its prompt is no message of the transcript
    expect(conversation.locator(".msg.assistant.live .msg-extra")).to_have_text("waiting for approval")
    expect(conversation).not_to_contain_text("Run paused")
    expect(conversation.locator(".msg.user")).to_have_count(1)
    expect(conversation.locator("details.tool .tool-status")).to_have_text("awaiting approval")  # its call's card
    box.get_by_role("button", name="Deny").click()
    expect(box).to_have_count(0)
    expect(conversation.locator(".note.small")).to_contain_text("Denied laptop__Bash by you via console")
    expect(conversation.locator(".msg.assistant").last).to_contain_text("Done.")
    assert not any("denied-here" in r for r in tool_results(fake))
    assert any("denied by user" in r for r in tool_results(fake))

    # decided elsewhere (another client): the card goes, and the note says who
    approval = start_paused_run(admin, fake, key, "echo approved-elsewhere")
    expect(box).to_have_count(1)
    answered = admin.call("approval.resolve", {"approvalId": approval["approvalId"], "decision": "approve"})
    assert answered["resolved"] is True
    expect(box).to_have_count(0)
    expect(conversation.locator(".note.small").last).to_contain_text(
        re.compile(r"Approved laptop__Bash by admin-\w+ via rpc")
    )
    expect(page.locator("#approvals")).to_be_hidden()
    wait_for(lambda: any("approved-elsewhere" in r for r in tool_results(fake)), timeout=30)


def test_approve_for_this_session_sends_remember_and_the_same_call_then_runs_unasked(
    console: Console, fake: FakeLLM, admin: GatewayClient, ask_shell: None
) -> None:
    key = session_key()
    console.page.add_init_script(SOCKET_SPY)
    page = console.open(f"#/chat/{key}").page
    start_paused_run(admin, fake, key, "echo once")
    card(page).get_by_role("button", name="Approve for this session").click()
    expect(card(page)).to_have_count(0)
    sent = [json.loads(f) for f in page.evaluate("window.__sent")]
    (resolve,) = [f for f in sent if f.get("method") == "approval.resolve"]
    assert resolve["params"] == {**resolve["params"], "remember": "session", "decision": "approve", "via": "console"}
    conversation = page.get_by_role("region", name="Conversation")
    expect(conversation.locator(".msg.assistant").last).to_contain_text("Done.")

    # the same call again in this session: no question
    fake.script(reply(tool_calls=[call("laptop__Bash", {"command": "echo once"})]), reply("Again.", chunks=2))
    box = page.get_by_label("Message", exact=True)
    box.fill("once more")
    box.press("Enter")
    expect(conversation.locator(".msg.assistant").last).to_contain_text("Again.")
    assert pending(admin, key) == []
    assert sum("once" in r for r in tool_results(fake)) >= 2


TAINTED = {
    "approvalId": "0badc0de",
    "runId": "run-tainted",
    "callId": "c1",
    "tool": "laptop__Write",
    "args": {"path": "notes.txt", "content": "<img src=x onerror=alert(1)>", "token": "***"},
    "ruleId": None,
    "reason": "The run holds content from someone other than the owner",
    "taint": {
        "tainted": True,
        "sources": [
            {"kind": "channel", "detail": "telegram:555 (not an owner)", "at": 0},
            {"kind": "tool", "detail": "web fetch of https://example.invalid/", "at": 0},
        ],
    },
    "prompt": "Run paused: tool approval required.",
    "state": "pending",
}


def test_a_tainted_runs_card_names_its_sources_and_shows_arguments_as_text(console: Console) -> None:
    """The card of an approval announced by the gateway's event (as a tainted run's would be), drawn from the event
    alone: the sources of the foreign content, the arguments as text (never markup), then gone at its decision."""
    key = session_key()
    console.page.add_init_script(SOCKET_SPY)
    page = console.open(f"#/chat/{key}").page
    now = page.evaluate("Date.now()")
    approval = {**TAINTED, "sessionKey": key, "requestedAt": now, "expiresAt": now + 5 * 60_000}
    inject(page, "approval.requested", approval)
    box = card(page)
    expect(box).to_have_count(1)
    expect(box.locator(".badge.error")).to_have_text("Tainted run")
    expect(box.locator(".approval-taint li")).to_have_text(
        ["channel: telegram:555 (not an owner)", "tool: web fetch of https://example.invalid/"]
    )
    expect(box.locator(".approval-args")).to_contain_text('"content": "<img src=x onerror=alert(1)>"')
    expect(box.locator("img")).to_have_count(0)
    expect(box.locator(".approval-expiry")).to_contain_text("min")
    expect(page.locator("#approvals")).to_have_text("1 approval waiting")
    expect(page.locator(".chat-empty")).to_have_count(0)  # the card, not "No messages yet"
    page.set_viewport_size(PHONE)  # the badge shortens, and the header's buttons stay on the screen
    expect(page.locator("#approvals")).to_have_js_property("innerText", "1 waiting")
    expect(page.locator("#theme")).to_be_in_viewport()
    expect(page.locator("#signout")).to_be_in_viewport()

    resolution = {
        "approvalId": "0badc0de",
        "sessionKey": key,
        "runId": "run-tainted",
        "tool": "laptop__Write",
        "decision": "deny",
        "by": {"kind": "channel", "id": "telegram:42", "label": "Ann"},
        "via": "telegram",
        "decidedAt": now,
    }
    inject(page, "approval.resolved", resolution)
    expect(box).to_have_count(0)
    expect(page.get_by_role("region", name="Conversation").locator(".note.small")).to_contain_text(
        "Denied laptop__Write by Ann via telegram"
    )
    expect(page.locator("#approvals")).to_be_hidden()


def inject(page: Page, event: str, payload: dict[str, Any]) -> None:
    """An event frame handed to the page as if its socket had received it."""
    frame = json.dumps({"type": "evt", "event": event, "payload": payload})
    page.evaluate("f => window.__sockets.at(-1).dispatchEvent(new MessageEvent('message', { data: f }))", frame)


def test_an_approval_announced_while_the_list_is_read_stays_when_the_older_list_answers(console: Console) -> None:
    """The list is read at connect; an `approval.requested` that comes before its answer is newer than that answer,
    and stays."""
    key = session_key()
    socket = HeldAnswers(console.page, "approval.list", held=True)
    page = console.open(f"#/chat/{key}").page
    socket.wait_kept()  # read before the approval existed: it has none of this session's
    now = page.evaluate("Date.now()")
    approval = {**TAINTED, "sessionKey": key, "requestedAt": now, "expiresAt": now + 5 * 60_000}
    socket.send({"type": "evt", "event": "approval.requested", "payload": approval})
    expect(card(page)).to_have_count(1)
    socket.release()
    expect(card(page)).to_have_count(1)
    expect(card(page).locator(".approval-taint li")).to_have_count(2)
    expect(page.locator("#approvals")).to_have_text("1 approval waiting")
    assert not console.errors, console.errors


def test_a_decision_that_comes_while_the_list_is_read_is_not_undone_by_the_older_list(
    console: Console, fake: FakeLLM, admin: GatewayClient, ask_shell: None
) -> None:
    key = session_key()
    approval = start_paused_run(admin, fake, key, "echo decided-meanwhile")
    socket = HeldAnswers(console.page, "approval.list", held=True)
    page = console.open(f"#/chat/{key}").page
    socket.wait_kept()  # read while the approval was pending: the answer still has it
    admin.call("approval.resolve", {"approvalId": approval["approvalId"], "decision": "deny"})
    socket.wait_until(lambda: "approval.resolved" in socket.events, "the decision's event, passed to the page")
    socket.release()
    expect(card(page)).to_have_count(0)
    expect(page.locator("#approvals")).to_be_hidden()
    expect(page.get_by_role("region", name="Conversation").locator(".msg.assistant").last).to_contain_text("Done.")
    assert not console.errors, console.errors


def test_yes_typed_in_the_composer_answers_and_is_no_message(
    console: Console, fake: FakeLLM, admin: GatewayClient, ask_shell: None
) -> None:
    key = session_key()
    page = console.open(f"#/chat/{key}").page
    start_paused_run(admin, fake, key, "echo typed-$((3*3))")
    expect(card(page)).to_have_count(1)
    box = page.get_by_label("Message", exact=True)
    conversation = page.get_by_role("region", name="Conversation")

    box.fill("what is this?")  # not an answer: the gateway reminds, and drops the message
    box.press("Enter")
    expect(conversation.locator(".note.small").last).to_contain_text("Run is paused waiting for tool approval")
    expect(card(page)).to_have_count(1)

    box.fill("yes")
    box.press("Enter")
    expect(conversation.locator(".note.small").last).to_contain_text("Approved laptop__Bash. Continuing run.")
    expect(card(page)).to_have_count(0)
    expect(conversation.locator(".msg.assistant").last).to_contain_text("Done.")
    expect(conversation.locator(".msg.user")).to_have_count(1)  # "run it" only: neither answer became a message
    expect(conversation.locator(".msg.user.pending")).to_have_count(0)
    wait_for(lambda: any("typed-9" in r for r in tool_results(fake)), timeout=30)


def test_a_strangers_message_makes_a_tainted_card_and_the_owner_approves_it(
    console: Console, fake: FakeLLM, admin: GatewayClient, node: NodeProcess, gateway: Any
) -> None:
    """No rule asks: the run is tainted by a channel sender who is not an owner, so the shell asks anyway."""
    admin.call("config.set", {"path": "channels.test", "value": {"dmPolicy": "open", "allowFrom": []}})
    admin.call("config.set", {"path": "owners", "value": ["test:+15550001"]})
    fake.script(reply(tool_calls=[call("laptop__Bash", {"command": "echo owner-ok"})]), reply("Done.", chunks=2))
    with GatewayClient(gateway.url, timeout=20) as bridge:
        bridge.connect("channel", f"bridge-{uuid.uuid4().hex[:6]}", token=TOKEN, client={"channel": "test"})
        started = bridge.call(
            "channel.inbound",
            {
                "channel": "test",
                "accountId": "bridge",
                "peer": {"kind": "dm", "id": "+15550002", "name": "Mallory"},
                "sender": {"id": "+15550002", "name": "Mallory"},
                "message": {"id": uuid.uuid4().hex, "text": "please run the installer"},
            },
        )
    key = started["sessionKey"]
    wait_for(lambda: pending(admin, key), timeout=30)
    page = console.open("#/chat").page
    page.locator("#approvals").click()
    box = card(page)
    expect(box.locator(".badge.error")).to_have_text("Tainted run")
    expect(box.locator(".approval-taint li")).to_have_text(["channel: test message from Mallory (test:+15550002)"])
    box.get_by_role("button", name="Approve", exact=True).click()
    expect(box).to_have_count(0)
    wait_for(lambda: any("owner-ok" in r for r in tool_results(fake)), timeout=30)


def test_after_a_reconnect_the_badge_is_what_the_gateway_holds_now(
    console: Console, fake: FakeLLM, admin: GatewayClient, ask_shell: None
) -> None:
    """Decided and asked while the console was away (their events missed): `approval.list` at the reconnect."""
    first, second = session_key(), session_key()
    socket = HeldSocket(console.page)
    page = console.open("#/nodes").page
    earlier = start_paused_run(admin, fake, first, "echo first")
    badge = page.locator("#approvals")
    expect(badge).to_have_text("1 approval waiting")
    expect(badge).to_have_attribute("href", f"#/chat/{first.replace(':', '%3A')}")

    socket.hold()
    expect(page.locator("#status")).not_to_have_attribute("data-state", "open")
    admin.call("approval.resolve", {"approvalId": earlier["approvalId"], "decision": "deny"})
    wait_for(lambda: len(fake.requests) >= 2, timeout=30)  # the first run went on without the call
    start_paused_run(admin, fake, second, "echo second")
    expect(page.locator("#status")).to_have_attribute("data-state", "connecting")  # its next socket, held
    expect(badge).to_have_attribute("href", f"#/chat/{first.replace(':', '%3A')}")  # nothing heard yet
    socket.release()
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    expect(badge).to_have_attribute("href", f"#/chat/{second.replace(':', '%3A')}")
    expect(badge).to_have_text("1 approval waiting")
    admin.call("approval.resolve", {"approvalId": pending(admin, second)[0]["approvalId"], "decision": "deny"})
    expect(badge).to_be_hidden()


def test_stop_cancels_the_waiting_call_and_its_card(
    console: Console, fake: FakeLLM, admin: GatewayClient, ask_shell: None
) -> None:
    key = session_key()
    page = console.open(f"#/chat/{key}").page
    start_paused_run(admin, fake, key, "echo never-stopped")
    expect(card(page)).to_have_count(1)
    page.locator(".runbar").get_by_role("button", name="Stop").click()
    conversation = page.get_by_role("region", name="Conversation")
    expect(card(page)).to_have_count(0)
    expect(conversation.locator(".note.small")).to_contain_text("Cancelled laptop__Bash: the run was stopped")
    expect(conversation.locator(".note.error")).to_contain_text("Run cancelled by user")
    expect(page.locator(".runbar")).to_be_hidden()
    expect(page.locator("#approvals")).to_be_hidden()
    assert pending(admin, key) == []
    assert not any("never-stopped" in r for r in tool_results(fake))
