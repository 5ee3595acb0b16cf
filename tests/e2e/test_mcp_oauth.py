"""Logging in to an MCP server that needs OAuth through a real `orbital dev` (with a token): `mcp.login` over the
WebSocket, the URL followed as a browser would (the test authorization server approves at once and redirects to the
gateway's own `/api/mcp/oauth/callback`, reached without a bearer), then `mcp.test` and the scripted model's call of
the server's tool carry the login's bearer; an access token the server stops taking is refreshed; a revoked grant
shows as needing a login in `mcp.list`."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from orbital.client import GatewayClient

from tests.e2e.conftest import GatewayProcess, store_for
from tests.support.agent import configure_fake_model, follow_run
from tests.support.fake_llm import FakeLLM, call, reply
from tests.support.mcp_oauth_server import Running, oauth_mcp_server


@pytest.fixture
def gateway_with_token(tmp_path: Path) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(tmp_path / "data", auth="token").start()
    yield gw
    gw.stop()


@pytest.fixture
def protected() -> Iterator[Running]:
    with oauth_mcp_server() as running:
        yield running


def _login(owner: GatewayClient, gw: GatewayProcess, protected: Running) -> httpx2.Response:
    started = owner.call("mcp.login", {"name": "prot"})  # the local gateway knows its own callback
    assert started["name"] == "prot" and started["url"].startswith(f"{protected.base_url}/authorize?")
    assert httpx2.URL(started["url"]).params["redirect_uri"] == f"{gw.http}/api/mcp/oauth/callback"
    page = httpx2.get(started["url"], follow_redirects=True, timeout=30)  # a browser: no bearer anywhere
    assert page.status_code == 200, page.text
    assert str(page.url).startswith(f"{gw.http}/api/mcp/oauth/callback?")
    assert "Logged in" in page.text and "prot" in page.text
    return page


def test_login_through_the_gateway_then_test_call_refresh_and_revoke(
    gateway_with_token: GatewayProcess, protected: Running
) -> None:
    from orbital.store import mcp_auth

    gw = gateway_with_token
    with FakeLLM() as fake, GatewayClient(gw.url, timeout=60) as owner:
        owner.connect("client", "owner", token=gw.token)
        configure_fake_model(owner, fake.base_url)
        owner.call("config.set", {"path": "mcp.servers.prot", "value": {"url": protected.url, "oauth": {}}})
        before = owner.call("mcp.test", {"name": "prot"})
        assert before["ok"] is False and before["status"] == "needs-login"
        assert "orbital mcp login prot" in before["error"]
        assert protected.auth.authorized_requests == 0

        page = _login(owner, gw, protected)
        assert protected.auth.registrations == 1 and protected.auth.code_exchanges == 1
        grant = mcp_auth.get(store_for(gw).table, "prot")
        assert grant is not None and grant.status == "ok" and grant.url == protected.url
        assert grant.tokens is not None
        secret = grant.tokens["access_token"]
        assert secret not in page.text

        tested = owner.call("mcp.test", {"name": "prot"})
        assert tested["ok"] is True, tested
        assert {t["tool"] for t in tested["tools"]} == {"whoami", "echo"}
        (listed,) = owner.call("mcp.list", {})["servers"]
        assert listed["status"] == "ok" and listed["auth"] == "ok"
        assert secret not in str([tested, listed, owner.call("config.get", {})])

        # the scripted model calls the server's tool in a turn: the call carries the login's bearer
        key = f"agent:main:e2e-{uuid.uuid4().hex[:8]}"
        fake.script(reply(tool_calls=[call("mcp__prot__echo", {"text": "through the login"})]), reply("Done."))
        run = owner.call("chat.send", {"sessionKey": key, "message": "use the protected server"})
        events = follow_run(owner, run["runId"], timeout=60)
        assert events[-1]["state"] == "final", events
        tool_results = [m["content"] for m in fake.requests[1].body["messages"] if m["role"] == "tool"]
        assert any("echo: through the login" in str(content) for content in tool_results), tool_results

        # the server stops taking the access token: the gateway refreshes it and goes on
        protected.auth.expire_access_tokens()
        assert owner.call("mcp.test", {"name": "prot"})["ok"] is True
        assert protected.auth.refreshes == 1

        # the user revokes the grant: needs a login, shown by mcp.list, no crash
        protected.auth.revoke_all()
        revoked = owner.call("mcp.test", {"name": "prot"})
        assert revoked["ok"] is False and revoked["status"] == "needs-login"
        (listed,) = owner.call("mcp.list", {})["servers"]
        assert listed["status"] == "needs-login" and listed["auth"] == "needs-login"

        _login(owner, gw, protected)  # logging in again brings it back
        assert owner.call("mcp.test", {"name": "prot"})["ok"] is True
