"""The console's Chat view in a real browser, against a real gateway, the scripted model and a real node: the main
session by default, the reply streaming in, tool-call cards, Stop, queued messages, slash-command completion,
read-only cron runs, the session list, a phone-sized window and a reconnect."""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any
from urllib.parse import unquote

from orbital.client import GatewayClient
from playwright.sync_api import Locator, Page, expect

from tests.browser.conftest import PHONE, SOCKET_SPY, TOKEN, Console
from tests.conftest import wait_for
from tests.e2e.conftest import GatewayProcess, NodeProcess
from tests.support.fake_llm import FakeLLM, call, hang, reply

MAIN = "agent:main:main"

# How far the transcript is from its bottom, and how wide its content is beyond its box.
T = "document.querySelector('.transcript')"
BELOW = f"{T}.scrollHeight - {T}.scrollTop - {T}.clientHeight"
SIDEWAYS = f"{T}.scrollWidth - {T}.clientWidth"
SCROLL_UP = f"{T}.scrollTop = 0, {T}.dispatchEvent(new Event('scroll'))"

# Every text the live reply showed, in order (to prove it grew piece by piece before it was whole).
WATCH_LIVE_TEXT = """() => {
  window.__seen = [];
  const tail = document.querySelector('[data-view="chat"] .tail');
  new MutationObserver(() => {
    for (const el of tail.querySelectorAll('.live-text .md')) window.__seen.push(el.textContent.trim());
  }).observe(tail, { subtree: true, childList: true, characterData: true });
}"""


def system_prompt(request: Any) -> str:
    return str(request.body["messages"][0]["content"])


def scripted(fake: FakeLLM, key: str, *items: Any) -> None:
    """Answer the model requests of one session with `items` in order; any other request (a run of an earlier test
    still going) gets a plain reply, so it cannot eat this test's script."""
    queue = list(items)

    def respond(request: Any) -> Any:
        if f"Session key: {key}\n" in system_prompt(request) + "\n" and queue:
            return queue.pop(0)
        return reply("(unrelated)")

    fake.responder = respond


def asked(fake: FakeLLM, key: str) -> bool:
    """Whether the model got a request of this session."""
    return any(f"Session key: {key}\n" in system_prompt(r) + "\n" for r in fake.requests)


def fresh_key() -> str:
    return f"agent:main:console-t{uuid.uuid4().hex[:7]}"


def transcript(page: Page) -> Locator:
    return page.get_by_role("region", name="Conversation")


def composer(page: Page) -> Locator:
    return page.get_by_label("Message", exact=True)


def send(page: Page, text: str) -> None:
    box = composer(page)
    box.fill(text)
    box.press("Enter")
    expect(box).to_have_value("")


def test_opens_in_the_main_session_and_streams_the_reply(console: Console, fake: FakeLLM, admin: GatewayClient) -> None:
    text = "Streaming works in the console, one piece after another, until the reply is whole."
    scripted(fake, MAIN, reply(text, chunks=5, delay_per_chunk=0.2))
    page = console.open("#/chat").page
    expect(page.get_by_role("heading", name="Main session")).to_be_visible()
    expect(page.locator(".chat-key")).to_have_text(MAIN)
    expect(page.get_by_role("link", name=re.compile("^Main session")).first).to_have_attribute("aria-current", "page")
    expect(page.locator(".meta-strip")).to_contain_text("openai/gpt-test")
    expect(composer(page)).to_be_focused()
    page.evaluate(WATCH_LIVE_TEXT)

    send(page, "hello from the console")
    log = transcript(page)
    expect(log.locator(".msg.user").last).to_contain_text("hello from the console")
    expect(log.locator(".stored .msg.assistant").last).to_contain_text(text)
    seen = page.evaluate("window.__seen")
    assert any(0 < len(t) < len(text) and text.startswith(t) for t in seen), seen  # a part, before the whole
    expect(log.locator(".tail .msg")).to_have_count(0)  # everything is in the stored transcript now
    expect(page.get_by_role("button", name="Stop")).to_be_hidden()
    stored = admin.call("session.preview", {"sessionKey": MAIN, "limit": 2})["messages"]
    assert stored[0]["content"] == "hello from the console"
    assert stored[1]["content"][0]["text"] == text
    assert not console.errors, console.errors


