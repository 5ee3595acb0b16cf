"""Logging in to remote MCP servers that need OAuth (ADR 0045): authorization code with PKCE, on the SDK's OAuth
client pieces, split over two requests so it works where no process outlives a request (the AWS Lambdas).

1. `start` (`mcp.login`): discovers the server's protected resource metadata (RFC 9728; the `resource_metadata`
   of its 401 first, then the well-known URLs) and its authorization server's metadata (RFC 8414, the issuer
   checked), registers a client (RFC 7591) unless the server's config names one (`oauth.clientId`/`clientSecret`)
   or an earlier registration with that issuer and redirect URI is kept, draws the PKCE verifier and a `state`,
   keeps them in the table (10 minutes, single use: `store.mcp_auth`) and returns the URL to open.
2. `finish` (`GET /api/mcp/oauth/callback`): takes the login of the `state` the authorization server sent back
   (deleting it), checks the server's config still names the same URL, exchanges the code (with the verifier, the
   redirect URI and the resource, RFC 8707) and keeps the tokens as the server's grant.

Calls then carry the access token through `GrantAuth`, an `httpx2.Auth`: it refreshes the token a minute before it
expires (and once more when the server answers 401 anyway), keeps the new tokens, and sends tokens only to the URL
the grant was made for. A refresh the authorization server refuses (revoked or expired grant) marks the grant
`needs-login` (`auth_state`), and the call fails with `NeedsLoginError`, whose message says to log in again: never a
crash. Several processes may refresh at once: one whose refresh is refused adopts the tokens another one stored.

Tokens and client secrets never leave the table and the requests that need them: not in a method's result, a log
line, an error message or `config.get`. Responses of the servers are read up to `MAX_BODY` bytes, each request
within `HTTP_TIMEOUT_S` and each step of a login within `LOGIN_STEP_S`; redirects are not followed.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import AsyncGenerator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlencode, urlparse

import anyio
import httpx2
from mcp.client.auth import OAuthFlowError, OAuthRegistrationError, OAuthTokenError, PKCEParameters
from mcp.client.auth.oauth2 import OAuthContext, check_registration_usable
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    create_client_registration_request,
    create_oauth_metadata_request,
    extract_resource_metadata_from_www_auth,
    extract_scope_from_www_auth,
    get_client_metadata_scopes,
    issuers_match,
)
from mcp.shared.auth import (
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url
from pydantic import ValidationError

from orbital.ports.services import Services
from orbital.store import mcp_auth

CALLBACK_PATH = "/api/mcp/oauth/callback"
"""Where the authorization server sends the browser back (`rest.mcp_oauth`)."""
HTTP_TIMEOUT_S = 10.0
"""One request to a server or its authorization server during a login or a refresh."""
LOGIN_STEP_S = 25.0
"""All the requests of one step of a login (`start`, `finish`) together: within the 29 s an HTTP API request has on
AWS."""
MAX_BODY = 256 * 1024
"""The most of a metadata, registration or token response that is read."""
REFRESH_MARGIN_MS = 60_000
"""An access token that expires within this is refreshed before it is used."""
GRANT_TYPES = ["authorization_code", "refresh_token"]


class LoginError(Exception):
    """A login could not start or finish; the message says why (and holds no secret)."""


class UnknownLoginError(LoginError):
    """No login under way has this state: never started, finished already or expired."""


class NeedsLoginError(Exception):
    """The server's grant is missing, revoked or expired: someone must log in again."""


class Target(Protocol):
    """What this module needs of a server's spec (`tools.mcp_client.ServerSpec`)."""

    @property
    def name(self) -> str: ...

    @property
    def url(self) -> str: ...


def oauth_settings(spec: Any) -> dict[str, Any] | None:
    """The server's `oauth` section (`{scope?, clientId?, clientSecret?, clientName?}`), None when it has none (it
    does not use OAuth)."""
    raw = spec.get("oauth") if isinstance(spec, Mapping) else getattr(spec, "oauth", None)
    if raw is None:
        return None
    if isinstance(raw, Mapping):
        return {str(k): v for k, v in raw.items()}
    if hasattr(raw, "__dict__"):
        return {str(k): v for k, v in vars(raw).items()}
    return {}


