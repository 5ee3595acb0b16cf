"""The console's Nodes view in a real browser: a real `orbital node` with its tools and host facts, a tool run from
the form generated from its JSON Schema, required fields enforced in the browser, a node's log, the empty state, and
a scripted node (a plain GSV node socket) to check exactly which typed arguments the form sends and how results
(text, JSON, images, errors) are shown."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from orbital.client import GatewayClient
from playwright.sync_api import expect

from tests.browser.conftest import PHONE, TOKEN, Console
from tests.conftest import wait_for
from tests.e2e.conftest import GatewayProcess, NodeProcess

# a 1x1 PNG
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)

SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><a href="javascript:alert(1)"><rect width="9" height="9"/></a></svg>'

GADGET_TOOLS = [
    {
        "name": "Shape",
        "description": "A tool with one parameter of every kind. Used by the console's tests.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "title": {"type": "string", "description": "Any text."},
                "count": {"type": "integer", "minimum": 1, "description": "How many."},
                "ratio": {"type": "number"},
                "loud": {"type": "boolean"},
                "mode": {"type": "string", "enum": ["fast", "slow"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "options": {"type": "object"},
            },
            "required": ["title", "mode"],
        },
    },
    {"name": "Snap", "description": "Returns an image.", "inputSchema": {"type": "object", "properties": {}}},
]
GADGET_RUNTIME = {
    "hostRole": "execution",
    "hostCapabilities": ["filesystem.list", "filesystem.read", "filesystem.write", "shell.exec"],
    "hostOs": "plan9",
    "toolCapabilities": {"Shape": ["shell.exec"], "Snap": ["filesystem.read"]},
}


@pytest.fixture
def gadget(gateway: GatewayProcess) -> Iterator[GatewayClient]:
    """A scripted node `gadget`: the test reads the `tool.invoke` the gateway sends it and answers it by hand."""
    with GatewayClient(gateway.url, timeout=20) as c:
        c.connect("node", "gadget", token=TOKEN, tools=GADGET_TOOLS, nodeRuntime=GADGET_RUNTIME)
        yield c


def open_tool(page: Any, tool: str) -> Any:
    """Unfold a tool's panel on the node page; returns the panel."""
    panel = page.locator(f'details[data-tool="{tool}"]')
    panel.locator("summary").click()
    expect(panel.get_by_role("form")).to_be_visible()
    return panel


def test_a_connected_node_shows_its_tools_and_host_facts(
    console: Console, node: NodeProcess, admin: GatewayClient
) -> None:
    facts = next(n for n in admin.call("skills.status", {})["nodes"] if n["nodeId"] == "laptop")
    page = console.open("#/nodes").page
    card = page.get_by_role("article", name="Node laptop")
    expect(card).to_contain_text("7 tools: Bash, Process, Read, Write, Edit, Glob, Grep")
    expect(card).to_contain_text(facts["hostOs"])
    expect(card).to_contain_text("shell.exec")
    natives = page.locator("details.native-tools")
    expect(natives.locator("summary")).to_have_text(re.compile(r"Native tools \(12\)"))
    expect(natives).not_to_have_attribute("open", "")
    expect(natives.get_by_text("gsv__ReadFile")).to_be_hidden()
    natives.locator("summary").click()
    expect(natives.get_by_text("gsv__ReadFile")).to_be_visible()

    card.get_by_role("link", name="laptop").click()
    expect(page).to_have_url(re.compile(r"#/nodes/laptop$"))
    host = page.get_by_role("region", name="Host")
    expect(host).to_contain_text(facts["hostOs"])
    for capability in facts["hostCapabilities"]:
        expect(host).to_contain_text(capability)
    expect(host.locator("summary")).to_contain_text(f"Environment variables ({len(facts['hostEnv'])}")
    tools = page.get_by_role("region", name="Tools")
    expect(tools.locator("details.tool summary strong")).to_have_text(
        ["Bash", "Process", "Read", "Write", "Edit", "Glob", "Grep"]
    )
    page.get_by_role("navigation", name="Breadcrumbs").get_by_role("link", name="Nodes").click()
    expect(page.get_by_role("article", name="Node laptop")).to_be_visible()
    assert not console.errors, console.errors


