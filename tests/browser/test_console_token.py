"""The console's address as `make dev` prints it, `http://127.0.0.1:8765/#token=…`: opening it signs the tab in and
the token leaves the address bar at once; it is in no request the page makes."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from tests.browser.conftest import TOKEN


def test_opening_the_address_with_the_token_in_its_fragment_signs_in_and_clears_it(console: Any) -> None:
    page = console.page
    page.goto(f"{console.base}/#token={TOKEN}")
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    expect(page.get_by_role("dialog", name="Connect to Orbital")).to_have_count(0)
    assert "token" not in page.url and TOKEN not in page.url
    assert TOKEN not in page.evaluate("location.href + history.state")
    # in the tab's token store, as a token typed into the dialog would be
    assert page.evaluate("sessionStorage.getItem('orbital.console.token')") == TOKEN
    # the views route as usual from the cleaned address: the chat
    expect(page.get_by_role("form", name="Send a message")).to_be_visible()
    assert not [url for url in console.requests if TOKEN in url]


def test_a_wrong_token_in_the_fragment_asks_for_the_right_one(console: Any) -> None:
    page = console.page
    page.goto(f"{console.base}/#token=not-the-token-0123456789")
    dialog = page.get_by_role("dialog", name="Connect to Orbital")
    expect(dialog).to_be_visible()
    assert "not-the-token" not in page.url
    dialog.get_by_label("Gateway token").fill(TOKEN)
    dialog.get_by_role("button", name="Connect").click()
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
