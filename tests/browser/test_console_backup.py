"""The Backups card in the console's Settings, in a real browser against a real `orbital dev`: the last backup, its
size and the next one as `backup.status` tells them, "Back up now" making a real backup through `backup.run`, the
next one once `backup.every` is set, and on a gateway that has no local backups (AWS) what to use instead."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from orbital.client import GatewayClient
from playwright.sync_api import expect

from tests.browser.conftest import Console
from tests.conftest import Rpc


def format_bytes(n: float) -> str:
    """The console's formatBytes (ui.js)."""
    units = ["B", "KB", "MB", "GB"]
    i = 0
    while n >= 1024 and i < len(units) - 1:
        n /= 1024
        i += 1
    return f"{n:.1f} {units[i]}" if i else f"{int(n)} B"


@pytest.fixture
def no_schedule(admin: GatewayClient) -> Iterator[GatewayClient]:
    admin.call("config.set", {"path": "backup"})
    yield admin
    admin.call("config.set", {"path": "backup"})


def test_back_up_now_makes_a_backup_and_the_card_shows_it(console: Console, no_schedule: GatewayClient) -> None:
    admin = no_schedule
    before = admin.call("backup.status", {})
    page = console.open("#/settings").page
    card = page.get_by_role("region", name="Backups")
    expect(card).to_contain_text("Automatic backups are off: set backup.every")
    if before["last"] is None:
        expect(card).to_contain_text("None yet.")

    card.get_by_role("button", name="Back up now").click()
    expect(page.locator(".toast").filter(has_text="Backed up:")).to_be_visible()
    status = admin.call("backup.status", {})
    last = status["last"]
    assert status["count"] == before["count"] + 1
    assert last["verified"] is True
    facts = card.locator("dl.backup-facts")
    expect(facts).to_have_attribute("data-last", last["name"])
    expect(card.locator(".backup-name")).to_have_text(last["name"])
    expect(card.locator(".backup-size")).to_have_text(format_bytes(last["sizeBytes"]))
    expect(card).to_contain_text(f"{last['items']} items, {last['objects']} files · verified")
    expect(card).to_contain_text(f"{status['count']} of at most {status['keep']}")
    expect(card).to_contain_text(status["dir"])
    assert console.errors == []


def test_the_card_shows_when_the_next_backup_is_due(console: Console, no_schedule: GatewayClient) -> None:
    admin = no_schedule
    last = admin.call("backup.run", {})  # so the next one is due a day after it (with none yet it would be now)
    page = console.open("#/settings").page
    card = page.get_by_role("region", name="Backups")
    facts = card.locator("dl.backup-facts")
    expect(facts).to_have_attribute("data-last", last["name"])
    expect(facts).to_have_attribute("data-next", "")

    admin.call("config.set", {"path": "backup.every", "value": "24h"})
    due = last["at"] + 24 * 3600 * 1000
    assert admin.call("backup.status", {})["next"] == due
    page.get_by_role("button", name="Refresh").click()  # the card reads backup.status again with the configuration
    expect(facts).to_have_attribute("data-next", str(due))
    expect(card).to_contain_text("Every 24h.")
    expect(card).not_to_contain_text("Automatic backups are off")
    assert console.errors == []


def route_backup_status(page: Any, answer: dict[str, Any]) -> list[str]:
    """Route the page's socket through the test: the answer to `backup.status` is replaced by `answer` (what a
    gateway on AWS says). Returns the methods the page called, as they come."""
    asked: set[str] = set()
    called: list[str] = []

    def route(ws: Any) -> None:
        server = ws.connect_to_server()

        def from_page(message: str | bytes) -> None:
            frame = json.loads(message)
            if frame.get("type") == "req":
                called.append(frame.get("method"))
                if frame.get("method") == "backup.status":
                    asked.add(frame["id"])
            server.send(message)

        def from_server(message: str | bytes) -> None:
            frame = json.loads(message)
            if frame.get("type") == "res" and frame.get("id") in asked:
                frame = {"type": "res", "id": frame["id"], "ok": True, "payload": answer}
                message = json.dumps(frame)
            ws.send(message)

        ws.on_message(from_page)
        server.on_message(from_server)

    page.route_web_socket(re.compile(r"/ws$"), route)
    return called


def test_on_aws_the_card_says_what_to_use_instead(console: Console, rpc: Rpc) -> None:
    """A gateway on AWS has no local backups: the card shows its answer (`backup.status` through the dispatcher on
    the AWS path, under moto) and the way to restore there, and offers no button."""
    answer = rpc.call("backup.status", {})
    assert answer["available"] is False
    called = route_backup_status(console.page, answer)
    page = console.open("#/settings").page
    card = page.get_by_role("region", name="Backups")
    reason = str(answer["reason"])
    expect(card.locator(".backup-reason")).to_contain_text(reason[1:])
    expect(card).to_contain_text("point-in-time recovery")
    expect(card).to_contain_text("orbital export --stack NAME")
    expect(card).to_contain_text("README")
    expect(card.get_by_role("button", name="Back up now")).to_have_count(0)
    assert "backup.status" in called
    assert "backup.run" not in called
    assert console.errors == []


def test_a_device_that_may_only_read_sees_the_backups_and_is_told_it_may_not_take_one(
    console: Console, no_schedule: GatewayClient
) -> None:
    admin = no_schedule
    name = f"viewer-{uuid.uuid4().hex[:4]}"
    made = admin.call("device.token.create", {"name": name, "role": "viewer"})
    try:
        admin.call("backup.run", {})
        before = admin.call("backup.status", {})
        page = console.open("#/settings", token=made["token"]).page
        card = page.get_by_role("region", name="Backups")
        expect(card.locator("dl.backup-facts")).to_have_attribute("data-last", before["last"]["name"])  # read: yes

        card.get_by_role("button", name="Back up now").click()
        refusal = card.get_by_role("alert")
        expect(refusal).to_contain_text("Could not back up")
        expect(refusal).to_contain_text("needs scope admin")
        assert admin.call("backup.status", {})["count"] == before["count"]  # nothing was taken
        expect(card.get_by_role("button", name="Back up now")).to_be_enabled()  # and it may be tried again
    finally:
        admin.call("device.token.revoke", {"tokenId": made["tokenId"]})
