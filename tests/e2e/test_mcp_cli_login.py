"""`orbital mcp add --oauth` and `orbital mcp login` against a real `orbital dev` and a real OAuth-protected MCP server
(the SDK's authorization server and resource server, on loopback): the server needs a login until the URL `login`
prints is followed (the test authorization server approves at once and sends the browser back to the gateway's
callback); then `test` lists its tools and `list` says it is logged in. No token ever reaches the command's output."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator

import pytest
from orbital.client import GatewayClient

from tests.e2e.conftest import GatewayProcess
from tests.e2e.test_mcp_cli import TOKEN, orbital
from tests.support.mcp_oauth_server import oauth_mcp_server


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    gateway = GatewayProcess(tmp_path_factory.mktemp("mcp-cli-login") / "data", token=TOKEN).start()
    yield gateway
    gateway.stop()


def auth_of(gw: GatewayProcess, name: str) -> str:
    listed = orbital(gw, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return str(next(s for s in json.loads(listed.stdout)["servers"] if s["name"] == name)["auth"])


def test_login_prints_the_url_and_following_it_logs_the_gateway_in(gw: GatewayProcess) -> None:
    with oauth_mcp_server() as protected:
        added = orbital(gw, "add", "secure", protected.url, "--oauth")
        assert added.returncode == 0, added.stderr
        assert "`orbital mcp login secure`" in added.stdout  # not tested yet: it needs a login first
        assert auth_of(gw, "secure") == "needs-login"
        before = orbital(gw, "test", "secure")
        assert before.returncode == 1

        done = orbital(gw, "login", "secure")
        assert done.returncode == 0, done.stderr
        link = next(line.strip() for line in done.stdout.splitlines() if line.strip().startswith("http"))
        assert link.startswith(protected.base_url)  # the authorization server's page
        assert "redirect_uri=" in link and "oauth%2Fcallback" in link
        with urllib.request.urlopen(link, timeout=30) as response:  # the browser: approved, sent back
            page = response.read().decode()
            assert response.url.startswith(f"{gw.http}/api/mcp/oauth/callback")
        assert "Logged in" in page

        tested = orbital(gw, "test", "secure")
        assert tested.returncode == 0, tested.stderr
        assert "secure: ok" in tested.stdout and "mcp__secure__whoami" in tested.stdout
        assert auth_of(gw, "secure") == "ok"
        tokens = [*protected.auth.access, *protected.auth.refresh]
        assert tokens
        for out in (added, done, tested):
            assert not any(token in out.stdout + out.stderr for token in tokens)

        protected.auth.revoke_all()  # the user withdrew the grant at the server
        revoked = orbital(gw, "test", "secure")
        assert revoked.returncode == 1
        assert revoked.stderr.startswith("secure: needs-login")
        assert "`orbital mcp login secure` prints the URL to open." in revoked.stderr
        listed = orbital(gw, "list")
        assert "secure: needs a login: `orbital mcp login secure`" in listed.stdout


def test_login_of_a_server_without_oauth_says_so(gw: GatewayProcess) -> None:
    with GatewayClient(gw.url, timeout=30) as admin:
        admin.connect("client", "mcp-cli-login-admin", token=TOKEN)
        admin.call("config.set", {"path": "mcp.servers.plain", "value": {"url": "http://127.0.0.1:9/mcp"}})
    done = orbital(gw, "login", "plain")
    assert done.returncode == 1
    assert "has no oauth section" in done.stderr and "(400)" in done.stderr
    unknown = orbital(gw, "login", "nowhere")
    assert unknown.returncode == 1 and "(404)" in unknown.stderr