def needs_login_message(name: str) -> str:
    return f"the server needs a login: run `orbital mcp login {name}` (or Log in in the console's MCP view)"


# --- reading responses ------------------------------------------------------------------------------------------


@dataclass
class _Http:
    """The HTTP client of one step of a login, and when the step must be done by (`time.monotonic()`)."""

    client: httpx2.Client
    deadline: float

    def left(self, host: str) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise LoginError(f"{host} took too long (a login step may take {LOGIN_STEP_S:.0f} s)")
        return min(HTTP_TIMEOUT_S, left)


@contextlib.contextmanager
def _http() -> Iterator[_Http]:
    with httpx2.Client(timeout=HTTP_TIMEOUT_S, follow_redirects=False) as client:
        yield _Http(client, time.monotonic() + LOGIN_STEP_S)


def _body(http: _Http, response: httpx2.Response) -> bytes:
    """The response's body, at most `MAX_BODY` bytes (LoginError past that, or past the step's deadline)."""
    host = response.request.url.host
    data = bytearray()
    for chunk in response.iter_bytes():
        data.extend(chunk)
        if len(data) > MAX_BODY:
            raise LoginError(f"{host} answered with more than {MAX_BODY // 1024} KB")
        http.left(host)
    return bytes(data)


def _send(http: _Http, request: httpx2.Request) -> tuple[httpx2.Response, bytes]:
    request.extensions["timeout"] = httpx2.Timeout(http.left(request.url.host)).as_dict()
    try:
        response = http.client.send(request, stream=True)
    except httpx2.HTTPError as exc:
        raise LoginError(f"could not reach {request.url.host}: {type(exc).__name__}") from None
    try:
        return response, _body(http, response)
    except httpx2.HTTPError as exc:
        raise LoginError(f"{request.url.host} broke off its answer: {type(exc).__name__}") from None
    finally:
        response.close()