def test_a_tool_call_is_a_card_with_its_arguments_result_and_duration(
    console: Console, fake: FakeLLM, node: NodeProcess
) -> None:
    key = fresh_key()
    scripted(
        fake,
        key,
        reply(
            "Checking the laptop.",
            tool_calls=[
                call("laptop__Bash", {"command": "sleep 2; echo hi-from-laptop"}),
                call("laptop__Bash", {"command": "seq 1 1500"}),
            ],
        ),
        reply("The laptop said **hi**."),
    )
    page = console.open(f"#/chat/{key}").page
    expect(page.locator(".chat-key")).to_have_text(key)
    send(page, "use the laptop")
    log = transcript(page)
    cards = log.locator("details.tool")
    # live: the `tool` event shows the calls running before any result exists
    expect(cards.first.locator(".tool-status")).to_have_text("running")
    cards.first.locator("> summary").focus()  # the keyboard on the running card, which is drawn again as it ends
    expect(log.locator(".msg.assistant").last).to_contain_text("The laptop said hi")
    expect(cards).to_have_count(2)
    expect(cards.first.locator(".tool-status")).to_have_text("done")
    expect(cards.first.locator("> summary")).to_be_focused()

    card = cards.first
    expect(card.locator("> summary")).to_contain_text("Bash")
    expect(card.locator("> summary")).to_contain_text("on laptop")
    expect(card.locator(".tool-status")).to_have_text("done")
    expect(card.locator(".tool-duration")).to_have_text(re.compile(r"^\d+(\.\d+)? (ms|s)$"))
    expect(card.locator(".tool-body")).to_be_hidden()  # folded by default
    card.locator("> summary").click()
    expect(card.locator(".tool-args")).to_contain_text('"command": "sleep 2; echo hi-from-laptop"')
    expect(card.locator(".tool-result")).to_contain_text("hi-from-laptop")
    expect(card).to_contain_text("laptop__Bash")
    card.locator("> summary").press("Enter")  # keyboard folds it again
    expect(card.locator(".tool-body")).to_be_hidden()

    long = cards.nth(1)
    long.locator("> summary").click()
    output = long.locator(".tool-output")
    show = long.get_by_role("button", name="Show all")
    expect(show).to_have_attribute("aria-expanded", "false")
    expect(long.locator(".tool-result")).to_contain_text("Cut at 2,000 of")
    assert len(output.text_content() or "") == 2000
    expect(output).not_to_contain_text("1500")
    show.click()
    expect(long.get_by_role("button", name="Show less")).to_have_attribute("aria-expanded", "true")
    expect(output).to_contain_text(re.compile(r"\b1499\s+1500\s*$"))
    long.locator(".tool-details summary").click()  # the command's other fields
    expect(long.locator(".tool-details pre")).to_contain_text('"exitCode": 0')


def test_stop_ends_the_run_and_says_so(console: Console, fake: FakeLLM, admin: GatewayClient) -> None:
    key = fresh_key()
    scripted(fake, key, hang(max_s=30))
    try:
        page = console.open(f"#/chat/{key}").page
        send(page, "take your time")
        stop = page.get_by_role("button", name="Stop")
        expect(stop).to_be_visible()
        expect(page.locator(".live .typing")).to_contain_text("Thinking")
        expect(composer(page)).to_be_editable()  # the composer stays usable during a run
        wait_for(lambda: asked(fake, key))  # the model call hangs
        stop.click()
        note = transcript(page).locator(".note.error")
        expect(note).to_contain_text("Run cancelled by user")
        expect(stop).to_be_hidden()
        assert admin.call("session.stats", {"sessionKey": key})["isProcessing"] is False
    finally:
        fake.release()


