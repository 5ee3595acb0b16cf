"""`mcp.login {name, redirectUri?}`: start the OAuth login of a remote MCP server that needs one (its config has an
`oauth` section; ADR 0045). Admin only: a login hands the gateway a credential for the server.

The answer is the URL to open in a browser (`url`) and when the login expires (`expiresAt`, 10 minutes). The
authorization server sends the browser back to the gateway's `GET /api/mcp/oauth/callback`
(`rest.mcp_oauth`), which finishes the login and keeps the tokens; they are never in any method's answer.

`redirectUri` is that callback's full URL as the browser reaches it: the local gateway knows its own address, so it
may be left out there; a gateway on AWS needs it (`{HttpApiUrl}/api/mcp/oauth/callback`; the CLI and the console
pass it). It must end in `/api/mcp/oauth/callback`, and be https unless it is on the loopback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from orbital.domain import roles
from orbital.errors import BadRequestError, NotFoundError, UnavailableError
from orbital.protocol.params import Text
from orbital.protocol.registry import CLIENT, Params, Result, Router
from orbital.tools import mcp_client

if TYPE_CHECKING:
    from orbital.protocol.context import CallContext

router = Router("mcp")

CALLBACK_PATH = "/api/mcp/oauth/callback"
"""The callback's path (`tools.mcp_oauth.CALLBACK_PATH`; that module loads the MCP SDK: imported only for a login)."""
MAX_URI = 2000
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class LoginParams(Params):
    name: Text = None
    redirectUri: Text = None


class LoginResult(Result):
    name: str
    url: str
    expiresAt: int


def _redirect_uri(ctx: CallContext, given: str | None) -> str:
    if given is None or not given.strip():
        endpoint = ctx.services.capabilities.http_api_url
        if not endpoint:
            raise BadRequestError(
                "redirectUri required: the gateway's HTTP API URL followed by "
                f"{CALLBACK_PATH} (on AWS, the stack's HttpApiUrl output)"
            )
        parts = urlsplit(endpoint)
        return f"{parts.scheme}://{parts.netloc}{CALLBACK_PATH}"
    uri = given.strip()
    if len(uri) > MAX_URI:
        raise BadRequestError(f"redirectUri: at most {MAX_URI} characters")
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadRequestError("redirectUri must be an http:// or https:// URL")
    if parts.scheme == "http" and parts.hostname not in _LOOPBACK:
        raise BadRequestError("redirectUri must be https:// (http:// only on the loopback)")
    if parts.query or parts.fragment or not parts.path.endswith(CALLBACK_PATH):
        raise BadRequestError(f"redirectUri must end in {CALLBACK_PATH}, without a query")
    return uri


@router.method("mcp.login", params=LoginParams, result=LoginResult, modes=CLIENT, scope=roles.ADMIN)
def mcp_login(ctx: CallContext, params: LoginParams) -> dict[str, Any]:
    """Start the login (OAuth) of an MCP server that needs one: the URL to open in a browser, valid 10 minutes. The
    authorization server sends the browser back to the gateway (`/api/mcp/oauth/callback`), which keeps the
    tokens."""
    name = (params.name or "").strip()
    if not name:
        raise BadRequestError("name required")
    spec = mcp_client.spec(ctx.config(), name)
    if spec is None:
        raise NotFoundError(f"no MCP server named {name[:64]} is configured")
    if spec.oauth is None:
        raise BadRequestError(f"MCP server {name} has no oauth section: it does not use a login")
    redirect_uri = _redirect_uri(ctx, params.redirectUri)
    from orbital.tools import mcp_oauth  # lazy: the MCP SDK loads for a login, not with the method registry

    try:
        started = mcp_oauth.start(ctx.services, spec, redirect_uri)
    except mcp_oauth.LoginError as exc:
        raise UnavailableError(f"could not start the login of {name}: {exc}") from None
    return {"name": name, "url": started.url, "expiresAt": started.expires_at_ms}
