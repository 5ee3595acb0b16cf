"""Logging in to an MCP server that needs OAuth through a real `orbital dev` (with a token): `mcp.login` over the
WebSocket, the URL followed as a browser would (the test authorization server approves at once and redirects to the
gateway's own `/api/mcp/oauth/callback`, reached without a bearer), then the server's tools read with the login's
bearer; a revoked grant shows as needing a login."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from orbital.client import GatewayClient

from tests.e2e.conftest import GatewayProcess, store_for
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


def test_login_through_the_gateway_then_the_tools_are_read_with_its_bearer(
    gateway_with_token: GatewayProcess, protected: Running
) -> None:
    from orbital.store import mcp_auth
    from orbital.tools import mcp_client, mcp_oauth

    gw = gateway_with_token
    with GatewayClient(gw.url, timeout=30) as owner:
        owner.connect("client", "owner", token=gw.token)
        owner.call("config.set", {"path": "mcp.servers.prot", "value": {"url": protected.url, "oauth": {}}})
        started = owner.call("mcp.login", {"name": "prot"})  # the local gateway knows its own callback
        assert started["name"] == "prot" and started["url"].startswith(f"{protected.base_url}/authorize?")
        redirect = httpx2.URL(started["url"]).params["redirect_uri"]
        assert redirect == f"{gw.http}/api/mcp/oauth/callback"

        page = httpx2.get(started["url"], follow_redirects=True, timeout=30)  # a browser: no bearer anywhere
        assert page.status_code == 200, page.text
        assert str(page.url).startswith(f"{gw.http}/api/mcp/oauth/callback?")
        assert "Logged in" in page.text and "prot" in page.text
        assert protected.auth.registrations == 1 and protected.auth.code_exchanges == 1

        services = store_for(gw)
        grant = mcp_auth.get(services.table, "prot")
        assert grant is not None and grant.status == "ok" and grant.url == protected.url
        assert grant.tokens is not None and grant.tokens["access_token"] not in page.text
        spec = mcp_client.spec(services.config.effective(), "prot")
        assert spec is not None and mcp_oauth.auth_state(services, spec) == "ok"
        listed = mcp_client.list_tools(services, spec, force=True)
        assert listed.status == "ok", listed.error
        assert {t["tool"] for t in listed.tools} == {"whoami", "echo"}
        assert protected.auth.authorized_requests > 0

        config = owner.call("config.get", {})
        assert grant.tokens["access_token"] not in str(config)

        protected.auth.revoke_all()
        outcome = mcp_client.call_tool(services, spec, "echo", {"text": "x"})
        assert outcome.error is not None and "needs a login" in outcome.error
        assert mcp_oauth.auth_state(services, spec) == "needs-login"
