"""Tool approvals answered from Telegram, end to end on moto: a run that came from a Telegram chat pauses, its prompt
goes to that chat with Approve / Deny buttons (as a reply to the run's message), a press comes back through the
webhook as a `callback_query`, and the prompt shows the decision and who made it. The real inbound pipeline, the real
approval engine, the scripted model and the fake Bot API over loopback HTTP."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from orbital.channels import approval_prompt, telegram

from tests.conftest import wait_for
from tests.support import fake_telegram as ft
from tests.support.fake_llm import call, reply
from tests.support.fake_telegram import TOKEN, FakeTelegram

SECRET = "wh-secret_DISTINCTIVE_0123456789abcdef"
HOOK = "/channels/telegram/main/webhook"
HEADER = "X-Telegram-Bot-Api-Secret-Token"
GATEWAY_TOKEN = "gateway-token-for-webhooks-0123"
OWNER = ft.USER  # Ada, telegram:1111
STRANGER = {"id": 2222, "is_bot": False, "first_name": "Mallory"}
WRITE = call("gsv__WriteFile", {"path": "notes/todo.md", "content": "buy milk"})
RULE = {"id": "ask-writes", "tool": "gsv__WriteFile", "decision": "ask", "reason": "writes a file"}


@pytest.fixture(autouse=True)
def _gateway_token(monkeypatch: pytest.MonkeyPatch) -> None:
    from orbital.settings import reset_settings

    monkeypatch.setenv("ORBITAL_AUTH_TOKEN", GATEWAY_TOKEN)
    reset_settings()


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram() as server:
        yield server


@pytest.fixture
def gateway(services: Any, tg: FakeTelegram, agent: Any) -> Iterator[Any]:
    """The agent on the scripted model, Telegram on the fake Bot API, Ada an owner, writes asked about."""
    from orbital.runtime.services import use_services

    telegram._bot_users.clear()
    config = services.config
    config.set_path("channels.telegram.apiBaseUrl", tg.base_url)
    config.set_path("channels.telegram.accounts.main", {"botToken": TOKEN, "webhookSecret": SECRET})
    config.set_path("channels.telegram.dmPolicy", "open")
    config.set_path("owners", [f"telegram:{OWNER['id']}"])
    config.set_path("toolApproval.rules", [RULE])
    use_services(services)
    yield services
    use_services(None)


@pytest.fixture
def http() -> Any:
    from orbital.rest.app import create_app
    from starlette.testclient import TestClient

    with TestClient(create_app()) as client:
        yield client


def post(http: Any, update: Any) -> Any:
    return http.post(
        HOOK, content=json.dumps(update).encode(), headers={"Content-Type": "application/json", HEADER: SECRET}
    )


def sent_texts(tg: FakeTelegram) -> list[str]:
    return [str(c.params["text"]) for c in tg.calls_to("sendMessage")]


def prompt_of(tg: FakeTelegram) -> Any:
    """The approval prompt the bot sent (the message with an inline keyboard)."""
    calls = wait_for(lambda: [c for c in tg.calls_to("sendMessage") if c.params.get("reply_markup")])
    return calls[-1]


def button(prompt: Any, label: str) -> str:
    (row,) = prompt.params["reply_markup"]["inline_keyboard"]
    return next(b["callback_data"] for b in row if b["text"] == label)


def message_of(tg: FakeTelegram, prompt: Any) -> dict[str, Any]:
    """The prompt's message as the bot's chat has it now (edited or not: its first lines stay)."""
    head = prompt.params["text"].split("\n")[:3]
    return next(
        m
        for (chat, _), m in tg.messages.items()
        if chat == str(prompt.params["chat_id"]) and m["text"].split("\n")[:3] == head
    )


def written(agent: Any) -> bool:
    """Whether the asked-about write happened (the workspace file has its content)."""
    res = agent.frame("workspace.read", {"path": "notes/todo.md"})
    return bool(res and res["ok"] and res["payload"]["content"] == "buy milk")


def start_paused_run(http: Any, tg: FakeTelegram, llm: Any, message_id: int) -> Any:
    llm.script(reply("Writing it down.", tool_calls=[WRITE]), reply("Done: it is on the list."))
    assert post(http, ft.private_text("put milk on my list", message_id=message_id)).status_code == 200
    return prompt_of(tg)


def test_a_paused_run_asks_in_its_chat_and_a_button_press_answers(
    gateway: Any, http: Any, tg: FakeTelegram, llm: Any, agent: Any
) -> None:
    prompt = start_paused_run(http, tg, llm, 70)
    assert prompt.params["chat_id"] == OWNER["id"]
    assert prompt.params["reply_parameters"]["message_id"] == 70  # a reply to the run's own message
    text = prompt.params["text"]
    assert text.startswith("Run paused: tool approval required.\nTool: gsv__WriteFile\n")
    assert "Policy rule: ask-writes" in text and "Reason: writes a file" in text
    approve, deny = button(prompt, "Approve"), button(prompt, "Deny")
    assert len(approve.encode()) <= 64 and len(deny.encode()) <= 64 and approve != deny
    assert not written(agent)  # nothing dispatched while it waits

    assert post(http, ft.callback_query(approve, message_of(tg, prompt))).status_code == 200
    (answered,) = wait_for(lambda: tg.calls_to("answerCallbackQuery"))
    assert answered.params.get("text") == "Approved."
    wait_for(lambda: "Done: it is on the list." in sent_texts(tg))
    assert written(agent)
    (edit,) = wait_for(lambda: tg.calls_to("editMessageText"))
    assert edit.params["message_id"] == message_of(tg, prompt)["message_id"]
    assert edit.params["text"].endswith("Approved by Ada Lovelace (telegram).")
    assert "reply_markup" not in edit.params  # the buttons are gone
    methods = [c.method for c in tg.calls]
    assert methods.index("answerCallbackQuery") < methods.index("editMessageText")  # the spinner stops first
    assert 'Reply with "yes"' not in edit.params["text"]


def test_a_press_before_telegram_has_answered_the_prompt_counts_and_edits_it_once(
    gateway: Any, http: Any, tg: FakeTelegram, llm: Any, agent: Any
) -> None:
    """The button can be pressed before the gateway has heard back from sendMessage (the message id is not known
    yet): the press is still the owner's answer, and the prompt is edited once its id is known."""
    answered_send = tg.hold("sendMessage", when=lambda params: "reply_markup" in params)
    llm.script(reply("Writing it down.", tool_calls=[WRITE]), reply("Done: it is on the list."))
    inbound = threading.Thread(target=post, args=(http, ft.private_text("put milk on my list", message_id=71)))
    inbound.start()
    try:
        prompt = prompt_of(tg)  # sent, its answer held
        pressed = post(http, ft.callback_query(button(prompt, "Approve"), message_of(tg, prompt)))
        assert pressed.status_code == 200
        (answered,) = wait_for(lambda: tg.calls_to("answerCallbackQuery"))
        assert answered.params.get("text") == "Approved."
        assert not tg.calls_to("editMessageText")  # no message id to edit yet
    finally:
        answered_send.set()
        inbound.join(timeout=30)
    wait_for(lambda: "Done: it is on the list." in sent_texts(tg))
    assert written(agent)
    (edit,) = wait_for(lambda: tg.calls_to("editMessageText"))
    assert edit.params["message_id"] == message_of(tg, prompt)["message_id"]
    assert edit.params["text"].endswith("Approved by Ada Lovelace (telegram).")
    assert len(tg.calls_to("editMessageText")) == 1