def test_a_message_sent_during_a_run_shows_as_queued_until_its_run_starts(console: Console, fake: FakeLLM) -> None:
    key = fresh_key()
    scripted(fake, key, hang(max_s=30, then=reply("first answer")), reply("second answer"))
    try:
        page = console.open(f"#/chat/{key}").page
        send(page, "one")
        expect(page.get_by_role("button", name="Stop")).to_be_visible()
        wait_for(lambda: asked(fake, key))  # the first run hangs in its model call
        send(page, "two")
        log = transcript(page)
        queued = log.locator(".msg.user.pending", has_text="two")
        expect(queued).to_contain_text("Queued (#1)")
        expect(page.locator(".runbar")).to_contain_text("1 queued")
    finally:
        fake.release()
    expect(log.locator(".msg.assistant", has_text="second answer")).to_be_visible()
    expect(log.get_by_text("Queued (#1)")).to_have_count(0)
    # the reply is streamed in the live part first; the stored transcript has it once the read after the run is in
    expect(log.locator(".stored .msg.assistant .md", has_text="second answer")).to_be_visible()
    texts = [t.strip() for t in log.locator(".stored .msg .user-text, .stored .msg.assistant .md").all_text_contents()]
    assert texts == ["one", "first answer", "two", "second answer"], texts
    expect(page.get_by_role("button", name="Stop")).to_be_hidden()


def test_slash_commands_complete_by_keyboard_and_answer_in_the_transcript(
    console: Console, fake: FakeLLM, admin: GatewayClient
) -> None:
    key = fresh_key()
    admin.call("session.patch", {"sessionKey": key, "budget": {"maxTokens": 5000}})
    page = console.open(f"#/chat/{key}").page
    strip = page.locator(".meta-strip")
    expect(strip).to_contain_text("Thinking off")
    expect(strip).to_contain_text("0 / 5,000")  # its tokens against its budget
    expect(strip.get_by_role("meter")).to_have_attribute("max", "5000")
    box = page.get_by_role("textbox", name="Message")  # the composer pops up the commands
    expect(box).to_have_attribute("aria-autocomplete", "list")
    expect(box).to_have_attribute("aria-controls", "chat-commands")
    box.press_sequentially("/st")
    commands = page.get_by_role("listbox", name="Commands")
    expect(commands).to_be_visible()
    expect(page.get_by_role("status").filter(has_text="2 commands")).to_have_count(1)  # said, for a screen reader
    options = commands.get_by_role("option")
    expect(options).to_have_count(2)
    expect(options.first).to_contain_text("/stop")
    expect(options.first).to_have_attribute("aria-selected", "true")
    box.press("ArrowDown")
    status = commands.get_by_role("option", name=re.compile(r"^\/status"))
    expect(status).to_have_attribute("aria-selected", "true")
    expect(box).to_have_attribute("aria-activedescendant", status.get_attribute("id") or "?")
    box.press("Enter")  # picks it
    expect(commands).to_be_hidden()
    expect(box).not_to_have_attribute("aria-activedescendant", re.compile("."))
    expect(box).to_have_value("/status")
    box.press("Enter")  # sends it
    note = transcript(page).locator(".note.command")
    expect(note).to_contain_text(f"Session: {key}")
    expect(note).to_contain_text("Model: openai/gpt-test")

    box.press_sequentially("/thi")
    expect(commands).to_be_visible()
    box.press("Escape")
    expect(commands).to_be_hidden()
    expect(box).to_have_value("/thi")
    box.fill("")
    box.press_sequentially("/thi")
    box.press("Tab")
    expect(box).to_have_value("/think ")
    box.press_sequentially("high")
    box.press("Enter")
    expect(note.last).to_contain_text("Thinking level set to high")
    expect(strip).to_contain_text("Thinking high")
    assert not asked(fake, key)  # commands never reach the model


