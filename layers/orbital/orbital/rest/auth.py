"""Who is calling an HTTP route (ADR 0025 for the whole model, ADR 0029 for the HTTP side).

- The gateway's own credential: `Authorization: Bearer <gateway token>`; on a gateway without a token (only ever
  loopback: the local front door refuses every other peer) any request holds it.
- A device token (`orb_dev_…`, ADR 0043) of a role that may act as a client (`admin`, `operator`, `client`,
  `viewer`): the caller has that `role` and `device_id`, and the methods it calls check the role. A `node` or
  `channel` token is for its socket only: 403 on every route.
- A WindieOS install: `Authorization: Bearer wnd_install_…`, a token from `POST /api/install/register`. It names a
  user id and reaches only the WindieOS routes, with that user's artifacts.

A missing or wrong bearer is 401 with `WWW-Authenticate: Bearer`. What a bearer is worth is judged by
`runtime.credentials`, as at the WebSocket's upgrade: constant-time, never logged.

Every route depends on one of these callers, except the routes of `PUBLIC` (each with the reason it needs no
bearer); a test walks the app's routes and refuses any other route that answers without one. Routes that depend
on them show the bearer scheme in the OpenAPI document (`/docs`'s Authorize button).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException, Security
from fastapi.security import HTTPBearer
from starlette.requests import HTTPConnection

from orbital.domain import roles
from orbital.engines import device_auth
from orbital.rest.deps import services_for
from orbital.runtime import credentials
from orbital.runtime.attempts import ATTEMPTS, PEER_UID, TOO_MANY, peer_key

log = logging.getLogger("orbital.rest")

UNAUTHORIZED = "Not authenticated"
FORBIDDEN = "This route needs the gateway token"

SCHEME = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="The gateway token (or, on the WindieOS routes, an install token). Not needed on a local gateway "
    "without a token.",
)
"""Documents the bearer in the OpenAPI document; the callers below read and check the header themselves."""
_DOCUMENTED = Security(SCHEME)

PUBLIC: dict[tuple[str, str], str] = {
    ("GET", "/health"): "says only that the gateway is up",
    ("GET", "/media/{name}"): "GSV's media route: the names are random UUIDs",
    ("POST", "/channels/telegram/{account}/webhook"): "checked against the account's own webhook secret",
    ("GET", "/openapi.json"): "describes the routes, acts on nothing",
    ("GET", "/docs"): "the page that shows /openapi.json",
    ("GET", "/"): "the console's page: the same for everyone; it asks for the token itself",
    ("GET", "/console/config.json"): "the console's settings: the WebSocket URL and whether a token is needed",
    ("GET", "/console/{name:path}"): "the console's scripts, style sheet and icon",
    ("POST", "/api/v1/pair/exchange"): "swaps a one-time pairing code for a device token; wrong codes are rate-limited",
    ("GET", "/api/mcp/oauth/callback"): "ends an MCP server's login: the single-use state it carries is the credential",
}
"""(method, path) -> why the route needs no gateway bearer. Any route not here must refuse a request without one
(tests/functional/test_rest_app.py walks them all). The console's page and static files will join it."""


@dataclass(frozen=True)
class Caller:
    user_id: str | None = None
    """The install's user id; None for the gateway's own credential."""
    install_id: str | None = None
    role: str = roles.DEFAULT_ROLE
    """The role of the credential (ADR 0042): what the methods it calls over `/api/v1` may do; the gateway token is
    `admin`."""
    device_id: str | None = None
    """The device whose token it is (None for the gateway token)."""

    @property
    def is_gateway(self) -> bool:
        return self.user_id is None


def bearer(request: HTTPConnection) -> str | None:
    value = request.headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _refused() -> HTTPException:
    return HTTPException(401, UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"})


def identify(request: HTTPConnection, _scheme: Any = _DOCUMENTED) -> Caller:
    """The caller of a route (or socket) any credential may use (the gateway's or an install's); 401 otherwise.
    (`_scheme` only puts the bearer scheme on the route in the OpenAPI document.) A peer that failed too often is
    refused with 429 before its bearer is looked at (`runtime.attempts`)."""
    peer = peer_key(request.client.host if request.client else None, request.scope.get(PEER_UID))
    if ATTEMPTS.blocked(peer):
        raise HTTPException(429, TOO_MANY, headers={"Retry-After": "60"})
    try:
        judged = credentials.judge(services_for(request), bearer(request))
    except credentials.TokenUnreadableError:  # nobody gets in, and the caller is told it may retry
        raise HTTPException(503, "The gateway token could not be read; try again") from None
    kind = judged.kind
    if kind is credentials.Kind.MISSING_TOKEN:  # a deployment without its token serves nothing
        raise HTTPException(503, "Gateway auth token not configured")
    if kind is credentials.Kind.INSTALL and judged.install is not None:
        return Caller(user_id=judged.install.user_id, install_id=judged.install.install_id)
    if kind is credentials.Kind.DEVICE and judged.device is not None:
        device = judged.device
        if device.role not in device_auth.CLIENT_ROLES:
            raise HTTPException(403, f"A {device.role} device token is for its {device.role} socket only")
        return Caller(role=device.role, device_id=device.token_id)
    if kind is credentials.Kind.GATEWAY or (kind is credentials.Kind.NONE and not judged.token_set):
        return Caller()
    if kind is credentials.Kind.WRONG:
        ATTEMPTS.failed(peer)
    raise _refused()


def gateway_only(request: HTTPConnection, _scheme: Any = _DOCUMENTED) -> Caller:
    """The caller of a route only the gateway's own credential may use: 401 without one, 403 for an install. A
    device token of a client role passes as a caller of its role (`Caller.role`): what that role may do is each
    route's and method's check (ADR 0042)."""
    caller = identify(request)
    if not caller.is_gateway:
        raise HTTPException(403, FORBIDDEN)
    return caller


def scope_refusal(scope: str, role: str) -> str:
    """The 403 sentence of a route whose scope (ADR 0042) the caller's role lacks."""
    return f"This route needs scope {scope}; this device's role is {role}"


def gateway_with(scope: str) -> Callable[..., Caller]:
    """A route's caller: one `gateway_only` lets in whose role holds `scope` (403 otherwise; ADR 0042)."""

    def caller_with_scope(request: HTTPConnection, _scheme: Any = _DOCUMENTED) -> Caller:
        caller = gateway_only(request)
        if not roles.allows(caller.role, scope):
            raise HTTPException(403, scope_refusal(scope, caller.role))
        return caller

    return caller_with_scope


def any_with(scope: str) -> Callable[..., Caller]:
    """A route's caller: one `identify` lets in (an install, or the gateway's credential) whose role, when it is not
    an install, holds `scope` (403 otherwise; ADR 0042). An install's reach is its own routes' business."""

    def caller_with_scope(request: HTTPConnection, _scheme: Any = _DOCUMENTED) -> Caller:
        caller = identify(request)
        if caller.is_gateway and not roles.allows(caller.role, scope):
            raise HTTPException(403, scope_refusal(scope, caller.role))
        return caller

    return caller_with_scope