def test_a_redelivered_press_resolves_once(gateway: Any, http: Any, tg: FakeTelegram, llm: Any, agent: Any) -> None:
    prompt = start_paused_run(http, tg, llm, 71)
    press = ft.callback_query(button(prompt, "Deny"), message_of(tg, prompt))
    assert post(http, press).status_code == 200
    assert post(http, press).status_code == 200  # Telegram delivers the same update again
    wait_for(lambda: "Done: it is on the list." in sent_texts(tg))
    assert len(tg.calls_to("answerCallbackQuery")) == 1
    assert len(tg.calls_to("editMessageText")) == 1
    assert tg.calls_to("editMessageText")[0].params["text"].endswith("Denied by Ada Lovelace (telegram).")
    assert not written(agent)
    tool_results = [m for m in llm.requests[-1].body["messages"] if m["role"] == "tool"]
    assert "denied" in tool_results[-1]["content"].lower()


def test_a_press_by_someone_not_an_owner_changes_nothing(
    gateway: Any, http: Any, tg: FakeTelegram, llm: Any, agent: Any
) -> None:
    gateway.config.set_path("channels.telegram.accounts.main.dmPolicy", "open")
    prompt = start_paused_run(http, tg, llm, 72)
    # the same button, pressed by another member of a chat that saw it
    press = ft.callback_query(button(prompt, "Approve"), message_of(tg, prompt), user=STRANGER)
    assert post(http, press).status_code == 200
    (refused,) = wait_for(lambda: tg.calls_to("answerCallbackQuery"))
    assert refused.params["text"] == approval_prompt.NOT_OWNER and refused.params.get("show_alert") is True
    assert tg.calls_to("editMessageText") == []
    from orbital.agent import approvals

    (pending,) = approvals.pending(gateway)
    assert pending["tool"] == "gsv__WriteFile"
    assert not written(agent)
    # a forged button (another decision under the same approval id) is not valid at all
    approval_id = pending["approvalId"]
    forged = f"ap:{approval_id}:a:{'0' * 16}"
    assert post(http, ft.callback_query(forged, message_of(tg, prompt))).status_code == 200
    assert tg.calls_to("answerCallbackQuery")[-1].params["text"] == approval_prompt.NOT_VALID
    assert approvals.pending(gateway) != []


