"""`GET /api/mcp/oauth/callback`: where an MCP server's authorization server sends the browser back at the end of a
login started by `mcp.login` (ADR 0045). It finishes the login (`tools.mcp_oauth.finish`: the code exchanged, the
tokens kept) and answers a small page saying the server is logged in, or what failed.

No bearer: the browser that comes back holds none, and the `state` of the query is the credential (256 random bits,
valid 10 minutes, used once: the login is deleted in the request that reads it). A wrong, used or expired state
counts against the peer like a wrong token (`runtime.attempts`). The page shows no token, loads nothing and is not
cached; the server's tool list is read again at its next use.
"""

from __future__ import annotations

import html
import logging

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import HTMLResponse

from orbital.ports.services import Services
from orbital.rest.deps import ServicesDep
from orbital.runtime.attempts import ATTEMPTS, PEER_UID, TOO_MANY, peer_key
from orbital.store import mcp as tool_cache

log = logging.getLogger("orbital.rest")

router = APIRouter()

PATH = "/api/mcp/oauth/callback"
"""`tools.mcp_oauth.CALLBACK_PATH` (that module loads the MCP SDK: imported only when a login comes back)."""
MAX_PARAM = 4096
_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


def _page(title: str, text: str, status: int) -> HTMLResponse:
    body = (
        "<!doctype html><html><head><meta charset='utf-8'><title>Orbital: "
        f"{html.escape(title)}</title><style>body{{font-family:sans-serif;margin:3em auto;max-width:40em}}</style>"
        f"</head><body><h1>{html.escape(title)}</h1><p>{html.escape(text)}</p></body></html>"
    )
    return HTMLResponse(body, status_code=status, headers=_HEADERS)


def _param(request: Request, name: str) -> str | None:
    value = request.query_params.get(name)
    return value[:MAX_PARAM] if value is not None else None


def _finish(services: Services, request: Request, peer: str | None) -> HTMLResponse:
    if ATTEMPTS.blocked(peer):
        return _page("Too many attempts", TOO_MANY, 429)
    from orbital.tools import mcp_oauth  # lazy: the MCP SDK loads when a login comes back, not with the app

    error = _param(request, "error")
    if error:
        description = _param(request, "error_description")
        error = f"{error}: {description}" if description else error
    try:
        name = mcp_oauth.finish(
            services, _param(request, "code"), _param(request, "state"), iss=_param(request, "iss"), error=error
        )
    except mcp_oauth.UnknownLoginError as exc:
        ATTEMPTS.failed(peer)
        return _page("Login failed", str(exc), 400)
    except mcp_oauth.LoginError as exc:
        log.info("an MCP login failed: %s", exc)
        return _page("Login failed", str(exc), 400)
    try:
        tool_cache.mark_stale(services.table, name)
    except Exception:  # the list is read again when it is stale anyway
        log.warning("could not mark the tools of MCP server %s stale", name, exc_info=True)
    return _page(
        "Logged in",
        f"Orbital is logged in to the MCP server {name}: its tools are offered again. You may close this page.",
        200,
    )


@router.get(
    PATH,
    tags=["mcp"],
    summary="Where an MCP server's login (OAuth) comes back to (no bearer: the single-use state is the credential)",
    response_class=HTMLResponse,
    responses={400: {"description": "The login failed (the page says why)"}, 429: {"description": TOO_MANY}},
)
async def mcp_oauth_callback(request: Request, services: ServicesDep) -> HTMLResponse:
    peer = peer_key(request.client.host if request.client else None, request.scope.get(PEER_UID))
    return await run_in_threadpool(_finish, services, request, peer)