def _error_text(body: bytes) -> str:
    """An OAuth error response in a few words (`error: description`), never more than 200 characters."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        text = data["error"]
        if isinstance(data.get("error_description"), str):
            text += f": {data['error_description']}"
        return text[:200]
    return body.decode("utf-8", "replace").strip()[:200] or "no details"


# --- starting a login --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Started:
    url: str
    expires_at_ms: int


@dataclass(frozen=True)
class _Discovered:
    prm: ProtectedResourceMetadata | None
    asm: OAuthMetadata | None
    issuer: str
    challenged_scope: str | None


def _origin(url: str) -> str:
    parsed = urlparse(url)
    return f"{parsed.scheme}://{parsed.netloc}"


def _discover(http: _Http, server_url: str) -> _Discovered:
    header_url: str | None = None
    challenged: str | None = None
    try:  # the server's own answer to a request without a token names its metadata (RFC 9728 §5.1)
        host = httpx2.URL(server_url).host
        with http.client.stream(
            "GET", server_url, headers={"Accept": "text/event-stream, application/json"}, timeout=http.left(host)
        ) as probe:
            header_url = extract_resource_metadata_from_www_auth(probe)
            challenged = extract_scope_from_www_auth(probe) if probe.status_code in (401, 403) else None
    except httpx2.HTTPError as exc:
        raise LoginError(f"could not reach the MCP server: {type(exc).__name__}") from None
    prm: ProtectedResourceMetadata | None = None
    for url in build_protected_resource_metadata_discovery_urls(header_url, server_url):
        response, body = _send(http, create_oauth_metadata_request(url))
        if response.status_code != 200:
            continue
        try:
            prm = ProtectedResourceMetadata.model_validate_json(body)
        except ValidationError:
            continue
        expected = resource_url_from_server_url(server_url)
        if prm.resource and not check_resource_allowed(
            requested_resource=expected, configured_resource=str(prm.resource)
        ):
            raise LoginError(f"the server's metadata names another resource ({prm.resource}), not {expected}")
        break
    auth_server = str(prm.authorization_servers[0]) if prm is not None and prm.authorization_servers else None
    expected_issuer = auth_server or _origin(server_url)
    asm: OAuthMetadata | None = None
    for url in build_oauth_authorization_server_metadata_discovery_urls(auth_server, server_url):
        response, body = _send(http, create_oauth_metadata_request(url))
        if response.status_code >= 500:
            break
        if response.status_code != 200:
            continue
        try:
            asm = OAuthMetadata.model_validate_json(body)
        except ValidationError:
            continue
        if not issuers_match(str(asm.issuer), expected_issuer):
            raise LoginError(f"the authorization server's metadata names issuer {asm.issuer}, not {expected_issuer}")
        expected_issuer = str(asm.issuer)
        break
    if prm is None and asm is None:
        raise LoginError("the server publishes no OAuth metadata: it may not need a login (remove its `oauth`)")
    return _Discovered(prm=prm, asm=asm, issuer=expected_issuer, challenged_scope=challenged)


def _endpoint(found: _Discovered, server_url: str, name: str) -> str:
    if found.asm is not None:
        value = {
            "authorize": found.asm.authorization_endpoint,
            "token": found.asm.token_endpoint,
        }[name]
        return str(value)
    return f"{_origin(server_url)}/{name}"


def _configured_client(oauth: dict[str, Any], found: _Discovered, redirect_uri: str) -> OAuthClientInformationFull:
    secret = oauth.get("clientSecret") or None
    method = "none"
    if secret:
        supported = (found.asm.token_endpoint_auth_methods_supported if found.asm else None) or []
        method = "client_secret_basic" if supported and "client_secret_post" not in supported else "client_secret_post"
    return OAuthClientInformationFull(
        client_id=str(oauth["clientId"]),
        client_secret=str(secret) if secret else None,
        token_endpoint_auth_method=method,
        redirect_uris=[redirect_uri],
        grant_types=list(GRANT_TYPES),
    )


def _kept_client(
    grant: mcp_auth.Grant | None, found: _Discovered, redirect_uri: str
) -> OAuthClientInformationFull | None:
    """The registration of an earlier login, if it was made with this issuer for this redirect URI."""
    if (
        grant is None
        or not grant.client
        or grant.client.get("configured")
        or not issuers_match(grant.issuer, found.issuer)
    ):
        return None
    try:
        client = OAuthClientInformationFull.model_validate(grant.client)
    except ValidationError:
        return None
    uris = [str(u) for u in client.redirect_uris or []]
    return client if redirect_uri in uris else None


def _register(
    http: _Http,
    oauth: dict[str, Any],
    found: _Discovered,
    server_url: str,
    redirect_uri: str,
    scope: str | None,
) -> OAuthClientInformationFull:
    loopback = urlparse(redirect_uri).hostname in ("127.0.0.1", "localhost", "::1")
    metadata = OAuthClientMetadata(
        redirect_uris=[redirect_uri],
        client_name=str(oauth.get("clientName") or "Orbital"),
        grant_types=list(GRANT_TYPES),
        response_types=["code"],
        scope=scope,
        application_type="native" if loopback else "web",
    )
    request = create_client_registration_request(found.asm, metadata, _origin(server_url))
    response, body = _send(http, request)
    if response.status_code not in (200, 201):
        raise LoginError(
            f"the authorization server refused to register the gateway ({response.status_code}): {_error_text(body)}"
        )
    try:
        data = json.loads(body)
        if isinstance(data, dict):
            data.pop("issuer", None)  # the issuer binding is ours to stamp, never the wire's
        client = OAuthClientInformationFull.model_validate(data)
        check_registration_usable(client)
    except (ValueError, OAuthRegistrationError) as exc:
        raise LoginError(f"the authorization server's registration answer is unusable: {str(exc)[:200]}") from None
    client.issuer = found.issuer
    return client


def _resource(found: _Discovered, server_url: str) -> str:
    resource = resource_url_from_server_url(server_url)
    if found.prm is not None and found.prm.resource:
        prm_resource = str(found.prm.resource)
        if check_resource_allowed(requested_resource=resource, configured_resource=prm_resource):
            resource = prm_resource
    return resource


def start(services: Services, spec: Target, redirect_uri: str) -> Started:
    """Begin a login to `spec`'s server: the URL to open in a browser (valid 10 minutes). LoginError when the
    server has no `oauth` section or its metadata cannot be found or used."""
    oauth = oauth_settings(spec)
    if oauth is None:
        raise LoginError(f"MCP server {spec.name} has no `oauth` section: it does not use a login")
    with _http() as http:
        found = _discover(http, spec.url)
        scope = oauth.get("scope") or get_client_metadata_scopes(
            found.challenged_scope, found.prm, found.asm, GRANT_TYPES
        )
        configured = bool(oauth.get("clientId"))
        if configured:
            client = _configured_client(oauth, found, redirect_uri)
        else:
            kept = _kept_client(mcp_auth.get(services.table, spec.name), found, redirect_uri)
            client = kept or _register(http, oauth, found, spec.url, redirect_uri, scope)
    pkce = PKCEParameters.generate()
    state = secrets.token_urlsafe(32)
    resource = _resource(found, spec.url)
    params = {
        "response_type": "code",
        "client_id": client.client_id,
        "redirect_uri": redirect_uri,
        "state": state,
        "code_challenge": pkce.code_challenge,
        "code_challenge_method": "S256",
        "resource": resource,
    }
    if scope:
        params["scope"] = str(scope)
        if "offline_access" in str(scope).split():
            params["prompt"] = "consent"
    endpoint = _endpoint(found, spec.url, "authorize")
    url = f"{endpoint}{'&' if urlparse(endpoint).query else '?'}{urlencode(params)}"
    stored_client = client.model_dump(mode="json", exclude_none=True)
    if configured:
        stored_client["configured"] = True
    expires = mcp_auth.save_login(
        services.table,
        state,
        {
            "server": spec.name,
            "url": spec.url,
            "verifier": pkce.code_verifier,
            "redirectUri": redirect_uri,
            "tokenEndpoint": _endpoint(found, spec.url, "token"),
            "issuer": found.issuer,
            "issParam": bool(found.asm is not None and found.asm.authorization_response_iss_parameter_supported),
            "resource": resource,
            "client": stored_client,
        },
        now_ms=services.now_ms(),
    )
    return Started(url=url, expires_at_ms=expires)


# --- finishing it ------------------------------------------------------------------------------------------------


def _client_of(data: dict[str, Any]) -> OAuthClientInformationFull:
    return OAuthClientInformationFull.model_validate({k: v for k, v in data.items() if k != "configured"})


def _token_auth(client: OAuthClientInformationFull, form: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The token request's form and headers with the client's credentials, as the SDK's flow sends them."""
    context = OAuthContext(
        server_url="",
        client_metadata=OAuthClientMetadata(redirect_uris=None),
        storage=None,  # type: ignore[arg-type]
        redirect_handler=None,
        callback_handler=None,
    )
    context.client_info = client
    try:
        return context.prepare_token_auth(form, {"Content-Type": "application/x-www-form-urlencoded"})
    except OAuthTokenError as exc:
        raise LoginError(str(exc)) from None