def test_runs_bash_from_its_generated_form_and_shows_the_output(console: Console, node: NodeProcess) -> None:
    page = console.open("#/nodes/laptop").page
    bash = open_tool(page, "laptop__Bash")
    expect(bash.get_by_label("command")).to_have_attribute("required", "")
    expect(bash.get_by_label("background")).to_have_attribute("type", "checkbox")
    expect(bash.get_by_label("timeout")).to_have_attribute("type", "number")
    bash.get_by_label("command").fill("sleep 1; echo console-$((6 * 7))")
    run = bash.get_by_role("button", name="Run Bash")
    run.click()
    expect(run).to_be_disabled()
    result = bash.locator(".tool-result")
    expect(result.locator("pre.output")).to_have_text("console-42\n")
    expect(result).to_contain_text("completed · exit 0")
    expect(result.locator(".result-head")).to_contain_text(re.compile(r"\d+(\.\d)? (ms|s)"))
    expect(run).to_be_enabled()

    # a failing command is shown as such, with its exit code
    bash.get_by_label("command").fill("echo oops; exit 3")
    run.click()
    expect(result).to_contain_text("failed · exit 3")
    expect(result.locator("pre.output")).to_have_text("oops\n")

    # an error from the node comes back as the gateway's message
    read = open_tool(page, "laptop__Read")
    read.get_by_label("path").fill("no-such-file.txt")
    read.get_by_role("button", name="Run Read").click()
    expect(read.locator(".tool-result").get_by_role("alert")).to_contain_text("no-such-file.txt")
    expect(read.locator(".tool-result")).to_contain_text("failed")
    assert not console.errors, console.errors


def test_a_required_field_left_empty_is_refused_in_the_browser(console: Console, node: NodeProcess) -> None:
    page = console.open("#/nodes/laptop").page
    grep = open_tool(page, "laptop__Grep")
    grep.get_by_label("path").fill(".")
    calls_before = node.log_file.read_text().count('"tool": "Grep"')
    grep.get_by_role("button", name="Run Grep").click()
    pattern = grep.get_by_label("pattern")
    expect(pattern).to_be_focused()
    assert pattern.evaluate("el => el.validity.valueMissing") is True
    expect(grep.locator(".tool-result")).to_be_empty()
    # and once it is filled, the same form runs
    pattern.fill("nothing-matches-this-xyz")
    grep.get_by_role("button", name="Run Grep").click()
    expect(grep.locator(".tool-result .result-head")).to_be_visible()
    wait_for(
        lambda: node.log_file.read_text().count('"tool": "Grep"') == calls_before + 1, what="one Grep call in the log"
    )


def test_shows_a_nodes_recent_log_lines(console: Console, node: NodeProcess) -> None:
    page = console.open("#/nodes/laptop").page
    logs = page.get_by_role("region", name="Logs")
    block = logs.get_by_label("Log of laptop")
    expect(block).to_contain_text("connected to ws://")
    expect(logs.get_by_role("status")).to_contain_text(re.compile(r"\d+ lines?"))
    # a tool run shows up in the log after a refresh
    bash = open_tool(page, "laptop__Bash")
    bash.get_by_label("command").fill("true")
    bash.get_by_role("button", name="Run Bash").click()
    expect(bash.locator(".tool-result")).to_contain_text("completed")
    logs.get_by_label("Lines").select_option("50")
    expect(block.locator(".log-line").last).to_contain_text("tool Bash done")
    count = block.locator(".log-line").count()
    assert 1 <= count <= 50
    logs.get_by_role("button", name="Refresh").click()
    expect(logs.get_by_role("button", name="Refresh")).to_be_enabled()
    expect(block.locator(".log-line").last).to_contain_text("tool Bash done")


