"""The console's Devices view in a real browser: "Add device" shows a one-time pairing code once, with a countdown and
the command to run (the code is then traded for a real token at the gateway's exchange), the list shows each device's
role, binding and last use, and revoking one asks first, then cuts the device's open socket off."""

from __future__ import annotations

import json
import re
import urllib.request
import uuid
from typing import Any

from orbital.client import GatewayClient
from playwright.sync_api import expect

from tests.browser.conftest import Console
from tests.conftest import wait_for
from tests.e2e.conftest import GatewayProcess


def exchange(gateway: GatewayProcess, code: str) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{gateway.http}/api/v1/pair/exchange",
        data=json.dumps({"code": code}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=15) as response:
        return dict(json.loads(response.read()))


def test_add_device_shows_a_working_code_once_with_the_command(
    console: Console, admin: GatewayClient, gateway: GatewayProcess
) -> None:
    node_id = f"box{uuid.uuid4().hex[:6]}"
    page = console.open("#/devices").page
    page.get_by_role("button", name="Add device").click()
    form = page.get_by_role("dialog", name="Add a device")
    form.get_by_label("Role").select_option("node")
    form.get_by_label("Name").fill("build box")
    form.get_by_label("Node id").fill(node_id)
    form.get_by_role("button", name="Make a pairing code").click()

    shown = page.get_by_role("dialog", name="Pairing code")
    code = shown.locator(".pair-code").inner_text().strip()
    assert re.fullmatch(r"\S{8}", code), code
    expect(shown.get_by_role("timer")).to_have_text(re.compile(r"valid for (10:00|9:[0-5]\d), one use"))
    expect(shown.locator(".pair-command")).to_have_text(
        f"orbital node --pair {code} --url {gateway.url} --id {node_id}"
    )
    shown.get_by_role("button", name="Done").click()
    expect(shown).to_have_count(0)
    assert code not in page.locator("body").inner_text()  # shown once: gone with the dialog

    paired = exchange(gateway, code)  # the code the page showed is the gateway's
    assert paired["role"] == "node"
    assert paired["binding"] == {"nodeId": node_id}
    page.get_by_role("button", name="Refresh").click()
    row = page.get_by_role("row").filter(has_text="build box")
    expect(row).to_contain_text(f"node {node_id}")
    expect(row).to_contain_text("never")  # not connected yet
    assert paired["token"] not in page.locator("body").inner_text()
    assert console.errors == []


def test_the_code_expires_in_front_of_the_user(console: Console) -> None:
    console.page.clock.install()
    page = console.open("#/devices").page
    page.get_by_role("button", name="Add device").click()
    form = page.get_by_role("dialog", name="Add a device")
    form.get_by_label("Role").select_option("client")
    form.get_by_role("button", name="Make a pairing code").click()
    shown = page.get_by_role("dialog", name="Pairing code")
    expect(shown.locator(".pair-command")).to_contain_text("orbital login --pair")
    page.clock.fast_forward("10:05")
    expect(shown.get_by_role("timer")).to_have_text("expired: make a new one")
    expect(shown.locator(".pair-code")).to_have_text("expired")
    expect(shown.get_by_role("button", name="Copy command")).to_be_disabled()


def test_revoke_asks_first_then_cuts_the_device_off(
    console: Console, admin: GatewayClient, gateway: GatewayProcess
) -> None:
    name = f"phone-{uuid.uuid4().hex[:4]}"
    made = admin.call("device.token.create", {"name": name, "role": "client"})
    device = GatewayClient(gateway.url, timeout=20)
    try:
        device.connect("client", f"dev-{name}", token=made["token"])
        page = console.open("#/devices").page
        row = page.get_by_role("row").filter(has_text=name)
        expect(row.get_by_role("cell").nth(1)).to_have_text("client")
        expect(row.locator("td.last-seen")).not_to_have_text("never")  # it connected: seen

        row.get_by_role("button", name=f"Revoke {name}").click()
        confirm = page.get_by_role("dialog", name=f"Revoke {name}?")
        confirm.get_by_role("button", name="Cancel").click()
        listed = {t["tokenId"]: t for t in admin.call("device.token.list")["tokens"]}
        assert listed[made["tokenId"]]["revoked"] is False

        row.get_by_role("button", name=f"Revoke {name}").click()
        page.get_by_role("dialog", name=f"Revoke {name}?").get_by_role("button", name="Revoke").click()
        expect(page.get_by_role("status").filter(has_text=f"{name} revoked")).to_be_visible()
        expect(row).to_contain_text("revoked")
        expect(row.get_by_role("button", name=f"Revoke {name}")).to_have_count(0)
        listed = {t["tokenId"]: t for t in admin.call("device.token.list")["tokens"]}
        assert listed[made["tokenId"]]["revoked"] is True

        def cut_off() -> bool:
            try:
                device.call("sessions.list", {}, timeout=2)
            except TimeoutError:
                return False
            except Exception:
                return True  # the socket was closed
            return False

        wait_for(cut_off, timeout=30, interval=0.2)
    finally:
        device.close()
    assert made["token"] not in page.locator("body").inner_text()
