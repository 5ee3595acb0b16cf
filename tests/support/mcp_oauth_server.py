"""A local OAuth authorization server and the MCP server it protects, on one free loopback port, for tests.

Built with the SDK's server-side auth pieces (`MCPServer(auth_server_provider=…, auth=AuthSettings(…))`): protected
resource metadata at `/.well-known/oauth-protected-resource/mcp`, authorization server metadata, dynamic client
registration, `/authorize` (which approves at once: it redirects to the client's `redirect_uri` with a code, as a
user clicking "allow" would), `/token` (authorization code with PKCE, refresh with rotation) and `/revoke`; the MCP
endpoint `/mcp` (streamable HTTP) refuses any request without a live access token issued for it.

`OAuthServer` is the provider, with knobs for the tests: `access_ttl` (the `expires_in` of new access tokens),
`revoke_all()` (a user revoking the grant), `expire_access_tokens()` (tokens the server no longer takes while the
client still thinks them live), and counters of what the client did (`registrations`, `code_exchanges`,
`refreshes`, `authorized_requests`).
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

SCOPE = "mcp"


@dataclass
class OAuthServer:
    """The authorization server's state (an `OAuthAuthorizationServerProvider`), in memory."""

    resource: str = ""
    access_ttl: int = 3600
    clients: dict[str, OAuthClientInformationFull] = field(default_factory=dict)
    codes: dict[str, AuthorizationCode] = field(default_factory=dict)
    access: dict[str, AccessToken] = field(default_factory=dict)
    refresh: dict[str, RefreshToken] = field(default_factory=dict)
    registrations: int = 0
    code_exchanges: int = 0
    refreshes: int = 0
    authorized_requests: int = 0
    preregistered_secret: str | None = None

    # --- knobs -------------------------------------------------------------------------------------------------

    def revoke_all(self) -> None:
        """The user revoked the grant: every access and refresh token stops working."""
        self.access.clear()
        self.refresh.clear()

    def expire_access_tokens(self) -> None:
        """Every access token is refused from now on (its refresh token still works)."""
        for token in self.access.values():
            token.expires_at = int(time.time()) - 1

    def preregister(self, client_id: str, secret: str, redirect_uri: str) -> None:
        """A client registered by hand (the `oauth.clientId`/`clientSecret` of a server's config)."""
        self.clients[client_id] = OAuthClientInformationFull(
            client_id=client_id,
            client_secret=secret,
            redirect_uris=[redirect_uri],  # type: ignore[list-item]
            token_endpoint_auth_method="client_secret_post",
            grant_types=["authorization_code", "refresh_token"],
            scope=SCOPE,
        )

    # --- the provider ------------------------------------------------------------------------------------------

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.registrations += 1
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [SCOPE],
            expires_at=time.time() + 300,
            client_id=client.client_id or "",
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        found = self.codes.get(authorization_code)
        return found if found is not None and found.client_id == client.client_id else None

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        self.code_exchanges += 1
        return self._issue(client.client_id or "", authorization_code.scopes, authorization_code.resource)

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        found = self.refresh.get(refresh_token)
        return found if found is not None and found.client_id == client.client_id else None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        if self.refresh.pop(refresh_token.token, None) is None:
            raise TokenError("invalid_grant", "refresh token revoked")
        self.refreshes += 1
        return self._issue(client.client_id or "", scopes or refresh_token.scopes, refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        self.authorized_requests += 1
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access = f"at_{secrets.token_urlsafe(24)}"
        refresh = f"rt_{secrets.token_urlsafe(24)}"
        self.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=int(time.time()) + self.access_ttl,
            resource=resource,
        )
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes, resource=resource)
        return OAuthToken(
            access_token=access, expires_in=self.access_ttl, scope=" ".join(scopes), refresh_token=refresh
        )


@dataclass
class Running:
    base_url: str
    """The authorization server's issuer (`http://127.0.0.1:PORT`)."""
    url: str
    """The MCP endpoint (`{base_url}/mcp`, or `{base_url}/sse`)."""
    auth: OAuthServer


@contextlib.contextmanager
def oauth_mcp_server(*, access_ttl: int = 3600, transport: str = "streamable-http") -> Iterator[Running]:
    """The authorization server and the protected MCP server (tools `whoami`, `echo`), on uvicorn in a thread on
    a free loopback port; stopped afterwards. `transport="sse"`: the server speaks the older HTTP+SSE at `/sse`
    (its messages at `/messages/`, protected alike)."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    endpoint = f"{base}/sse" if transport == "sse" else f"{base}/mcp"
    provider = OAuthServer(resource=endpoint, access_ttl=access_ttl)
    server = MCPServer(
        "protected",
        auth_server_provider=provider,
        auth=AuthSettings(
            issuer_url=base,  # type: ignore[arg-type]
            resource_server_url=endpoint,  # type: ignore[arg-type]
            client_registration_options=ClientRegistrationOptions(
                enabled=True, valid_scopes=[SCOPE], default_scopes=[SCOPE]
            ),
            revocation_options=RevocationOptions(enabled=True),
            required_scopes=[SCOPE],
            validate_token_resource=True,
        ),
    )

    @server.tool()
    def whoami() -> str:
        """Who the server thinks is calling."""
        return "an authorized client"

    @server.tool()
    def echo(text: str) -> str:
        """Says the text back."""
        return f"echo: {text}"

    if transport == "sse":
        app = server.sse_app(host="127.0.0.1")
    else:
        app = server.streamable_http_app(stateless_http=True, json_response=True, host="127.0.0.1")
    http = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False))
    thread = threading.Thread(target=http.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not http.started:
            assert time.monotonic() < deadline and thread.is_alive(), "the OAuth test server did not start"
            time.sleep(0.01)
        yield Running(base_url=base, url=endpoint, auth=provider)
    finally:
        http.should_exit = True
        thread.join(timeout=30)
        sock.close()
