"""The console's Agents view in a real browser, against a real `orbital dev`: the agents are listed with their
sessions, "Clone" asks the new id (refusing a bad one and one in use), clones the agent inside the gateway and shows
what was copied; the clone holds the original's memory."""

from __future__ import annotations

import uuid

from orbital.client import GatewayClient
from playwright.sync_api import expect

from tests.browser.conftest import Console
from tests.support.agent import follow_run
from tests.support.fake_llm import FakeLLM, reply

MEMORY = "# Memory\n\n- The user likes green tea.\n"


def test_clone_an_agent_from_the_console(console: Console, admin: GatewayClient, fake: FakeLLM) -> None:
    source = f"src{uuid.uuid4().hex[:6]}"
    twin = f"copy{uuid.uuid4().hex[:6]}"
    admin.call("workspace.write", {"path": "MEMORY.md", "content": MEMORY, "agentId": source})
    fake.script(reply("Hello."))
    started = admin.call("chat.send", {"sessionKey": f"agent:{source}:main", "message": "hello from the test"})
    assert follow_run(admin, started["runId"])[-1]["state"] == "final"
    admin.call("config.set", {"path": "agents.list", "value": [{"id": "main"}, {"id": source}]})

    page = console.open("#/agents").page
    expect(page.get_by_role("heading", name="Agents", level=1)).to_be_visible()
    row = page.get_by_role("row").filter(has_text=source)
    expect(row.get_by_role("cell").nth(1)).to_have_text("1")  # its one session
    expect(page.get_by_role("row").filter(has_text="main").first).to_contain_text("default")

    row.get_by_role("button", name=f"Clone {source}").click()
    form = page.get_by_role("dialog", name=f"Clone {source}")
    form.get_by_label("New agent id").fill("Not An Id")
    form.get_by_role("button", name="Clone").click()
    expect(form.get_by_role("alert")).to_contain_text("lowercase letters")
    form.get_by_label("New agent id").fill("main")
    form.get_by_role("button", name="Clone").click()
    expect(form.get_by_role("alert")).to_contain_text("main already exists")
    form.get_by_label("New agent id").fill(twin)
    form.get_by_role("button", name="Clone").click()
    expect(form).to_have_count(0)

    result = page.locator(".agents-result")
    expect(result).to_contain_text(f"{twin} is a copy of {source}: 1 session")
    expect(result.get_by_role("link", name=f"Chat with {twin}")).to_have_attribute(
        "href", f"#/chat/agent%3A{twin}%3Amain"
    )
    expect(page.get_by_role("row").filter(has_text=twin).get_by_role("cell").nth(1)).to_have_text("1")

    # the gateway holds the clone, with the original's memory; the original is still there as it was
    assert admin.call("workspace.read", {"path": "MEMORY.md", "agentId": twin})["content"] == MEMORY
    assert admin.call("workspace.read", {"path": "MEMORY.md", "agentId": source})["content"] == MEMORY
    ids = [e["id"] for e in admin.call("config.get", {"path": "agents.list"})["value"]]
    assert ids == ["main", source, twin]

    # cloning onto an id in use needs "replace", and a second confirmation
    page.get_by_role("row").filter(has_text=source).get_by_role("button", name=f"Clone {source}").click()
    form = page.get_by_role("dialog", name=f"Clone {source}")
    form.get_by_label("New agent id").fill(twin)
    form.get_by_label("Replace an agent that already has this id").check()
    form.get_by_role("button", name="Clone").click()
    confirm = page.get_by_role("dialog", name=f"Replace {twin}?")
    confirm.get_by_role("button", name="Replace").click()
    expect(result).to_contain_text(f"{twin} is a copy of {source}")
    assert console.errors == []