def test_the_form_sends_typed_arguments_and_shows_images(console: Console, gadget: GatewayClient) -> None:
    page = console.open("#/nodes/gadget").page
    expect(page.get_by_role("region", name="Host")).to_contain_text("plan9")
    shape = open_tool(page, "gadget__Shape")
    expect(shape.get_by_label("mode")).to_have_attribute("required", "")
    shape.get_by_label("title").fill("hello")
    shape.get_by_label("count").fill("3")
    shape.get_by_label("ratio").fill("0.5")
    shape.get_by_label("loud").check()
    shape.get_by_label("mode").select_option("slow")
    tags = shape.get_by_label("tags")
    tags.fill('{"not": "an array"}')
    shape.get_by_role("button", name="Run Shape").click()
    assert "array" in tags.evaluate("el => el.validationMessage")
    expect(shape.locator(".tool-result")).to_be_empty()
    tags.fill('["a", "b"]')
    shape.get_by_label("options").fill("{not json")
    shape.get_by_role("button", name="Run Shape").click()
    assert "JSON" in shape.get_by_label("options").evaluate("el => el.validationMessage")
    shape.get_by_label("options").fill('{"deep": {"x": 1}}')
    shape.get_by_role("button", name="Run Shape").click()

    call = gadget.next_event("tool.invoke")["payload"]
    assert call["tool"] == "Shape"
    assert call["args"] == {
        "title": "hello",
        "count": 3,
        "ratio": 0.5,
        "loud": True,
        "mode": "slow",
        "tags": ["a", "b"],
        "options": {"deep": {"x": 1}},
    }
    expect(shape.get_by_role("button", name="Run Shape")).to_be_disabled()
    gadget.call("tool.result", {"callId": call["callId"], "result": {"answer": 42, "items": ["x"]}})
    result = shape.locator(".tool-result")
    expect(result.locator("pre.output")).to_contain_text('"answer": 42')
    expect(shape.get_by_role("button", name="Run Shape")).to_be_enabled()

    snap = open_tool(page, "gadget__Snap")
    expect(snap).to_contain_text("This tool takes no arguments.")
    snap.get_by_role("button", name="Run Snap").click()
    call = gadget.next_event("tool.invoke")["payload"]
    assert call["tool"] == "Snap" and call["args"] == {}
    content = [
        {"type": "text", "text": "A tiny picture"},
        {"type": "image", "mimeType": "image/png", "data": base64.b64encode(PIXEL).decode()},
        {"type": "image", "mimeType": "image/svg+xml", "data": base64.b64encode(SVG).decode()},
    ]
    gadget.call("tool.result", {"callId": call["callId"], "result": {"content": content}})
    image = snap.get_by_role("img", name="image/png")
    expect(image).to_be_visible()
    assert image.evaluate("el => el.naturalWidth") == 1
    expect(snap.locator(".tool-result")).to_contain_text("A tiny picture")
    # an SVG (it can carry script and links) is never shown, and inline image data is never a link to open
    expect(snap.locator(".tool-result")).to_contain_text("An image (image/svg+xml) that this page cannot show")
    expect(snap.locator(".tool-result img")).to_have_count(1)
    expect(snap.locator(".tool-result a")).to_have_count(0)

    # the node's own error message
    snap.get_by_role("button", name="Run Snap").click()
    call = gadget.next_event("tool.invoke")["payload"]
    gadget.call("tool.result", {"callId": call["callId"], "error": "camera is covered"})
    expect(snap.locator(".tool-result").get_by_role("alert")).to_contain_text("camera is covered")
    assert not console.errors, console.errors


@pytest.fixture
def lonely(tmp_path: Path) -> Iterator[GatewayProcess]:
    """A gateway of its own, with no node."""
    gw = GatewayProcess(tmp_path / "data", token=TOKEN).start()
    yield gw
    gw.stop()


def test_without_a_node_it_says_how_to_connect_one_and_fits_a_phone(browser: Any, lonely: GatewayProcess) -> None:
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        tab = Console(context.new_page(), lonely.http).open("#/nodes")
        page = tab.page
        help_card = page.locator("section.connect-help")
        expect(help_card.get_by_role("heading")).to_have_text("No node is connected")
        expect(help_card.locator("pre")).to_have_text(
            f"ORBITAL_TOKEN=<gateway token> orbital node --url {lonely.url} --id laptop"
        )
        expect(page.locator("details.native-tools summary")).to_contain_text("Native tools (12)")
        assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
        page.evaluate("location.hash = '#/nodes/elsewhere'")
        expect(page.locator("section.connect-help h2")).to_have_text("Node elsewhere is not connected")
        assert not tab.errors, tab.errors
    finally:
        context.close()


def test_a_node_that_comes_and_goes_shows_without_a_refresh(console: Console, gateway: GatewayProcess) -> None:
    page = console.open("#/nodes").page
    arrived = page.get_by_role("article", name="Node gadget")
    expect(arrived).to_have_count(0)
    with GatewayClient(gateway.url, timeout=20) as c:
        c.connect("node", "gadget", token=TOKEN, tools=GADGET_TOOLS, nodeRuntime=GADGET_RUNTIME)
        page.evaluate("window.dispatchEvent(new Event('focus'))")  # back to the tab (else: the next 15 s look)
        expect(arrived).to_be_visible()

    def gone() -> bool:  # the gateway handles the socket's close on its own time: look until it has
        page.evaluate("window.dispatchEvent(new Event('focus'))")
        return arrived.count() == 0

    wait_for(gone, what="gadget gone from the page")
