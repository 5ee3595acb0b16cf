"""Logging in to MCP servers that need OAuth (tools/mcp_oauth.py, methods/mcp_auth.py, rest/mcp_oauth.py), against a
real authorization server and protected MCP server built with the SDK's server-side auth pieces
(tests/support/mcp_oauth_server.py): discovery, dynamic registration or a configured client, PKCE, the code exchanged
once, the bearer on calls, refresh before expiry and on a 401, a revoked grant shown as needs-login, tokens never
shown."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import httpx2
import pytest

from tests.conftest import TABLE
from tests.support.mcp_oauth_server import Running, oauth_mcp_server

REDIRECT = "http://127.0.0.1:9/api/mcp/oauth/callback"


@pytest.fixture
def protected() -> Iterator[Running]:
    with oauth_mcp_server() as running:
        yield running


def _configure(admin: Any, running: Running, name: str = "prot", **oauth: Any) -> None:
    admin.call("config.set", {"path": f"mcp.servers.{name}", "value": {"url": running.url, "oauth": oauth}})


def _spec(services: Any, name: str = "prot") -> Any:
    from orbital.tools import mcp_client

    found = mcp_client.spec(services.config.effective(), name)
    assert found is not None
    return found


def _authorize(url: str) -> dict[str, str]:
    """What a browser does with the login URL: the test server approves at once and redirects to the callback;
    the code and state of that redirect."""
    response = httpx2.get(url, follow_redirects=False)
    assert response.status_code in (302, 303, 307), response.text
    location = response.headers["location"]
    assert location.startswith(REDIRECT)
    query = parse_qs(urlsplit(location).query)
    return {k: v[0] for k, v in query.items()}


def _login(admin: Any, services: Any) -> str:
    from orbital.tools import mcp_oauth

    started = admin.call("mcp.login", {"name": "prot", "redirectUri": REDIRECT})
    answer = _authorize(started["url"])
    return mcp_oauth.finish(services, answer["code"], answer["state"])


def _raw_items() -> str:
    ddb = boto3.client("dynamodb", region_name="us-east-1")
    return json.dumps(ddb.scan(TableName=TABLE)["Items"])


def test_login_registers_exchanges_once_and_calls_carry_the_bearer(
    services: Any, connect: Any, protected: Running
) -> None:
    from orbital.tools import mcp_client, mcp_oauth

    admin = connect("client", "owner")
    _configure(admin, protected)
    spec = _spec(services)
    assert mcp_oauth.auth_state(services, spec) == "needs-login"
    before = mcp_client.list_tools(services, spec, force=True)
    assert before.status == "needs-login" and "orbital mcp login prot" in (before.error or "")

    started = admin.call("mcp.login", {"name": "prot", "redirectUri": REDIRECT})
    assert set(started) == {"name", "url", "expiresAt"} and started["name"] == "prot"
    assert started["expiresAt"] > services.now_ms()
    query = parse_qs(urlsplit(started["url"]).query)
    assert query["code_challenge_method"] == ["S256"] and query["redirect_uri"] == [REDIRECT]
    assert query["resource"] == [protected.url] and query["scope"] == ["mcp"]
    assert protected.auth.registrations == 1

    answer = _authorize(started["url"])
    assert mcp_oauth.finish(services, answer["code"], answer["state"]) == "prot"
    assert protected.auth.code_exchanges == 1
    assert mcp_oauth.auth_state(services, spec) == "ok"

    listed = mcp_client.list_tools(services, spec, force=True)
    assert listed.status == "ok", listed.error
    assert {t["name"] for t in listed.tools} == {"mcp__prot__whoami", "mcp__prot__echo"}
    echo = mcp_client.call_tool(services, spec, "echo", {"text": "hi"})
    assert echo.error is None and echo.result is not None
    assert echo.result["content"] == [{"type": "text", "text": "echo: hi"}]
    assert protected.auth.authorized_requests > 0

    # the state was used: the same redirect again (a replay) finishes nothing
    with pytest.raises(mcp_oauth.UnknownLoginError):
        mcp_oauth.finish(services, answer["code"], answer["state"])
    assert protected.auth.code_exchanges == 1

    # a second login reuses the registration made by the first
    _login(admin, services)
    assert protected.auth.registrations == 1 and protected.auth.code_exchanges == 2


def test_tokens_and_client_secret_are_never_shown(services: Any, connect: Any, protected: Running) -> None:
    from orbital.store import mcp_auth
    from orbital.tools import mcp_oauth

    admin = connect("client", "owner")
    _configure(admin, protected, clientName="Orbital test")
    _login(admin, services)
    grant = mcp_auth.get(services.table, "prot")
    assert grant is not None and grant.tokens is not None
    secrets = [grant.tokens["access_token"], grant.tokens["refresh_token"], grant.client["client_secret"]]
    assert all(secrets)
    assert grant.tokens["access_token"] in _raw_items()  # kept in the table (the gateway needs them)
    shown = json.dumps(
        [
            admin.call("config.get", {}),
            admin.call("mcp.login", {"name": "prot", "redirectUri": REDIRECT}),
            grant.public(),
        ]
    )
    assert not any(secret in shown for secret in secrets)
    assert repr(mcp_oauth.GrantAuth(services, "prot", protected.url)) == "GrantAuth('prot')"


def test_a_configured_client_is_used_without_registering(services: Any, connect: Any, protected: Running) -> None:
    from orbital.tools import mcp_client

    protected.auth.preregister("my-client", "my-secret", REDIRECT)
    admin = connect("client", "owner")
    _configure(admin, protected, clientId="my-client", clientSecret="my-secret", scope="mcp")
    started = admin.call("mcp.login", {"name": "prot", "redirectUri": REDIRECT})
    assert parse_qs(urlsplit(started["url"]).query)["client_id"] == ["my-client"]
    from orbital.tools import mcp_oauth

    answer = _authorize(started["url"])
    mcp_oauth.finish(services, answer["code"], answer["state"])
    assert protected.auth.registrations == 0 and protected.auth.code_exchanges == 1
    assert mcp_client.list_tools(services, _spec(services), force=True).status == "ok"


def test_a_token_about_to_expire_is_refreshed_before_use(services: Any, connect: Any) -> None:
    from orbital.tools import mcp_client

    with oauth_mcp_server(access_ttl=30) as protected:  # within the refresh margin: refreshed at every use
        admin = connect("client", "owner")
        _configure(admin, protected)
        _login(admin, services)
        spec = _spec(services)
        first = mcp_client.call_tool(services, spec, "echo", {"text": "one"})
        assert first.error is None
        assert protected.auth.refreshes >= 1
        refreshed = protected.auth.refreshes
        second = mcp_client.call_tool(services, spec, "echo", {"text": "two"})
        assert second.error is None and protected.auth.refreshes > refreshed


def test_a_refused_access_token_is_refreshed_once_and_the_call_retried(
    services: Any, connect: Any, protected: Running
) -> None:
    from orbital.tools import mcp_client

    admin = connect("client", "owner")
    _configure(admin, protected)
    _login(admin, services)
    spec = _spec(services)
    protected.auth.expire_access_tokens()  # the server refuses the token the gateway still thinks live
    outcome = mcp_client.call_tool(services, spec, "echo", {"text": "again"})
    assert outcome.error is None, outcome.error
    assert protected.auth.refreshes == 1


def test_a_revoked_grant_shows_needs_login_and_calls_fail_clearly(
    services: Any, connect: Any, protected: Running
) -> None:
    from orbital.store import mcp_auth
    from orbital.tools import mcp_client, mcp_oauth

    admin = connect("client", "owner")
    _configure(admin, protected)
    _login(admin, services)
    spec = _spec(services)
    assert mcp_client.list_tools(services, spec, force=True).status == "ok"
    protected.auth.revoke_all()

    outcome = mcp_client.call_tool(services, spec, "echo", {"text": "x"})
    assert outcome.result is None and outcome.error is not None
    assert "needs a login" in outcome.error and "orbital mcp login prot" in outcome.error
    assert mcp_oauth.auth_state(services, spec) == "needs-login"
    grant = mcp_auth.get(services.table, "prot")
    assert grant is not None and grant.tokens is None and grant.public()["status"] == "needs-login"
    listed = mcp_client.list_tools(services, spec, force=True)
    assert listed.status == "needs-login"
    assert {t["tool"] for t in listed.tools} == {"whoami", "echo"}  # the last good list is kept

    _login(admin, services)  # logging in again brings it back
    assert mcp_client.list_tools(services, spec, force=True).status == "ok"


def test_tokens_are_not_sent_to_a_server_whose_url_changed(services: Any, connect: Any, protected: Running) -> None:
    from orbital.tools import mcp_client, mcp_oauth

    admin = connect("client", "owner")
    _configure(admin, protected)
    _login(admin, services)
    with oauth_mcp_server() as other:
        admin.call("config.set", {"path": "mcp.servers.prot.url", "value": other.url})
        spec = _spec(services)
        assert mcp_oauth.auth_state(services, spec) == "needs-login"
        outcome = mcp_client.call_tool(services, spec, "echo", {"text": "x"})
        assert outcome.error is not None and "needs a login" in outcome.error
        assert other.auth.authorized_requests == 0 and other.auth.access == {}


def test_a_login_whose_server_changed_meanwhile_is_refused(services: Any, connect: Any, protected: Running) -> None:
    from orbital.tools import mcp_oauth

    admin = connect("client", "owner")
    _configure(admin, protected)
    started = admin.call("mcp.login", {"name": "prot", "redirectUri": REDIRECT})
    answer = _authorize(started["url"])
    admin.call("config.set", {"path": "mcp.servers.prot.url", "value": "http://127.0.0.1:9/mcp"})
    with pytest.raises(mcp_oauth.LoginError, match="URL changed"):
        mcp_oauth.finish(services, answer["code"], answer["state"])
    assert protected.auth.code_exchanges == 0


def test_login_refusals(services: Any, connect: Any, protected: Running) -> None:
    admin = connect("client", "owner")
    admin.call("config.set", {"path": "mcp.servers.plain", "value": {"url": protected.url}})
    _configure(admin, protected)
    assert admin.error("mcp.login", {"name": "plain", "redirectUri": REDIRECT})["code"] == 400
    assert admin.error("mcp.login", {"name": "nope", "redirectUri": REDIRECT})["code"] == 404
    assert admin.error("mcp.login", {})["code"] == 400
    for bad in (
        "http://gateway.example.com/api/mcp/oauth/callback",  # plain http off the loopback
        "https://gateway.example.com/elsewhere",
        "https://gateway.example.com/api/mcp/oauth/callback?x=1",
        "ftp://gateway.example.com/api/mcp/oauth/callback",
    ):
        assert admin.error("mcp.login", {"name": "prot", "redirectUri": bad})["code"] == 400, bad
    # on AWS the gateway does not know its HTTP API's address: the caller must say it
    error = admin.error("mcp.login", {"name": "prot"})
    assert error["code"] == 400 and "redirectUri" in error["message"]
    assert protected.auth.registrations == 0


def test_mcp_login_needs_the_admin_role(services: Any, connect: Any, protected: Running) -> None:
    from tests.functional.test_scopes import as_device, refusal

    admin = connect("client", "owner")
    _configure(admin, protected)
    operator = as_device(services, connect("client", "ops"), "operator")
    assert operator.error("mcp.login", {"name": "prot", "redirectUri": REDIRECT}) == refusal(
        "mcp.login", "admin", "operator"
    )
    assert protected.auth.registrations == 0


# --- the callback route (no bearer: the state is the credential) ---------------------------------------------------


@pytest.fixture
def callback(token: str, services: Any) -> Iterator[Any]:
    """The HTTP app, with `services` (a gateway with a token) installed, and no bearer on its requests."""
    from orbital.rest.app import create_app
    from orbital.runtime.services import use_services
    from starlette.testclient import TestClient

    use_services(services)
    yield TestClient(create_app())
    use_services(None)


def _callback_path(answer: dict[str, str]) -> str:
    return "/api/mcp/oauth/callback?" + "&".join(f"{k}={v}" for k, v in answer.items())


def test_the_callback_finishes_the_login_without_a_bearer(
    callback: Any, services: Any, connect: Any, protected: Running
) -> None:
    from orbital.store import mcp as tool_cache
    from orbital.store import mcp_auth
    from orbital.tools import mcp_client

    admin = connect("client", "owner")
    _configure(admin, protected)
    assert mcp_client.list_tools(services, _spec(services), force=True).status == "needs-login"
    started = admin.call("mcp.login", {"name": "prot", "redirectUri": REDIRECT})
    answer = _authorize(started["url"])

    page = callback.get(_callback_path(answer))
    assert page.status_code == 200 and "Logged in" in page.text and "prot" in page.text
    assert (
        page.headers["cache-control"] == "no-store" and "default-src 'none'" in page.headers["content-security-policy"]
    )
    grant = mcp_auth.get(services.table, "prot")
    assert grant is not None and grant.tokens is not None
    assert grant.tokens["access_token"] not in page.text
    cached = tool_cache.load(services.table, "prot")
    assert cached is not None and cached.stale  # read again at its next use
    assert mcp_client.list_tools(services, _spec(services)).status == "ok"

    again = callback.get(_callback_path(answer))  # the same redirect replayed
    assert again.status_code == 400 and "unknown" in again.text
    assert protected.auth.code_exchanges == 1


def test_the_callback_says_what_failed(callback: Any, services: Any, connect: Any, protected: Running) -> None:
    from orbital.tools import mcp_oauth

    admin = connect("client", "owner")
    _configure(admin, protected)
    started = admin.call("mcp.login", {"name": "prot", "redirectUri": REDIRECT})
    state = _authorize(started["url"])["state"]
    refused = callback.get(
        "/api/mcp/oauth/callback",
        params={"state": state, "error": "access_denied", "error_description": "<script>alert(1)</script>"},
    )
    assert refused.status_code == 400 and "access_denied" in refused.text
    assert "<script>" not in refused.text and "&lt;script&gt;" in refused.text
    assert callback.get("/api/mcp/oauth/callback").status_code == 400  # no state at all
    with pytest.raises(mcp_oauth.UnknownLoginError):  # the refused login is used up
        mcp_oauth.finish(services, "code", state)
    assert protected.auth.code_exchanges == 0


def test_the_callback_path_is_the_same_everywhere() -> None:
    from orbital.methods import mcp_auth
    from orbital.rest import mcp_oauth as route
    from orbital.tools import mcp_oauth

    assert mcp_auth.CALLBACK_PATH == route.PATH == mcp_oauth.CALLBACK_PATH == "/api/mcp/oauth/callback"


def test_a_login_on_aws_comes_back_through_the_rest_lambda(services: Any, connect: Any, protected: Running) -> None:
    """On AWS the callback is the rest API Lambda's (API Gateway → Mangum → the app), with the caller's redirectUri."""
    from orbital.rest import app as rest
    from orbital.runtime.services import use_services
    from orbital.store import mcp_auth

    from tests.functional.test_windie_rest_lambda import event

    admin = connect("client", "owner")
    _configure(admin, protected)
    aws_redirect = "https://abc123.execute-api.us-east-1.amazonaws.com/api/mcp/oauth/callback"
    started = admin.call("mcp.login", {"name": "prot", "redirectUri": aws_redirect})
    location = httpx2.get(started["url"], follow_redirects=False).headers["location"]
    assert location.startswith(aws_redirect + "?")
    use_services(services)
    rest.lambda_handler.cache_clear()
    try:
        made = event("GET", "/api/mcp/oauth/callback")
        made["rawQueryString"] = urlsplit(location).query
        answer = rest.lambda_handler()(made, None)
    finally:
        rest.lambda_handler.cache_clear()
        use_services(None)
    assert answer["statusCode"] == 200, answer["body"]
    assert "Logged in" in answer["body"]
    grant = mcp_auth.get(services.table, "prot")
    assert grant is not None and grant.status == "ok"


def test_a_refresh_lost_to_another_process_adopts_its_tokens(
    services: Any, connect: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes refresh the same grant at once; the authorization server rotates refresh tokens, so the slower
    one's refresh is refused: it takes the tokens the faster one stored rather than calling the grant revoked."""
    from orbital.store import mcp_auth
    from orbital.tools import mcp_client, mcp_oauth

    with oauth_mcp_server(access_ttl=30) as protected:
        admin = connect("client", "owner")
        _configure(admin, protected)
        _login(admin, services)
        spec = _spec(services)
        stale = mcp_auth.get(services.table, "prot")
        assert mcp_client.call_tool(services, spec, "echo", {"text": "first"}).error is None  # the faster one
        assert protected.auth.refreshes >= 1
        real_grant = mcp_oauth.GrantAuth._grant
        reads: list[int] = []

        async def racing_grant(self: Any) -> Any:
            reads.append(1)
            return stale if len(reads) == 1 else await real_grant(self)  # read before the other one stored

        monkeypatch.setattr(mcp_oauth.GrantAuth, "_grant", racing_grant)
        outcome = mcp_client.call_tool(services, spec, "echo", {"text": "second"})
        assert outcome.error is None, outcome.error
        grant = mcp_auth.get(services.table, "prot")
        assert grant is not None and grant.status == "ok" and len(reads) > 1