def test_a_cron_run_opens_read_only(console: Console, fake: FakeLLM, admin: GatewayClient) -> None:
    def respond(request: Any) -> Any:
        return reply("the backups are fine" if "cron:" in system_prompt(request) else "(unrelated)")

    fake.responder = respond
    job = admin.call(
        "cron.add",
        {
            "name": "console-read-only",
            "schedule": {"kind": "at", "atMs": int(time.time() * 1000) + 3_600_000},
            "spec": {"mode": "task", "message": "check the backups"},
        },
    )["job"]
    admin.call("cron.run", {"id": job["id"], "mode": "force"})

    def cron_key() -> str | None:
        for request in fake.requests:
            found = re.search(r"Session key: (agent:main:cron:\S+)", system_prompt(request))
            if found:
                return found.group(1)
        return None

    key = wait_for(cron_key, timeout=20)
    wait_for(lambda: admin.call("session.stats", {"sessionKey": key})["messageCount"] >= 2, timeout=20)
    page = console.open(f"#/chat/{key}").page
    log = transcript(page)
    expect(log).to_contain_text("check the backups")
    expect(log).to_contain_text("the backups are fine")
    expect(page.locator(".chat-sub .badge")).to_have_text("Schedule")
    expect(page.locator(".readonly-note")).to_contain_text("scheduled job")
    expect(composer(page)).to_be_hidden()
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_hidden()


def test_the_session_list_switches_sessions_and_new_session_starts_one(
    console: Console, fake: FakeLLM, admin: GatewayClient
) -> None:
    other = f"agent:main:e2e-list-{uuid.uuid4().hex[:6]}"
    scripted(fake, other, reply("answer in the other session"))
    admin.call("chat.send", {"sessionKey": other, "message": "a message from elsewhere"})
    wait_for(lambda: admin.call("session.stats", {"sessionKey": other})["messageCount"] == 2, timeout=20)

    page = console.open("#/chat").page
    link = page.get_by_role("link", name=re.compile(re.escape(other.split(":")[-1])))
    expect(link).to_contain_text("Client")
    link.click()
    expect(page.locator(".chat-key")).to_have_text(other)
    expect(link).to_have_attribute("aria-current", "page")
    log = transcript(page)
    expect(log).to_contain_text("a message from elsewhere")
    expect(log).to_contain_text("answer in the other session")
    assert "agent%3Amain%3Ae2e-list-" in page.url or "agent:main:e2e-list-" in page.url

    page.get_by_role("button", name="New session").click()
    expect(page).to_have_url(re.compile(r"#/chat/agent(%3A|:)main(%3A|:)console-[0-9a-f]{8}$"))
    expect(log).to_contain_text("No messages yet")
    key = unquote(page.url.split("#/chat/")[1])
    expect(page.locator(".chat-key")).to_have_text(key)
    expect(page.get_by_role("link", name=re.compile("no messages yet"))).to_have_attribute("aria-current", "page")
    scripted(fake, key, reply("a fresh start"))
    send(page, "first words")
    expect(log.locator(".stored .msg.assistant")).to_contain_text("a fresh start")
    assert admin.call("session.preview", {"sessionKey": key})["messageCount"] == 2
    page.go_back()  # the previous session again
    expect(page.locator(".chat-key")).to_have_text(other)
    expect(log).to_contain_text("answer in the other session")


