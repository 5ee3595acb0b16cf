"""The console's frame in a real browser: served by the gateway at `/`, asking for the token and keeping it only in
the tab, connecting without one on a loopback gateway that has none, phone-sized and keyboard-usable, both themes,
and nothing loaded from anywhere but the gateway."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import PHONE, SOCKET_SPY, TOKEN, Console
from tests.e2e.conftest import GatewayProcess


def test_the_page_and_its_files_need_no_token_and_forbid_anything_foreign(gateway: GatewayProcess) -> None:
    with urllib.request.urlopen(f"{gateway.http}/") as resp:
        page = resp.read().decode()
        policy = resp.headers["Content-Security-Policy"]
    assert '<meta name="viewport"' in page and 'src="console/app.js"' in page
    assert "default-src 'none'" in policy and "script-src 'self'" in policy and "connect-src 'self';" in policy
    assert "img-src 'self' data: blob:;" in policy and "frame-ancestors 'none'" in policy
    with urllib.request.urlopen(f"{gateway.http}/console/config.json") as resp:
        config = json.loads(resp.read())
    assert config["tokenRequired"] is True and config["wsUrl"] is None
    assert any(c["usage"].startswith("/stop") for c in config["commands"])
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{gateway.http}/console/../pyproject.toml")
    assert missing.value.code == 404


def test_asks_for_the_token_keeps_it_in_the_tab_only_and_refuses_a_wrong_one(console: Console) -> None:
    page = console.page
    page.goto(console.base + "/")
    dialog = page.get_by_role("dialog", name="Connect to Orbital")
    dialog.get_by_label("Gateway token").fill("not-the-token")
    dialog.get_by_role("button", name="Connect").click()
    expect(page.get_by_role("dialog", name="Connect to Orbital").get_by_role("alert")).to_contain_text("not accepted")
    page.get_by_role("dialog").get_by_label("Gateway token").fill(TOKEN)
    page.get_by_role("dialog").get_by_role("button", name="Connect").click()
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    assert page.evaluate("JSON.stringify(localStorage)").find(TOKEN) == -1
    assert page.evaluate(f"sessionStorage.getItem('orbital.console.token') === {json.dumps(TOKEN)}")
    assert TOKEN not in page.url
    page.reload()  # the same tab keeps it: no second question
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    page.get_by_role("button", name="Forget token").click()
    expect(page.get_by_role("dialog", name="Connect to Orbital")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('orbital.console.token')") is None


@pytest.fixture
def tokenless(tmp_path: Path) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(tmp_path / "data").start()
    yield gw
    gw.stop()


def test_a_loopback_gateway_without_a_token_connects_straight_away(browser: Any, tokenless: GatewayProcess) -> None:
    context = browser.new_context()
    try:
        page = context.new_page()
        tab = Console(page, tokenless.http)
        tab.open(token=None)
        expect(page.get_by_role("dialog")).to_have_count(0)
        expect(page.get_by_role("button", name="Forget token")).to_be_hidden()
        assert all(url.startswith((tokenless.http, "ws://127.0.0.1", "data:")) for url in tab.requests)
    finally:
        context.close()


def test_fits_a_phone_and_every_section_is_reachable_by_keyboard(browser: Any, gateway: GatewayProcess) -> None:
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        page = context.new_page()
        tab = Console(page, gateway.http).open()
        for number, view in enumerate(
            ("chat", "nodes", "workspace", "schedules", "channels", "settings", "devices", "mcp", "agents"), start=1
        ):
            page.keyboard.press(f"Alt+{number}")
            expect(page.locator("#view")).to_have_attribute("data-view", view)
            expect(page.locator(f'nav a[data-view="{view}"]')).to_have_attribute("aria-current", "page")
            page.wait_for_load_state("networkidle")
            overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"{view} scrolls sideways by {overflow}px on a phone"
        assert not tab.errors, tab.errors
    finally:
        context.close()


def test_switches_between_a_light_and_a_dark_theme_and_remembers_it(console: Console) -> None:
    page = console.open().page
    start = page.evaluate("document.documentElement.dataset.theme")
    page.locator("#theme").click()
    other = "dark" if start == "light" else "light"
    expect(page.locator("html")).to_have_attribute("data-theme", other)
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    page.reload()
    expect(page.locator("html")).to_have_attribute("data-theme", other)
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == background


def test_a_page_replaced_by_a_newer_socket_of_its_client_says_so_and_stays_off(
    console: Console, gateway: GatewayProcess
) -> None:
    from orbital.client import GatewayClient

    console.page.add_init_script(SOCKET_SPY)
    page = console.open().page
    first = connect_id(page)
    page.reload()
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    current = connect_id(page)
    assert first.startswith("console-") and current != first  # every page load has an id of its own
    with GatewayClient(gateway.url, timeout=10) as intruder:
        intruder.connect("client", current, token=TOKEN)
        expect(page.locator("#status")).to_have_attribute("data-state", "closed")
    expect(page.locator("#status")).to_have_attribute("title", re.compile("[Rr]eplaced"))
    assert page.evaluate("window.__sockets.length") == 1  # it did not take the id back


def connect_id(page: Any) -> str:
    """The client id this page load sent in `connect`."""
    sent = [json.loads(text) for text in page.evaluate("window.__sent")]
    return str(next(f for f in sent if f.get("method") == "connect")["params"]["client"]["id"])