def _expiry(token: OAuthToken, now_ms: int) -> int | None:
    return now_ms + int(token.expires_in) * 1000 if token.expires_in is not None else None


def _tokens(token: OAuthToken) -> dict[str, Any]:
    return token.model_dump(mode="json", exclude_none=True, exclude={"expires_in"})


def server_url_of(services: Services, name: str) -> str | None:
    """The URL of server `name` in the configuration, None when it is gone or has no `oauth` section."""
    servers = ((services.config.effective().get("mcp") or {}).get("servers")) or {}
    entry = servers.get(name) if isinstance(servers, dict) else None
    if not isinstance(entry, dict) or entry.get("oauth") is None or not isinstance(entry.get("url"), str):
        return None
    return str(entry["url"])


def finish(
    services: Services, code: str | None, state: str | None, *, iss: str | None = None, error: str | None = None
) -> str:
    """Finish the login of `state` with the authorization server's `code`: the server's name once its tokens are
    kept. LoginError (with what went wrong) otherwise; the login is used up either way."""
    if not state:
        raise UnknownLoginError("the authorization server sent no state back")
    pending = mcp_auth.take_login(services.table, state, now_ms=services.now_ms())
    if pending is None:
        raise UnknownLoginError("this login is unknown, was finished already or has expired: start it again")
    name = str(pending.get("server", ""))
    if error:
        raise LoginError(f"the authorization server refused the login of {name}: {error[:200]}")
    if not code:
        raise LoginError(f"the authorization server sent no code for {name}")
    if server_url_of(services, name) != pending.get("url"):
        raise LoginError(f"MCP server {name} was removed or its URL changed since the login started: start it again")
    issuer = str(pending.get("issuer", ""))
    if iss is not None and iss != issuer:  # RFC 9207: the answer must come from the server asked
        raise LoginError(f"the login's answer came from another authorization server ({iss[:100]})")
    if iss is None and pending.get("issParam"):
        raise LoginError("the authorization server's answer lacks the issuer it promised to send")
    client = _client_of(dict(pending.get("client") or {}))
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": str(pending.get("redirectUri", "")),
        "client_id": client.client_id or "",
        "code_verifier": str(pending.get("verifier", "")),
    }
    if pending.get("resource"):
        form["resource"] = str(pending["resource"])
    form, headers = _token_auth(client, form)
    token_endpoint = str(pending.get("tokenEndpoint", ""))
    with _http() as http:
        response, body = _send(http, httpx2.Request("POST", token_endpoint, data=form, headers=headers))
    if response.status_code not in (200, 201):
        raise LoginError(f"the authorization server refused the code ({response.status_code}): {_error_text(body)}")
    try:
        token = OAuthToken.model_validate_json(body)
    except ValidationError:
        raise LoginError("the authorization server's token answer is not a token") from None
    now = services.now_ms()
    mcp_auth.save(
        services.table,
        name,
        url=str(pending["url"]),
        issuer=issuer,
        token_endpoint=token_endpoint,
        resource=str(pending["resource"]) if pending.get("resource") else None,
        client=dict(pending.get("client") or {}),
        tokens=_tokens(token),
        expires_at_ms=_expiry(token, now),
        now_ms=now,
    )
    return name


