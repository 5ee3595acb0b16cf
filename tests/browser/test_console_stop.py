"""Stop in the console's Chat view, in a real browser against a real gateway and the scripted model: after a stop in
the middle of a streamed reply the console is ready again (no Stop button, no "The agent is working…"), whatever
of the stopped run still reaches it."""

from __future__ import annotations

import json
import uuid

from orbital.client import GatewayClient
from playwright.sync_api import Page, expect

from tests.browser.conftest import SOCKET_SPY, Console
from tests.support.fake_llm import FakeLLM, reply

WORDS = " ".join(f"word{i}" for i in range(40))

RECEIVED = """
window.__received = [];
const Spied = window.WebSocket;
window.WebSocket = class extends Spied {
  constructor(...args) {
    super(...args);
    this.addEventListener("message", (e) => window.__received.push(e.data));
  }
};
"""
"""After `SOCKET_SPY`: every text frame the page receives, in `window.__received`."""


def chat_events(page: Page) -> list[dict]:
    frames = [json.loads(f) for f in page.evaluate("window.__received") if isinstance(f, str)]
    return [f["payload"] for f in frames if f.get("type") == "evt" and f.get("event") == "chat"]


def test_stop_in_the_middle_of_a_reply_returns_the_console_to_ready(
    console: Console, fake: FakeLLM, admin: GatewayClient
) -> None:
    key = f"agent:main:console-stop-{uuid.uuid4().hex[:7]}"

    def respond(request: object) -> object:
        return reply(WORDS, chunks=20, hold_after=1)  # one piece, then the rest when the test lets it go on

    fake.responder = respond
    console.page.add_init_script(SOCKET_SPY)
    console.page.add_init_script(RECEIVED)
    page = console.open(f"#/chat/{key}").page
    box = page.get_by_label("Message", exact=True)
    box.fill("write a lot")
    box.press("Enter")
    stop = page.get_by_role("button", name="Stop")
    runbar = page.locator(".runbar")
    expect(page.locator(".live-text")).to_contain_text("word0")
    expect(runbar).to_contain_text("The agent is working")
    stop.click()
    expect(page.get_by_role("region", name="Conversation").locator(".note.error")).to_contain_text(
        "Run cancelled by user"
    )
    fake.release()  # the model would stream the rest now
    assert fake.requests[0].ended.wait(15)
    expect(stop).to_be_hidden()
    expect(runbar).to_be_hidden()
    expect(box).to_be_editable()

    # a piece of the stopped run arriving after its end (as a gateway that kept streaming sent it) changes nothing
    run_id = next(e["runId"] for e in chat_events(page) if e.get("state") == "error")
    late = {"type": "evt", "event": "chat", "payload": {"runId": run_id, "sessionKey": key, "state": "delta"}}
    late["payload"]["text"] = " and more"
    page.evaluate(
        "frame => window.__sockets.at(-1).dispatchEvent(new MessageEvent('message', { data: frame }))",
        json.dumps(late),
    )
    expect(page.locator(".live-text")).to_have_count(0)
    expect(runbar).to_be_hidden()
    expect(stop).to_be_hidden()
    assert admin.call("session.stats", {"sessionKey": key})["isProcessing"] is False


def test_a_stopped_run_stays_in_the_transcript_as_one_note(console: Console, fake: FakeLLM) -> None:
    key = f"agent:main:console-stop-{uuid.uuid4().hex[:7]}"

    def respond(request: object) -> object:
        return reply(WORDS, chunks=20, hold_after=1)

    fake.responder = respond
    page = console.open(f"#/chat/{key}").page
    box = page.get_by_label("Message", exact=True)
    box.fill("write a lot")
    box.press("Enter")
    expect(page.locator(".live-text")).to_contain_text("word0")
    page.get_by_role("button", name="Stop").click()
    notes = page.get_by_role("region", name="Conversation").locator(".note.error")
    expect(notes).to_contain_text("Run cancelled by user")
    fake.release()
    page.get_by_role("button", name="Stop").wait_for(state="hidden")
    page.reload()  # what is stored: the message, then the run's trace (not a message left unanswered)
    conversation = page.get_by_role("region", name="Conversation")
    expect(conversation.locator(".msg.user")).to_contain_text("write a lot")
    expect(notes).to_have_count(1)
    expect(notes).to_contain_text("Run cancelled by user")
