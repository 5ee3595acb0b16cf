"""The console's Channels view in a real browser: pending pairing requests approved and denied (checked through the
protocol), a channel bridge's account stopped through its socket, and the Telegram bot setup storing the token
write-only and showing what the gateway answers when Telegram cannot be reached."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from orbital.client import GatewayClient
from playwright.sync_api import expect

from tests.browser.conftest import TOKEN, Console
from tests.e2e.conftest import GatewayProcess


@pytest.fixture
def bridge(gateway: GatewayProcess) -> Iterator[tuple[GatewayClient, str]]:
    """A channel bridge (a `channel`-mode socket) on a channel of its own, whose DM policy is the default: pairing."""
    name = f"chat{uuid.uuid4().hex[:6]}"
    with GatewayClient(gateway.url, timeout=20) as socket:
        socket.connect("channel", f"bridge-{name}", token=TOKEN, client={"channel": name, "accountId": "main"})
        yield socket, name


def ask(bridge: tuple[GatewayClient, str], sender: str, name: str, text: str) -> None:
    socket, channel = bridge
    answer = socket.call(
        "channel.inbound",
        {
            "channel": channel,
            "accountId": "main",
            "peer": {"kind": "dm", "id": sender, "name": name},
            "sender": {"id": sender, "name": name},
            "message": {"id": uuid.uuid4().hex, "text": text},
        },
    )
    assert answer["status"] == "pending_pairing"


def test_approving_a_pairing_request_lets_the_sender_in(console: Console, admin: GatewayClient, bridge: Any) -> None:
    _, channel = bridge
    ask(bridge, "+15550101", "Ann", "hi, it's Ann: may I talk to the agent?")
    page = console.open("#/channels").page
    requests = page.get_by_role("region", name="Pairing requests")
    item = requests.get_by_role("listitem").filter(has_text="+15550101")
    expect(item).to_contain_text("Ann")
    expect(item).to_contain_text("may I talk to the agent?")
    expect(item).to_contain_text(channel)
    item.get_by_role("button", name="Approve Ann").click()
    expect(item).to_have_count(0)
    expect(page.get_by_role("status").filter(has_text="may now talk to the agent")).to_be_visible()
    assert f"{channel}:+15550101" not in admin.call("pair.list")["pairs"]
    assert "+15550101" in admin.call("config.get", {"path": f"channels.{channel}.allowFrom"})["value"]


def test_denying_a_pairing_request_drops_it_and_a_stale_one_says_why(
    console: Console, admin: GatewayClient, bridge: Any
) -> None:
    _, channel = bridge
    ask(bridge, "+15550202", "Bob", "let me in")
    ask(bridge, "+15550303", "Cy", "me too")
    page = console.open("#/channels").page
    requests = page.get_by_role("region", name="Pairing requests")
    bob = requests.get_by_role("listitem").filter(has_text="+15550202")
    bob.get_by_role("button", name="Deny Bob").click()
    expect(bob).to_have_count(0)
    cy = requests.get_by_role("listitem").filter(has_text="+15550303")
    expect(cy.get_by_role("button", name="Approve Cy")).to_be_focused()  # the keyboard goes on with the next one
    pairs = admin.call("pair.list")["pairs"]
    assert f"{channel}:+15550202" not in pairs and f"{channel}:+15550303" in pairs
    assert admin.call("config.get", {"path": f"channels.{channel}.allowFrom"}).get("value") in (None, [])

    # decided elsewhere meanwhile: the gateway's refusal is shown and the list catches up
    admin.call("pair.reject", {"channel": channel, "senderId": "+15550303"})
    cy.get_by_role("button", name="Approve Cy").click()
    expect(page.get_by_role("alert").filter(has_text="No pending pairing")).to_be_visible()
    expect(cy).to_have_count(0)
    expect(requests).to_contain_text("No one is waiting")
    expect(requests.get_by_role("heading", name="Pairing requests")).to_be_focused()  # none left: the section's heading


def test_a_bridge_account_is_listed_and_stopped_through_its_socket(console: Console, bridge: Any) -> None:
    socket, channel = bridge
    page = console.open("#/channels").page
    accounts = page.get_by_role("region", name="Accounts")
    row = accounts.get_by_role("listitem").filter(has_text=channel)
    expect(row.get_by_text("connected", exact=True)).to_be_visible()
    row.get_by_role("button", name=f"Stop {channel} main").click()
    page.get_by_role("dialog", name=f"Stop {channel} main?").get_by_role("button", name="Stop").click()
    control = socket.next_event("channel.control")["payload"]
    assert (control["action"], control["channel"], control["accountId"]) == ("stop", channel, "main")
    expect(row.get_by_role("button", name=f"Start {channel} main")).to_be_disabled()  # in flight
    socket.call("channel.control.result", {"callId": control["callId"], "ok": True})
    expect(page.get_by_role("status").filter(has_text=f"Stopped: {channel} main")).to_be_visible()
    expect(row.get_by_role("button", name=f"Start {channel} main")).to_be_enabled()
    expect(row.get_by_role("button", name=f"Stop {channel} main")).to_be_focused()  # drawn again, focus kept


def test_telegram_setup_stores_the_token_write_only_and_shows_the_gateway_s_answer(
    console: Console, admin: GatewayClient
) -> None:
    token = "123456789:AAF" + uuid.uuid4().hex  # the shape of a bot token; Telegram is out of reach here
    admin.call("config.set", {"path": "channels.telegram.apiBaseUrl", "value": "http://127.0.0.1:9"})
    try:
        page = console.open("#/channels").page
        setup = page.get_by_role("region", name="Telegram bot")
        expect(setup.get_by_label("Account id")).to_have_value("default")
        setup.get_by_label("Bot token").fill(token)
        setup.get_by_role("button", name="Set up").click()
        # no webhook URL and no public base URL: the gateway says what to set, and the page explains it
        outcome = setup.get_by_role("alert")
        expect(outcome).to_contain_text("The bot token is stored")
        expect(outcome).to_contain_text("Telegram needs a public URL for its webhook")
        expect(outcome).to_contain_text("channels.telegram.publicBaseUrl")
        expect(setup.get_by_label("Bot token")).to_have_value("")
        stored = admin.call("config.get", {"path": "channels.telegram.accounts.default.botToken"})
        assert stored["value"] == "***"
        assert token not in page.content()
        expect(setup).to_contain_text("A token is stored for this account")

        setup.get_by_label("Webhook URL").fill("https://bot.example.org/channels/telegram/default/webhook")
        setup.get_by_role("button", name="Set up").click()
        expect(setup.get_by_role("alert")).to_contain_text("cannot reach the Bot API")
        expect(setup.get_by_role("alert")).to_contain_text("Setting up the bot failed")
        accounts = page.get_by_role("region", name="Accounts")
        expect(accounts.get_by_role("listitem").filter(has_text="telegram")).to_contain_text("cannot reach the Bot API")

        setup.get_by_role("button", name="Check status").click()
        expect(setup.get_by_role("alert")).to_contain_text("Telegram default: not connected")
        setup.get_by_role("button", name="Remove").click()
        page.get_by_role("dialog", name="Remove Telegram default?").get_by_role("button", name="Remove").click()
        expect(setup.get_by_role("alert")).to_contain_text("Removing the bot failed")
        assert token not in page.content()
        assert not page.evaluate("[...document.querySelectorAll('input')].some(i => i.value.includes('AAF'))")
        assert not console.errors, console.errors
    finally:
        admin.call("config.set", {"path": "channels.telegram"})


def test_a_bad_account_id_is_refused_before_anything_is_sent(console: Console, admin: GatewayClient) -> None:
    page = console.open("#/channels").page
    setup = page.get_by_role("region", name="Telegram bot")
    setup.get_by_label("Account id").fill("my.bot")
    setup.get_by_label("Bot token").fill("123456789:AAFshouldnotbestoredanywhere")
    setup.get_by_role("button", name="Set up").click()
    expect(setup.get_by_role("alert")).to_contain_text("only letters, digits, _ and -")
    assert "value" not in admin.call("config.get", {"path": "channels.telegram.accounts.my"})
