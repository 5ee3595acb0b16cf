"""The console shows spend in dollars, in a real browser against a real gateway with the scripted model priced by
`spend.prices`: the `spend.alert` event as a notice, the Settings card (used / reserved / limit per period and scope,
the top sessions), and the Chat strip's spend beside the tokens."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from orbital.client import GatewayClient
from playwright.sync_api import expect

from tests.browser.conftest import Console
from tests.conftest import wait_for
from tests.support.fake_llm import FakeLLM, reply

PRICE = {"inputPerMTok": 100, "outputPerMTok": 100}  # the scripted model reports a few dozen tokens a call


@pytest.fixture
def priced(admin: GatewayClient, fake: FakeLLM) -> Iterator[GatewayClient]:
    admin.call("config.set", {"path": "spend", "value": {"prices": {"openai/gpt-test": PRICE}, "limits": {"daily": 5}}})
    admin.call("config.set", {"path": "spend.alertAt", "value": 0.0001})  # the first turn ($0.002) crosses it
    yield admin
    admin.call("config.set", {"path": "spend"})


def _spent(admin: GatewayClient, key: str) -> dict[str, Any]:
    """Send one message to `key` and wait until its spend is settled (the session is among the day's top)."""
    admin.call("chat.send", {"sessionKey": key, "message": "hello"})

    def settled() -> dict[str, Any] | None:
        status: dict[str, Any] = admin.call("spend.status", {"sessionKey": key})
        tops = status["top"]["sessions"]
        return status if any(t["sessionKey"] == key and t["usedUsd"] > 0 for t in tops) else None

    found: dict[str, Any] = wait_for(settled, timeout=30)
    return found


def test_the_alert_the_card_and_the_strip_show_dollars(console: Console, priced: GatewayClient, fake: FakeLLM) -> None:
    fake.responder = lambda request: reply("fine")
    key = f"agent:main:console-spend-{uuid.uuid4().hex[:6]}"
    page = console.open("#/settings").page
    card = page.get_by_role("region", name="Spend")
    daily = card.locator('tr[data-period="daily"][data-scope="global"]')
    expect(daily).to_contain_text("$0.00")  # a fresh gateway: nothing spent yet
    expect(card.locator(".spend-top").filter(has_text="Top sessions")).to_contain_text("None this period.")

    status = _spent(priced, key)
    notice = page.locator(".toast").filter(has_text="Spend alert")  # the event, as it came
    expect(notice).to_contain_text("All runs has used $")
    expect(notice).to_contain_text("of its $5.00 daily cap")

    page.get_by_role("button", name="Refresh").click()  # the card reads spend.status again
    used = next(p for p in status["periods"] if p["period"] == "daily" and p["scope"] == "global")["usedUsd"]
    expect(daily).to_contain_text("All runs")
    expect(daily).to_contain_text(f"${used:.2f}")
    expect(daily).to_contain_text("$5.00")
    expect(daily.get_by_role("meter")).to_have_attribute("max", "5")
    monthly = card.locator('tr[data-period="monthly"][data-scope="global"]')
    expect(monthly).to_contain_text("no cap")
    expect(card.get_by_role("caption")).to_contain_text("In USD, periods in UTC")
    tops = card.locator(".spend-top").filter(has_text="Top sessions")
    expect(tops.get_by_role("listitem").filter(has_text=key)).to_contain_text("$")

    page.goto(f"{console.base}/#/chat/{key}")
    strip = page.locator(".meta-strip")
    expect(strip).to_contain_text(re.compile(r"Spend today\s*\$\d+\.\d\d / \$5\.00"))
    expect(strip).to_contain_text(re.compile(r"Spend this month\s*\$\d+\.\d\d · no cap"))
    assert console.errors == []


def test_a_spend_cap_is_set_in_dollars_from_settings(console: Console, admin: GatewayClient) -> None:
    try:
        page = console.open("#/settings").page
        limits = page.get_by_role("region", name="Limits")
        limits.get_by_label("Dollars per day").fill("4.5")
        limits.get_by_role("button", name="Save").click()
        expect(page.get_by_role("status").filter(has_text="Saved: Dollars per day.")).to_be_visible()
        assert admin.call("config.get", {"path": "spend.limits"})["value"] == {"daily": 4.5}
        page.get_by_role("button", name="Refresh").click()
        daily = page.get_by_role("region", name="Spend").locator('tr[data-period="daily"][data-scope="global"]')
        expect(daily).to_contain_text("$4.50")  # the card shows the new cap
    finally:
        admin.call("config.set", {"path": "spend"})