def test_on_a_phone_nothing_scrolls_sideways_and_the_composer_works(
    browser: Any, gateway: GatewayProcess, fake: FakeLLM, admin: GatewayClient
) -> None:
    key = fresh_key()
    long_word = "unbroken" * 60
    scripted(
        fake,
        key,
        reply(
            f"A long line: {long_word}\n\n```\n{'wide code ' * 40}\n```\n\n| a | b |\n|---|---|\n| {'c' * 200} | -- |"
        ),
        reply("small reply"),
    )
    admin.call("chat.send", {"sessionKey": key, "message": f"please {long_word}"})
    wait_for(lambda: admin.call("session.stats", {"sessionKey": key})["messageCount"] == 2, timeout=20)
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        page = context.new_page()
        tab = Console(page, gateway.http).open(f"#/chat/{key}")
        log = transcript(page)
        expect(log).to_contain_text("A long line")
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the page scrolls sideways by {overflow}px"
        assert page.evaluate(SIDEWAYS) <= 0
        # the sessions are behind a toggle
        toggle = page.get_by_role("button", name="Sessions", exact=True)
        expect(page.locator(".sessions")).to_be_hidden()
        toggle.click()
        expect(toggle).to_have_attribute("aria-expanded", "true")
        expect(page.locator(".sessions")).to_be_visible()
        page.keyboard.press("Escape")
        expect(page.locator(".sessions")).to_be_hidden()
        expect(toggle).to_have_attribute("aria-expanded", "false")
        # the composer fits and sends
        box = composer(page)
        box_size = box.bounding_box()
        assert box_size and box_size["x"] >= 0 and box_size["x"] + box_size["width"] <= PHONE["width"]
        send(page, "from the phone")
        expect(log.locator(".stored .msg.assistant").last).to_contain_text("small reply")
        expect(page.get_by_role("button", name="Send", exact=True)).to_be_in_viewport()
        assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
        assert not tab.errors, tab.errors
    finally:
        context.close()


def test_after_a_reconnect_the_transcript_is_read_again(
    console: Console, fake: FakeLLM, admin: GatewayClient, gateway: GatewayProcess
) -> None:
    key = fresh_key()
    scripted(fake, key, hang(max_s=30))
    try:
        console.page.add_init_script(SOCKET_SPY)
        page = console.open(f"#/chat/{key}").page
        log = transcript(page)
        expect(log).to_contain_text("No messages yet")
        # another client starts a run: no event reaches the console before the model says something
        admin.call("chat.send", {"sessionKey": key, "message": "said while the console looked away"})
        wait_for(lambda: admin.call("session.stats", {"sessionKey": key})["messageCount"] == 1)
        page.evaluate("window.__sockets.at(-1).close()")  # the connection drops: the console connects again
        expect(log).to_contain_text("said while the console looked away")  # and reads everything again
        expect(page.locator("#status")).to_have_attribute("data-state", "open")
        stop = page.get_by_role("button", name="Stop")
        expect(stop).to_be_visible()  # session.stats says a run is going
        stop.click()
        expect(log.locator(".note.error")).to_contain_text("Run cancelled by user")
        expect(stop).to_be_hidden()
    finally:
        fake.release()


class HeldSocket:
    """Routes the page's socket through the test. `hold()` drops it; the page's next socket then waits for its
    `connect` answer (the page shows "connecting") and every other request is refused as while not connected, until
    `release()` passes everything through to the gateway again."""

    def __init__(self, page: Page) -> None:
        self.current: Any = None
        self.server: Any = None
        self.held: list[str | bytes] = []
        self.holding = False
        page.route_web_socket(re.compile(r"/ws$"), self.route)

    def route(self, ws: Any) -> None:
        self.current = ws
        self.server = None if self.holding else ws.connect_to_server()
        ws.on_message(self.from_page)
        if self.server:
            self.server.on_message(ws.send)

    def from_page(self, message: str | bytes) -> None:
        if self.server:
            self.server.send(message)
            return
        frame = json.loads(message)
        if frame.get("method") == "connect":
            self.held.append(message)
        else:
            error = {"code": 503, "message": "Not connected to the gateway"}
            self.current.send(json.dumps({"type": "res", "id": frame["id"], "ok": False, "error": error}))

    def hold(self) -> None:
        self.holding = True
        self.current.close()

    def release(self) -> None:
        self.holding = False
        ws = self.current
        self.server = ws.connect_to_server()
        self.server.on_message(ws.send)
        for message in self.held:
            self.server.send(message)
        self.held.clear()


