"""Who is calling an HTTP route (ADR 0025 for the whole model, ADR 0029 for the HTTP side).

- The gateway's own credential: `Authorization: Bearer <gateway token>`; on a gateway without a token (only ever
  loopback: the local front door refuses every other peer) any request holds it.
- A WindieOS install: `Authorization: Bearer wnd_install_…`, a token from `POST /api/install/register`. It names a
  user id and reaches only the WindieOS routes, with that user's artifacts.

A missing or wrong bearer is 401 with `WWW-Authenticate: Bearer`. The comparison is constant-time and the token
is never logged.

Every route depends on one of these callers, except the routes of `PUBLIC` (each with the reason it needs no
bearer); a test walks the app's routes and refuses any other route that answers without one. Routes that depend
on them show the bearer scheme in the OpenAPI document (`/docs`'s Authorize button).
"""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException, Security
from fastapi.security import HTTPBearer
from starlette.requests import HTTPConnection

from orbital.aws import secrets
from orbital.runtime.services import get_services
from orbital.store import installs

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
    ("GET", "/docs/oauth2-redirect"): "part of the docs page",
}
"""(method, path) -> why the route needs no gateway bearer. Any route not here must refuse a request without one
(tests/functional/test_rest_app.py walks them all). The console's page and static files will join it."""


@dataclass(frozen=True)
class Caller:
    user_id: str | None = None
    """The install's user id; None for the gateway's own credential."""

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
    (`_scheme` only puts the bearer scheme on the route in the OpenAPI document.)"""
    services = get_services()
    settings = services.settings
    presented = bearer(request)
    if presented is not None and installs.looks_like_token(presented):
        install = installs.find(services.table, presented)
        if install is None:
            raise _refused()
        return Caller(user_id=install.user_id)
    if not secrets.token_configured(settings):
        if settings.require_token:  # a deployment without its token serves nothing
            raise HTTPException(503, "Gateway auth token not configured")
        return Caller()
    try:
        expected = secrets.gateway_token(settings) or ""
    except Exception as exc:  # the secret could not be read: nobody gets in, and the caller is told it may retry
        log.error("reading the gateway token failed (%s)", type(exc).__name__)
        raise HTTPException(503, "The gateway token could not be read; try again") from None
    if presented is None or not expected or not hmac.compare_digest(presented.encode(), expected.encode()):
        raise _refused()
    return Caller()


def gateway_only(request: HTTPConnection, _scheme: Any = _DOCUMENTED) -> Caller:
    """The caller of a route only the gateway's own credential may use: 401 without one, 403 for an install."""
    caller = identify(request)
    if not caller.is_gateway:
        raise HTTPException(403, FORBIDDEN)
    return caller