# --- the state of a server's login, and forgetting it ------------------------------------------------------------


def auth_state(services: Services, spec: Any) -> str:
    """`none` (the server does not use OAuth), `ok` (a grant for its URL is kept) or `needs-login`."""
    if oauth_settings(spec) is None:
        return "none"
    name = spec["name"] if isinstance(spec, Mapping) else spec.name
    url = spec["url"] if isinstance(spec, Mapping) else spec.url
    return mcp_auth.state(services.table, str(name), str(url))


def logout(services: Services, name: str) -> None:
    """Forget the server's grant (tokens and registration)."""
    mcp_auth.forget(services.table, name)


# --- calls: the bearer, refreshed ---------------------------------------------------------------------------------


def auth_for(services: Services, spec: Target) -> GrantAuth | None:
    """The `httpx2.Auth` of calls to `spec`'s server, None when it does not use OAuth."""
    if oauth_settings(spec) is None:
        return None
    return GrantAuth(services, spec.name, spec.url)


class GrantAuth(httpx2.Auth):
    """Adds the server's access token to each request; refreshes it before it expires, and once when the server
    answers 401. Raises NeedsLoginError when there is no usable grant or its refresh is refused."""

    def __init__(self, services: Services, name: str, url: str) -> None:
        self.services = services
        self.name = name
        self.url = url

    def __repr__(self) -> str:
        return f"GrantAuth({self.name!r})"

    async def _grant(self) -> mcp_auth.Grant:
        grant = await anyio.to_thread.run_sync(mcp_auth.get, self.services.table, self.name)
        if grant is None or not grant.usable_for(self.url):
            raise NeedsLoginError(needs_login_message(self.name))
        return grant

    def _expiring(self, grant: mcp_auth.Grant) -> bool:
        return grant.expires_at_ms is not None and grant.expires_at_ms - self.services.now_ms() <= REFRESH_MARGIN_MS

    def _refresh_request(self, grant: mcp_auth.Grant) -> httpx2.Request:
        assert grant.tokens is not None
        client = _client_of(grant.client)
        form = {
            "grant_type": "refresh_token",
            "refresh_token": str(grant.tokens.get("refresh_token", "")),
            "client_id": client.client_id or "",
        }
        if grant.resource:
            form["resource"] = grant.resource
        form, headers = _token_auth(client, form)
        return httpx2.Request(
            "POST",
            grant.token_endpoint,
            data=form,
            headers=headers,
            extensions={"timeout": httpx2.Timeout(HTTP_TIMEOUT_S).as_dict()},
        )

    async def _after_refresh(self, grant: mcp_auth.Grant, response: httpx2.Response) -> mcp_auth.Grant:
        body = await response.aread()  # httpx2 reads it anyway once the flow goes on (capped by the transport)
        if len(body) > MAX_BODY:
            raise OAuthFlowError(f"the token endpoint of {self.name} answered with too much")
        table = self.services.table
        if response.status_code == 200:
            try:
                token = OAuthToken.model_validate_json(bytes(body))
            except ValidationError:
                raise OAuthFlowError(f"the token endpoint of {self.name} sent no token") from None
            tokens = _tokens(token)
            old = grant.tokens or {}
            for kept in ("refresh_token", "scope"):  # RFC 6749 §6: unchanged when omitted
                if kept not in tokens and kept in old:
                    tokens[kept] = old[kept]
            now = self.services.now_ms()
            return await anyio.to_thread.run_sync(
                lambda: mcp_auth.replace_tokens(table, grant, tokens, _expiry(token, now), now_ms=now, reason="")
            )
        current = await anyio.to_thread.run_sync(mcp_auth.get, table, self.name)
        if (
            current is not None
            and current.usable_for(self.url)
            and (current.tokens or {}).get("refresh_token") != (grant.tokens or {}).get("refresh_token")
        ):
            return current  # another process refreshed first (and the server rotated the refresh token)
        if response.status_code in (400, 401):  # invalid_grant and kin: the grant was revoked or expired
            reason = f"the authorization server refused the refresh: {_error_text(bytes(body))}"
            now = self.services.now_ms()
            await anyio.to_thread.run_sync(
                lambda: mcp_auth.replace_tokens(table, grant, None, None, now_ms=now, reason=reason)
            )
            raise NeedsLoginError(needs_login_message(self.name))
        raise OAuthFlowError(f"the token endpoint of {self.name} failed ({response.status_code})")

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        grant = await self._grant()
        refreshed = False
        if self._expiring(grant) and (grant.tokens or {}).get("refresh_token"):
            response = yield self._refresh_request(grant)
            grant = await self._after_refresh(grant, response)
            refreshed = True
        assert grant.tokens is not None
        request.headers["Authorization"] = f"Bearer {grant.tokens.get('access_token', '')}"
        response = yield request
        if response.status_code != 401:
            return
        if refreshed or not grant.tokens.get("refresh_token"):
            await self._refused(grant)
        answer = yield self._refresh_request(grant)
        grant = await self._after_refresh(grant, answer)
        assert grant.tokens is not None
        request.headers["Authorization"] = f"Bearer {grant.tokens.get('access_token', '')}"
        response = yield request
        if response.status_code == 401:
            await self._refused(grant)

    async def _refused(self, grant: mcp_auth.Grant) -> None:
        table = self.services.table
        now = self.services.now_ms()
        await anyio.to_thread.run_sync(
            lambda: mcp_auth.replace_tokens(
                table, grant, None, None, now_ms=now, reason="the server refused the access token"
            )
        )
        raise NeedsLoginError(needs_login_message(self.name))
