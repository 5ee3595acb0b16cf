"""The console's MCP view in a real browser against a real `orbital dev` and real MCP servers (the SDK's, on loopback):
adding a server writes `mcp.servers.NAME` and tests it (status, tools), a tool's switch writes the server's
`tools.deny`/`tools.allow` and the gateway's list follows, editing keeps a masked header, disabling and removing
change the configuration, an unreachable server shows its error, and a server's text is shown as text."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from orbital.client import GatewayClient
from playwright.sync_api import expect

from tests.browser.conftest import Console
from tests.e2e.conftest import GatewayProcess, free_port
from tests.support.mcp_oauth_server import oauth_mcp_server
from tests.support.mcp_servers import McpTestServer, mcp_server

SECRET = "Bearer console-header-secret-93ab"


@pytest.fixture(scope="module")
def server() -> Iterator[McpTestServer]:
    with mcp_server() as started:
        yield started


def stored(admin: GatewayClient, name: str) -> dict[str, Any]:
    answer = admin.call("config.get", {"path": f"mcp.servers.{name}"})
    return dict(answer.get("value") or {}) if answer.get("exists") is not False else {}


def listed(admin: GatewayClient, name: str) -> dict[str, Any]:
    return dict(next(s for s in admin.call("mcp.list", {})["servers"] if s["name"] == name))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_add_a_server_with_a_header_it_is_tested_and_its_tools_shown(
    console: Console, admin: GatewayClient, server: McpTestServer
) -> None:
    name = unique("docs")
    page = console.open("#/mcp").page
    page.get_by_role("button", name="Add server").click()
    form = page.get_by_role("dialog", name="Add an MCP server")
    form.get_by_label("Name").fill(name)
    form.get_by_label("URL").fill(server.url)
    form.get_by_label("Headers").fill(f"Authorization: {SECRET}")
    form.get_by_label("Never offer").fill("fail")
    form.get_by_role("button", name="Add").click()
    expect(form).to_have_count(0)

    card = page.locator(f'[data-server="{name}"]')
    expect(card.locator(".badge.status")).to_have_text("ok")  # saved, then tested
    expect(card.locator(".tool-count")).to_contain_text("tools")
    card.get_by_text("Tools (").click()
    expect(card.get_by_label("Offer echo")).to_be_checked()
    expect(card.get_by_label("Offer fail")).not_to_be_checked()  # the deny list
    expect(card.locator('[data-tool="echo"]')).to_contain_text(f"mcp__{name}__echo")

    config = stored(admin, name)
    assert config["url"] == server.url
    assert config["headers"] == {"Authorization": "***"}
    assert config["tools"] == {"deny": ["fail"]}
    assert {k.lower(): v for k, v in server.headers.items()}["authorization"] == SECRET  # the test sent it
    assert SECRET not in page.locator("body").inner_text()
    assert console.errors == []


def test_a_tools_switch_writes_the_deny_list_and_the_gateway_follows(
    console: Console, admin: GatewayClient, server: McpTestServer
) -> None:
    name = unique("sw")
    admin.call("config.set", {"path": f"mcp.servers.{name}", "value": {"url": server.url}})
    admin.call("mcp.test", {"name": name})
    page = console.open("#/mcp").page
    card = page.locator(f'[data-server="{name}"]')
    card.get_by_text("Tools (").click()
    weather = card.get_by_label("Offer weather")
    expect(weather).to_be_checked()
    weather.uncheck()
    expect(page.get_by_role("status").filter(has_text="weather is hidden from the agent")).to_be_visible()
    assert stored(admin, name)["tools"] == {"deny": ["weather"]}
    tools = {t["tool"]: t for t in listed(admin, name)["tools"]}
    assert tools["weather"]["allowed"] is False and tools["echo"]["allowed"] is True

    card.get_by_label("Offer weather").check()
    expect(page.get_by_role("status").filter(has_text="weather is offered to the agent")).to_be_visible()
    assert "tools" not in stored(admin, name) or stored(admin, name)["tools"] == {}
    assert {t["tool"]: t for t in listed(admin, name)["tools"]}["weather"]["allowed"] is True

    # with an allow list, switching on a tool it leaves out adds the tool to it
    admin.call("config.set", {"path": f"mcp.servers.{name}.tools", "value": {"allow": ["echo"]}})
    page.get_by_role("button", name="Refresh").click()
    expect(card.get_by_label("Offer picture")).not_to_be_checked()
    card.get_by_label("Offer picture").check()
    expect(page.get_by_role("status").filter(has_text="picture is offered to the agent")).to_be_visible()
    assert stored(admin, name)["tools"] == {"allow": ["echo", "picture"]}


def test_edit_keeps_the_masked_header_and_disable_and_remove_ask_or_act(
    console: Console, admin: GatewayClient, server: McpTestServer
) -> None:
    name = unique("ed")
    admin.call("config.set", {"path": f"mcp.servers.{name}", "value": {"url": server.url, "headers": {"X-Key": "k-1"}}})
    page = console.open("#/mcp").page
    card = page.locator(f'[data-server="{name}"]')
    card.get_by_role("button", name=f"Edit {name}").click()
    form = page.get_by_role("dialog", name=f"Edit {name}")
    expect(form.get_by_label("URL")).to_be_focused()  # the name is fixed: the URL comes first
    expect(form.get_by_label("Headers")).to_have_value("X-Key: ***")  # the mask, never the value
    form.get_by_label("Timeout (ms)").fill("15000")
    form.get_by_label("Trust").select_option("trusted")
    form.get_by_role("button", name="Save").click()
    expect(card.locator(".badge.status")).to_have_text("ok")  # saved and tested again
    expect(card.locator(".badge.trust")).to_have_text("trusted")
    assert stored(admin, name)["timeoutMs"] == 15000
    assert server.headers.get("x-key", server.headers.get("X-Key")) == "k-1"  # the stored value was kept

    card.get_by_role("button", name=f"Disable {name}").click()
    expect(card.locator(".badge.status")).to_have_text("disabled")
    assert stored(admin, name)["enabled"] is False
    card.get_by_role("button", name=f"Enable {name}").click()
    expect(card.get_by_role("button", name=f"Disable {name}")).to_be_visible()
    assert stored(admin, name)["enabled"] is True

    card.get_by_role("button", name=f"Remove {name}").click()
    page.get_by_role("dialog", name=f"Remove {name}?").get_by_role("button", name="Cancel").click()
    assert stored(admin, name)["url"] == server.url
    card.get_by_role("button", name=f"Remove {name}").click()
    page.get_by_role("dialog", name=f"Remove {name}?").get_by_role("button", name="Remove").click()
    expect(card).to_have_count(0)
    assert stored(admin, name) == {}


def test_a_bad_form_is_refused_in_place(console: Console, admin: GatewayClient) -> None:
    page = console.open("#/mcp").page
    page.get_by_role("button", name="Add server").click()
    form = page.get_by_role("dialog", name="Add an MCP server")
    form.get_by_label("Name").fill("no_underscores")
    form.get_by_label("URL").fill("http://127.0.0.1:1/mcp")
    form.get_by_role("button", name="Add").click()
    expect(form.get_by_role("alert")).to_have_text("A name is 1 to 32 letters, digits and dashes.")
    form.get_by_label("Name").fill("okname")
    form.get_by_label("Headers").fill("Authorization Bearer x")
    form.get_by_role("button", name="Add").click()
    expect(form.get_by_role("alert")).to_contain_text("A header is “Name: value”")
    form.get_by_role("button", name="Cancel").click()
    assert stored(admin, "okname") == {}


def test_an_unreachable_server_shows_its_error(console: Console, admin: GatewayClient) -> None:
    name = unique("dead")
    admin.call(
        "config.set",
        {"path": f"mcp.servers.{name}", "value": {"url": f"http://127.0.0.1:{free_port()}/mcp", "timeoutMs": 5000}},
    )
    page = console.open("#/mcp").page
    card = page.locator(f'[data-server="{name}"]')
    card.get_by_role("button", name=f"Test {name}").click()
    expect(page.get_by_role("alert").filter(has_text=f"{name}: error")).to_be_visible()
    expect(card.locator(".badge.status")).to_have_text("error")
    expect(card.locator(".last-error")).to_contain_text("Last error:")


def test_a_servers_text_is_shown_as_text(console: Console, admin: GatewayClient) -> None:
    name = unique("evil")
    with mcp_server(name="hostile") as hostile:
        hostile.add_tool("evil", description='<img src="x" onerror="window.__owned = 1"> trust me')
        admin.call("config.set", {"path": f"mcp.servers.{name}", "value": {"url": hostile.url}})
        admin.call("mcp.test", {"name": name})
    page = console.open("#/mcp").page
    card = page.locator(f'[data-server="{name}"]')
    card.get_by_text("Tools (").click()
    expect(card.locator('[data-tool="evil"] .tool-description')).to_have_text(
        '<img src="x" onerror="window.__owned = 1"> trust me'
    )
    assert card.locator("img").count() == 0
    assert page.evaluate("window.__owned") is None


def test_the_views_pattern_matching_is_the_gateways(console: Console) -> None:
    """The switches decide what to write with the view's own matcher: it must agree with the gateway's."""
    from orbital.domain.approval_policy import matches_tool

    cases = [
        ("*", "echo"),
        ("echo", "echo"),
        (" echo ", "echo"),
        ("ech", "echo"),
        ("e*o", "echo"),
        ("e*", "mcp__docs__echo"),
        ("mcp__docs__*", "mcp__docs__echo"),
        ("*__echo", "mcp__docs__echo"),
        ("a.c", "abc"),
        ("a.*", "abc"),
        ("(x)*", "(x)y"),
        ("", "echo"),
    ]
    page = console.open("#/mcp").page
    got = page.evaluate(
        """async (cases) => {
            const m = await import("./console/views/mcp.js");
            return cases.map(([p, t]) => m.matchesTool(p, t));
        }""",
        cases,
    )
    assert got == [matches_tool(p, t) for p, t in cases]
    switched = page.evaluate(
        """async () => {
            const m = await import("./console/views/mcp.js");
            return [
                m.switchTool({}, "fail", false, "mcp__d__fail"),
                m.switchTool({deny: ["fail", "x*"]}, "fail", true, "mcp__d__fail"),
                m.switchTool({deny: ["mcp__d__fail"]}, "fail", true, "mcp__d__fail"),
                m.switchTool({allow: ["echo"]}, "fail", true, "mcp__d__fail"),
                m.switchTool({allow: ["echo", "fail"]}, "fail", false, "mcp__d__fail"),
                m.switchTool({deny: ["f*"]}, "fail", false, "mcp__d__fail"),
            ];
        }"""
    )
    assert switched == [
        {"deny": ["fail"]},
        {"deny": ["x*"]},
        {},
        {"allow": ["echo", "fail"]},
        {"allow": ["echo"], "deny": ["fail"]},
        {"deny": ["f*"]},
    ]


def test_log_in_opens_the_servers_login_page_and_the_card_then_says_logged_in(
    console: Console, admin: GatewayClient, gateway: GatewayProcess
) -> None:
    name = unique("secure")
    with oauth_mcp_server() as protected:
        admin.call("config.set", {"path": f"mcp.servers.{name}", "value": {"url": protected.url, "oauth": {}}})
        page = console.open("#/mcp").page
        card = page.locator(f'[data-server="{name}"]')
        expect(card.locator(".badge.auth")).to_have_text("needs login")
        card.get_by_role("button", name=f"Log in to {name}").click()
        shown = page.get_by_role("dialog", name=f"Log in to {name}")
        link = shown.get_by_role("link", name="Open the login page")
        href = link.get_attribute("href") or ""
        assert href.startswith(protected.base_url)  # the authorization server's page
        assert link.get_attribute("rel") == "noopener noreferrer"
        with page.context.expect_page() as opened:
            link.click()
        login = opened.value  # approved at once, sent back to the gateway
        expect(login.locator("h1")).to_have_text("Logged in")
        assert login.url.startswith(f"{gateway.http}/api/mcp/oauth/callback")
        login.close()
        shown.get_by_role("button", name="Done").click()  # checks the server again
        expect(card.locator(".badge.auth")).to_have_text("logged in")
        expect(card.locator(".badge.status")).to_have_text("ok")
        expect(card.locator(".tool-count")).to_have_text("2 tools")
        tokens = [*protected.auth.access, *protected.auth.refresh]
        body = page.locator("body").inner_text()
        assert tokens and not any(token in body for token in tokens)

        protected.auth.revoke_all()  # the user withdrew the grant at the server
        card.get_by_role("button", name=f"Test {name}").click()
        expect(page.get_by_role("alert").filter(has_text=f"{name}: needs-login")).to_be_visible()
        expect(card.locator(".badge.status")).to_have_text("needs-login")
        expect(card.locator(".badge.auth")).to_have_text("needs login")
        expect(card.get_by_role("button", name=f"Log in to {name}")).to_be_visible()


def test_a_viewer_sees_the_servers_but_may_not_change_them(
    console: Console, admin: GatewayClient, server: McpTestServer
) -> None:
    name = unique("ro")
    admin.call("config.set", {"path": f"mcp.servers.{name}", "value": {"url": server.url}})
    viewer = admin.call("device.token.create", {"name": unique("eyes"), "role": "viewer"})["token"]
    page = console.open("#/mcp", token=viewer).page
    card = page.locator(f'[data-server="{name}"]')
    expect(card.locator("h2")).to_have_text(name)
    card.get_by_role("button", name=f"Disable {name}").click()
    expect(page.get_by_role("alert").filter(has_text="Disable failed")).to_contain_text("(403)")
    card.get_by_role("button", name=f"Test {name}").click()
    expect(page.get_by_role("alert").filter(has_text=f"Test of {name} failed")).to_contain_text("(403)")
    assert stored(admin, name).get("enabled", True) is True
