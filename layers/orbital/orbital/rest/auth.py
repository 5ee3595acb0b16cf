"""Who is calling an HTTP route (ADR 0025 for the whole model, ADR 0029 for the HTTP side).

- The gateway's own credential: `Authorization: Bearer <gateway token>`; on a gateway without a token (only ever
  loopback: the local front door refuses every other peer) any request holds it.
- A WindieOS install: `Authorization: Bearer wnd_install_…`, a token from `POST /api/install/register`. It names a
  user id and reaches only the WindieOS routes, with that user's artifacts.

A missing or wrong bearer is 401 with `WWW-Authenticate: Bearer`. The comparison is constant-time and the token
is never logged.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from fastapi import HTTPException, Request
from starlette.requests import HTTPConnection

from orbital.aws import secrets
from orbital.runtime.services import get_services
from orbital.store import installs

UNAUTHORIZED = "Not authenticated"
FORBIDDEN = "This route needs the gateway token"


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


def identify(request: HTTPConnection) -> Caller:
    """The caller of a route (or socket) any credential may use (the gateway's or an install's); 401 otherwise."""
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
    expected = secrets.gateway_token(settings) or ""
    if presented is None or not expected or not hmac.compare_digest(presented.encode(), expected.encode()):
        raise _refused()
    return Caller()


def gateway_only(request: Request) -> Caller:
    """The caller of a route only the gateway's own credential may use: 401 without one, 403 for an install."""
    caller = identify(request)
    if not caller.is_gateway:
        raise HTTPException(403, FORBIDDEN)
    return caller