def test_a_typed_yes_answers_and_edits_the_prompt(
    gateway: Any, http: Any, tg: FakeTelegram, llm: Any, agent: Any
) -> None:
    prompt = start_paused_run(http, tg, llm, 73)
    assert post(http, ft.private_text("what now?", message_id=74)).status_code == 200
    reminder = wait_for(lambda: [c for c in tg.calls_to("sendMessage") if "Run is paused" in c.params["text"]])
    assert reminder[0].params["reply_parameters"]["message_id"] == 74
    assert reminder[0].params["text"].endswith('Reply with "yes" to approve or "no" to deny.')
    assert post(http, ft.private_text("Yes", message_id=75)).status_code == 200
    (approved,) = wait_for(lambda: [c for c in tg.calls_to("sendMessage") if c.params["text"].startswith("Approved")])
    assert approved.params["text"] == "Approved gsv__WriteFile. Continuing run."
    assert approved.params["reply_parameters"]["message_id"] == 75
    wait_for(lambda: "Done: it is on the list." in sent_texts(tg))
    assert written(agent)
    (edit,) = wait_for(lambda: tg.calls_to("editMessageText"))
    assert edit.params["text"].endswith("Approved by Ada Lovelace (telegram).")
    assert edit.params["message_id"] == message_of(tg, prompt)["message_id"]
    # neither the answer nor the reminder reached the model
    contents = json.dumps(llm.requests[-1].body["messages"])
    assert "what now?" not in contents and "Yes" not in contents


def test_a_decision_on_the_console_edits_the_telegram_prompt(
    gateway: Any, http: Any, tg: FakeTelegram, llm: Any, agent: Any
) -> None:
    prompt = start_paused_run(http, tg, llm, 76)
    (pending,) = agent.call("approval.list", {})["approvals"]
    result = agent.call("approval.resolve", {"approvalId": pending["approvalId"], "decision": "approve"})
    assert result["resolved"] is True
    wait_for(lambda: "Done: it is on the list." in sent_texts(tg))
    (edit,) = wait_for(lambda: tg.calls_to("editMessageText"))
    assert edit.params["message_id"] == message_of(tg, prompt)["message_id"]
    assert "Approved by" in edit.params["text"]
    assert tg.calls_to("answerCallbackQuery") == []
    # a press after the decision is told so and changes nothing
    assert post(http, ft.callback_query(button(prompt, "Deny"), message_of(tg, prompt))).status_code == 200
    late = wait_for(lambda: tg.calls_to("answerCallbackQuery"))
    assert late[0].params["text"].startswith("Already approved")
    assert written(agent)


def test_a_run_without_a_channel_sends_nothing_to_telegram(
    gateway: Any, tg: FakeTelegram, llm: Any, agent: Any, sender: Any
) -> None:
    from orbital.agent import approvals

    llm.script(reply(tool_calls=[WRITE]), reply("ok"))
    agent.call("chat.send", {"sessionKey": "agent:main:desk", "message": "write it"})
    wait_for(lambda: approvals.pending(gateway, "agent:main:desk"))
    assert tg.calls == []


def test_a_chat_where_no_owner_can_answer_gets_no_buttons(
    gateway: Any, http: Any, tg: FakeTelegram, llm: Any, agent: Any
) -> None:
    llm.script(reply(tool_calls=[WRITE]), reply("ok"))
    assert post(http, ft.private_text("write it", user=STRANGER, message_id=77)).status_code == 200
    (sent,) = wait_for(lambda: [c for c in tg.calls_to("sendMessage") if "Run paused" in c.params["text"]])
    assert "reply_markup" not in sent.params
    assert sent.params["text"].endswith(approval_prompt.OWNER_ELSEWHERE)
    assert 'Reply with "yes"' not in sent.params["text"]
    # the stranger's "yes" does not approve
    assert post(http, ft.private_text("yes", user=STRANGER, message_id=78)).status_code == 200
    from orbital.agent import approvals

    assert len(approvals.pending(gateway)) == 1
    assert not written(agent)


# --- a channel served by a socket: the prompt is text, a typed answer decides ------------------------------------