def test_a_login_works_for_a_server_speaking_sse(services: Any, connect: Any) -> None:
    from orbital.tools import mcp_client

    with oauth_mcp_server(transport="sse") as protected:
        admin = connect("client", "owner")
        admin.call(
            "config.set",
            {"path": "mcp.servers.prot", "value": {"url": protected.url, "transport": "sse", "oauth": {}}},
        )
        assert mcp_client.list_tools(services, _spec(services), force=True).status == "needs-login"
        _login(admin, services)
        spec = _spec(services)
        listed = mcp_client.list_tools(services, spec, force=True)
        assert listed.status == "ok", listed.error
        outcome = mcp_client.call_tool(services, spec, "echo", {"text": "over sse"})
        assert outcome.error is None and outcome.result is not None
        assert outcome.result["content"] == [{"type": "text", "text": "echo: over sse"}]
        protected.auth.expire_access_tokens()  # refused on the stream's request: refreshed, and the call goes on
        assert mcp_client.call_tool(services, spec, "echo", {"text": "again"}).error is None
        assert protected.auth.refreshes >= 1


# --- a hostile or broken server: its metadata is capped and checked ------------------------------------------------


def _stranger(mode: str) -> Any:
    """A server that wants a login and whose metadata is wrong in one way (`mode`)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    def base(request: Request) -> str:
        return str(request.base_url).rstrip("/")

    async def mcp(request: Request) -> Response:
        header = f'Bearer resource_metadata="{base(request)}/.well-known/oauth-protected-resource/mcp"'
        return Response(status_code=401, headers={"WWW-Authenticate": header})

    async def resource(request: Request) -> Response:
        if mode == "huge":
            return Response(b'{"resource": "' + b"x" * (300 * 1024) + b'"}', media_type="application/json")
        named = "https://elsewhere.example/mcp" if mode == "other-resource" else f"{base(request)}/mcp"
        return JSONResponse({"resource": named, "authorization_servers": [base(request)]})

    async def issuer(request: Request) -> Response:
        return JSONResponse(
            {
                "issuer": "https://impostor.example",
                "authorization_endpoint": "https://impostor.example/authorize",
                "token_endpoint": "https://impostor.example/token",
                "response_types_supported": ["code"],
            }
        )

    return Starlette(
        routes=[
            Route("/mcp", mcp, methods=["GET", "POST"]),
            Route("/.well-known/oauth-protected-resource/mcp", resource),
            Route("/.well-known/oauth-authorization-server", issuer),
        ]
    )


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("huge", "more than 256 KB"),
        ("other-resource", "names another resource (https://elsewhere.example/mcp)"),
        ("wrong-issuer", "names issuer https://impostor.example"),
    ],
)
def test_a_stranger_s_bad_metadata_stops_the_login(services: Any, connect: Any, mode: str, said: str) -> None:
    from orbital.store import mcp_auth

    from tests.support.asgi_server import serving

    with serving(_stranger(mode)) as base:
        admin = connect("client", "owner")
        admin.call("config.set", {"path": "mcp.servers.odd", "value": {"url": f"{base}/mcp", "oauth": {}}})
        error = admin.error("mcp.login", {"name": "odd", "redirectUri": REDIRECT})
    assert error["code"] == 503 and error["message"].startswith("could not start the login of odd: ")
    assert said in error["message"]
    assert mcp_auth.get(services.table, "odd") is None


def test_an_expired_login_is_not_finished(services: Any, connect: Any, protected: Running) -> None:
    from orbital.store import keys, mcp_auth
    from orbital.tools import mcp_oauth

    admin = connect("client", "owner")
    _configure(admin, protected)
    started = admin.call("mcp.login", {"name": "prot", "redirectUri": REDIRECT})
    answer = _authorize(started["url"])
    stored = services.table.get(keys.mcp_login(answer["state"]))
    assert stored is not None and stored.data["expiresAt"] == started["expiresAt"]
    assert started["expiresAt"] - services.now_ms() <= mcp_auth.LOGIN_TTL_MS
    services.table.put(keys.mcp_login(answer["state"]), {**stored.data, "expiresAt": services.now_ms() - 1})
    with pytest.raises(mcp_oauth.UnknownLoginError):
        mcp_oauth.finish(services, answer["code"], answer["state"])
    assert protected.auth.code_exchanges == 0


def test_no_token_nor_secret_reaches_the_logs(
    services: Any, connect: Any, protected: Running, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from orbital.store import mcp_auth
    from orbital.tools import mcp_client

    caplog.set_level(logging.DEBUG)
    admin = connect("client", "owner")
    _configure(admin, protected)
    _login(admin, services)
    spec = _spec(services)
    protected.auth.expire_access_tokens()  # a refresh too
    assert mcp_client.call_tool(services, spec, "echo", {"text": "x"}).error is None
    grant = mcp_auth.get(services.table, "prot")
    assert grant is not None and grant.tokens is not None and protected.auth.refreshes == 1
    secrets = [grant.tokens["access_token"], grant.tokens["refresh_token"], grant.client["client_secret"]]
    # the gateway's own logs and its HTTP clients' (not botocore's debug dumps of the table's writes, nor the test
    # server's own)
    ours = [
        r for r in caplog.records if not r.name.startswith(("botocore", "boto3", "urllib3", "mcp.server", "uvicorn"))
    ]
    logged = "\n".join(f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in ours)
    assert "HTTP Request: POST" in logged  # the requests were logged, without their secrets
    leaked = [line for line in logged.splitlines() if any(s in line for s in secrets)]
    assert not leaked