def test_a_chat_opened_while_connecting_reads_its_session_once_connected(
    console: Console, fake: FakeLLM, admin: GatewayClient
) -> None:
    key = fresh_key()
    scripted(fake, key, reply("stored before the console looked"))
    admin.call("chat.send", {"sessionKey": key, "message": "hello from elsewhere"})
    wait_for(lambda: admin.call("session.stats", {"sessionKey": key})["messageCount"] == 2)
    socket = HeldSocket(console.page)
    page = console.open("#/nodes").page
    socket.hold()
    expect(page.locator("#status")).to_have_attribute("data-state", "connecting")
    page.evaluate(f"location.hash = '#/chat/{key}'")  # the chat starts while the socket is still connecting
    log = transcript(page)
    expect(log).to_contain_text("Could not read this session")
    socket.release()
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    expect(log).to_contain_text("hello from elsewhere")  # read again once connected
    expect(log).to_contain_text("stored before the console looked")


def test_the_transcript_follows_the_reply_unless_the_reader_scrolled_up(
    console: Console, fake: FakeLLM, admin: GatewayClient
) -> None:
    key = fresh_key()
    lines = "\n\n".join(f"Line {n} of a long answer." for n in range(1, 61))
    scripted(fake, key, reply(lines), reply("a slow reply " * 30, chunks=6, delay_per_chunk=0.3))
    admin.call("chat.send", {"sessionKey": key, "message": "say a lot"})
    wait_for(lambda: admin.call("session.stats", {"sessionKey": key})["messageCount"] == 2, timeout=20)
    page = console.open(f"#/chat/{key}").page
    log = transcript(page)
    expect(log).to_contain_text("Line 60 of a long answer.")
    wait_for(lambda: page.evaluate(BELOW) < 2)  # opens at the newest message
    send(page, "and more")
    expect(log.locator(".live .live-text")).to_contain_text("a slow reply")
    # the reader scrolls up while it streams: the view stays where they put it
    page.evaluate(SCROLL_UP)
    jump = page.get_by_role("button", name="Jump to the latest")
    expect(log.locator(".stored .msg.assistant").last).to_contain_text("a slow reply " * 29 + "a slow reply")
    expect(jump).to_be_visible()
    assert page.evaluate("document.querySelector('.transcript').scrollTop") == 0
    jump.click()
    expect(jump).to_be_hidden()
    wait_for(lambda: page.evaluate(BELOW) < 2)


def _png(width: int, height: int) -> bytes:
    """A real PNG of one colour (the browser decodes it)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\x30\x60\xc0" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def test_an_image_a_tool_returned_shows_in_its_card(console: Console, fake: FakeLLM, gateway: GatewayProcess) -> None:
    import base64

    key = fresh_key()
    scripted(fake, key, reply(tool_calls=[call("camera__Snap", {})]), reply("That is the view."))
    tools = [{"name": "Snap", "description": "A picture.", "inputSchema": {"type": "object", "properties": {}}}]
    runtime = {
        "hostRole": "execution",
        "hostCapabilities": ["filesystem.list", "filesystem.read", "filesystem.write", "shell.exec"],
        "toolCapabilities": {"Snap": ["shell.exec"]},
    }
    with GatewayClient(gateway.url, timeout=20) as camera:
        camera.connect("node", "camera", token=TOKEN, tools=tools, nodeRuntime=runtime)
        page = console.open(f"#/chat/{key}").page
        send(page, "take a picture")
        invoke = camera.next_event("tool.invoke", timeout=20)["payload"]
        picture = {"type": "image", "data": base64.b64encode(_png(24, 16)).decode(), "mimeType": "image/png"}
        camera.call("tool.result", {"callId": invoke["callId"], "result": {"content": [picture]}})
        expect(transcript(page)).to_contain_text("That is the view.")
    card = transcript(page).locator("details.tool").first
    card.locator("summary").first.click()
    image = card.locator(".msg-image img")
    expect(image).to_have_attribute("src", re.compile(r"^blob:"))  # fetched with the token, not a public URL
    wait_for(lambda: image.evaluate("img => img.complete && img.naturalWidth") == 24)
    assert not console.errors, console.errors