def test_a_socket_channel_gets_the_prompt_as_text_and_a_typed_no_denies(
    agent: Any, connect: Any, sender: Any, llm: Any, services: Any
) -> None:
    from orbital.agent import approvals

    ann = {"kind": "dm", "id": "+15550001", "name": "Ann"}
    agent.call("config.set", {"path": "channels.test", "value": {"dmPolicy": "open"}})
    agent.call("config.set", {"path": "owners", "value": ["test:+15550001"]})
    agent.call("config.set", {"path": "toolApproval.rules", "value": [RULE]})
    bridge = connect("channel", "bridge", channel="test")

    def inbound(message_id: str, text: str) -> dict[str, Any]:
        return {
            "channel": "test",
            "accountId": "bridge",
            "peer": ann,
            "sender": {"id": ann["id"], "name": "Ann"},
            "message": {"id": message_id, "text": text},
        }

    def outbound() -> list[dict[str, Any]]:
        frames = sender.frames_to(bridge.connection_id)
        return [f["payload"]["message"] for f in frames if f.get("event") == "channel.outbound"]

    llm.script(reply(tool_calls=[WRITE]), reply("Left it alone."))
    assert bridge.call("channel.inbound", inbound("m1", "note it"))["status"] == "started"
    (prompt,) = wait_for(lambda: [m for m in outbound() if m["text"].startswith("Run paused")])
    assert prompt["replyToId"] == "m1" and prompt["text"].endswith('Reply with "yes" to approve or "no" to deny.')
    (pending,) = approvals.pending(services)

    reminded = bridge.call("channel.inbound", inbound("m2", "hmm?"))
    assert reminded["status"] == "paused" and reminded["approvalId"] == pending["approvalId"]
    assert reminded["runId"] == pending["runId"]
    answered = bridge.call("channel.inbound", inbound("m3", "no"))
    assert answered == {"sessionKey": answered["sessionKey"], "status": "paused", "runId": pending["runId"]}
    wait_for(lambda: [m for m in outbound() if m["text"] == "Left it alone."])
    said = {m["text"]: m.get("replyToId") for m in outbound()}
    assert said["Denied gsv__WriteFile. Continuing run without executing it."] == "m3"
    assert [m for m in said if m.startswith("Run is paused waiting for tool approval")] != []
    (entry,) = agent.call("approval.history", {"sessionKey": answered["sessionKey"]})["entries"]
    assert entry["decision"] == "deny" and entry["via"] == "chat"
    assert entry["by"] == {"kind": "channel", "id": "test:+15550001", "label": "Ann"}
    assert not written(agent)


def test_a_timeout_and_a_stop_show_on_the_prompt(gateway: Any, http: Any, tg: FakeTelegram, llm: Any) -> None:
    gateway.config.set_path("toolApproval.timeoutMs", 1000)
    start_paused_run(http, tg, llm, 80)
    (timed_out,) = wait_for(lambda: tg.calls_to("editMessageText"), timeout=30)
    assert timed_out.params["text"].endswith("\n\nTimed out: denied.") and "reply_markup" not in timed_out.params
    wait_for(lambda: "Done: it is on the list." in sent_texts(tg))

    gateway.config.set_path("toolApproval.timeoutMs", 600000)
    llm.script(reply(tool_calls=[WRITE]))
    tg.reset()
    assert post(http, ft.private_text("once more", message_id=81)).status_code == 200
    prompt_of(tg)
    assert post(http, ft.private_text("/stop", message_id=82)).status_code == 200
    (stopped,) = wait_for(lambda: tg.calls_to("editMessageText"))
    assert stopped.params["text"].endswith("\n\nCancelled: the run was stopped.")


def test_in_a_group_the_owner_answers_with_a_mention(
    gateway: Any, http: Any, tg: FakeTelegram, llm: Any, agent: Any
) -> None:
    gateway.config.set_path("channels.telegram.groupPolicy", "open")
    llm.script(reply(tool_calls=[WRITE]), reply("Done: it is on the list."))
    update = ft.group_text("put milk on the list", mention="@orbital_test_bot", message_id=90)
    assert post(http, update).status_code == 200
    prompt = prompt_of(tg)  # an owner is known on Telegram: the group gets the buttons
    assert prompt.params["chat_id"] == ft.GROUP["id"] and prompt.params["reply_parameters"]["message_id"] == 90
    # a member who is not an owner types yes: reminded, nothing decided
    assert post(http, ft.group_text("yes", user=STRANGER, message_id=91)).status_code == 200
    (refused,) = wait_for(lambda: [c for c in tg.calls_to("sendMessage") if "Only an owner" in c.params["text"]])
    assert refused.params["reply_parameters"]["message_id"] == 91
    assert not written(agent)
    assert post(http, ft.group_text("yes", mention="@orbital_test_bot", message_id=92)).status_code == 200
    wait_for(lambda: "Done: it is on the list." in sent_texts(tg))
    assert written(agent)
    (edit,) = wait_for(lambda: tg.calls_to("editMessageText"))
    assert edit.params["chat_id"] == ft.GROUP["id"] and edit.params["text"].endswith(
        "Approved by Ada Lovelace (telegram)."
    )
