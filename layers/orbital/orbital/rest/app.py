"""The gateway's HTTP API: one FastAPI app (ADR 0029), served by the `rest_api` and `channel_webhook` Lambdas through
Mangum and mounted on the local gateway's own port.

Routers: `core` (health, GSV media, channel webhooks), `windie` (the routes WindieOS's SDKs call) and `admin`
(every client method as `POST /api/v1/{method}`, generated from the registry). `/openapi.json` and `/docs` describe
every route; both need no credential (they describe, they do not act). Every error is `{"detail": message,
"code": code}` (`admin.error_response`): the admin API's code is the GSV code, every other route's its HTTP status
(401 keeps its `WWW-Authenticate`, FastAPI's own 422 becomes one sentence). An admin API call is judged by its
bearer before its body is read (`admin.AuthFirst`); request bodies are capped before they are read (`limits`); who
may call what is `auth`'s.

Nothing is built at import, and FastAPI is not imported with this module (the entry points' cold import stays
small): `create_app()` builds the app, `lambda_handler()` the Mangum adapter around it, each once per process, at
the first request.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orbital import __version__
from orbital.rest.limits import BodyLimit, body_limit, too_large

if TYPE_CHECKING:
    from fastapi import FastAPI

DESCRIPTION = """Orbital's HTTP API. The WebSocket at `/ws` is the main way in (GSV, xeno, Exoclaw and WindieOS
clients); these routes serve health, media, channel webhooks, the routes WindieOS's SDKs call, and the **admin
API**: every method a GSV client socket may call (but `connect`) is also `POST /api/v1/{method}`, its params as the
JSON body, its payload as the answer; errors are `{"detail", "code"}` with the HTTP status of the GSV code.

With a gateway token, every route but `/health`, `/media/{name}`, webhooks and these docs needs
`Authorization: Bearer <token>` (use **Authorize**)."""


def create_app() -> FastAPI:
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from starlette.responses import Response

    # lazy, as FastAPI above: the app and its routes are built at the first request (ADR 0029)
    from orbital.methods import registry
    from orbital.rest import admin, console, core, mcp_oauth, mcp_server, pairing, windie

    app = FastAPI(
        title="Orbital",
        version=__version__,
        description=DESCRIPTION,
        docs_url=None,  # `/docs` is the console's (`rest.console`): Swagger UI from the gateway's own files
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.include_router(core.router)
    app.include_router(console.router)
    app.include_router(windie.router)
    app.include_router(pairing.router)
    app.include_router(mcp_oauth.router)
    app.include_router(admin.router(registry()))
    app.router.routes.append(mcp_server.route())  # `/mcp`: Orbital as an MCP server

    build_document = app.openapi

    def document() -> dict[str, Any]:
        return admin.with_error_schema(build_document())  # built once, then FastAPI's cached copy

    app.openapi = document  # type: ignore[method-assign]

    @app.exception_handler(StarletteHTTPException)
    async def refused(request: Request, exc: StarletteHTTPException) -> Response:
        return admin.error_response(exc.status_code, _sentence(exc.detail), headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        if request.url.path.startswith(admin.PREFIX + "/"):
            return await admin.invalid_params(request, exc)
        return admin.error_response(422, "Invalid request: " + admin.describe_errors(exc.errors()))

    app.add_middleware(BodyLimit)
    app.add_middleware(admin.AuthFirst)  # added last: it runs first
    return app


def _sentence(detail: Any) -> str:
    return str(detail) if detail else "Request failed"


@functools.cache
def lambda_handler() -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    """The Lambda handler's body: an API Gateway HTTP API event (payload format 2.0) in, its response out. A body
    over its route's limit is refused before it is decoded (an admin API call without the bearer with the 401)."""
    from mangum import Mangum

    adapter = Mangum(create_app(), lifespan="off")

    def serve(event: dict[str, Any], context: Any) -> dict[str, Any]:
        http = (event.get("requestContext") or {}).get("http") or {}
        path = str(event.get("rawPath") or http.get("path") or "/")
        limit = body_limit(str(http.get("method") or "GET").upper(), path, on_lambda=True)
        raw = event.get("body") or ""
        encoded = bool(event.get("isBase64Encoded"))
        size = len(raw) * 3 // 4 - raw[-2:].count("=") if encoded else len(raw.encode("utf-8"))
        if size > limit:
            refused = _refused_admin_call(
                path, event.get("headers") or {}
            )  # the bearer first, as the app itself judges it (AuthFirst)
            if refused is not None:
                return refused
            return {
                "statusCode": 413,
                "headers": {"content-type": "application/json"},
                "body": json.dumps(too_large(limit)),
                "isBase64Encoded": False,
            }
        return adapter(event, context)

    return serve


def _refused_admin_call(path: str, headers: dict[str, Any]) -> dict[str, Any] | None:
    """An admin API call whose bearer may not call, answered as API Gateway expects; None for any other event."""
    # lazy, as in create_app: Starlette and FastAPI load with the app, not with this module
    from starlette.requests import HTTPConnection

    from orbital.rest import admin  # lazy: it imports FastAPI

    if not path.startswith(admin.PREFIX + "/") and path not in admin.BEARER_FIRST:
        return None
    raw = [
        (str(k).lower().encode("latin-1", "replace"), str(v).encode("latin-1", "replace")) for k, v in headers.items()
    ]
    scope = {"type": "http", "path": path, "headers": raw}
    refused = admin.refusal(HTTPConnection(scope))
    if refused is None:
        return None
    return {
        "statusCode": refused.status_code,
        "headers": {k: v for k, v in refused.headers.items() if k != "content-length"},
        "body": bytes(refused.body).decode("utf-8"),
        "isBase64Encoded": False,
    }
