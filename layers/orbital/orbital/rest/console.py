"""The console: Orbital's web UI (ADR 0037), served by the HTTP API at `/`, on the local gateway's port and by the
`rest_api` function on AWS alike.

- `GET /` → the page; `GET /console/{file}` → its modules, style sheet and icon (the files of `orbital/console`,
  nothing else: a name that is not one of them is 404, so no path can reach outside).
- `GET /console/config.json` → what the page needs before it connects: `wsUrl` (the WebSocket to use; null means
  this origin's `/ws`, as on the local gateway), `tokenRequired`, the gateway's `version` and the slash `commands`
  for completion (the rows of `/help`).

- `GET /docs` → the HTTP API's description in Swagger UI, whose files the gateway serves itself under
  `/console/docs/swagger-ui/` (Swagger UI 5 as the `fastapi-offline` package on PyPI ships it): the page works
  offline and runs no script from another origin, under the console's policy.

None of them needs a credential: they are the same for everyone and act on nothing; the page asks for the token and
presents it in `connect` (and as a bearer on the HTTP API). Every answer carries a Content-Security-Policy that lets
the page load only its own files and talk only to its own gateway (and `frame-ancestors 'none'`), and `no-cache`
with an `ETag`, so a browser asks again each time (a 304 when nothing changed) and an upgraded gateway serves the
new console at once.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse, Response

from orbital import __version__
from orbital.domain import commands
from orbital.ports.services import Services
from orbital.rest.deps import ServicesDep
from orbital.settings import Settings

router = APIRouter(include_in_schema=False)

STATIC = Path(__file__).resolve().parent.parent / "console"
"""The console's files (package data of `orbital`)."""

TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}


@functools.cache
def files() -> dict[str, tuple[bytes, str, str]]:
    """Every file the console has, by its path under `/console/`: (content, media type, ETag), read once per
    process (about 250 KB)."""
    found: dict[str, tuple[bytes, str, str]] = {}
    for path in sorted(STATIC.rglob("*")):
        if path.is_file() and path.suffix in TYPES:
            body = path.read_bytes()
            tag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
            found[path.relative_to(STATIC).as_posix()] = (body, TYPES[path.suffix], tag)
    return found


VIEWER = "docs/swagger-ui/"
"""Where under `/console/` Swagger UI's files are served."""
VIEWER_FILES = ("swagger-ui-bundle.js", "swagger-ui.css")
"""The files of Swagger UI the docs page loads (nothing else of the package is served)."""


@functools.cache
def viewer_files() -> dict[str, tuple[bytes, str, str]]:
    """Swagger UI's files by their path under `/console/`, read at the first request for one (about 1.2 MB)."""
    static = importlib.resources.files("fastapi_offline") / "static"  # imported here: only the docs page needs it
    found: dict[str, tuple[bytes, str, str]] = {}
    for name in VIEWER_FILES:
        body = (static / name).read_bytes()
        tag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
        found[VIEWER + name] = (body, TYPES[Path(name).suffix], tag)
    return found


def websocket_url(services: Services) -> str | None:
    """The WebSocket the page connects to: on AWS the WebSocket API's `wss://` URL (its management endpoint with
    the other scheme); None on a gateway on its user's own machine, whose WebSocket is `/ws` on the page's own
    origin."""
    endpoint = services.settings.mgmt_endpoint
    if services.capabilities.own_machine or not endpoint or not endpoint.startswith("https://"):
        return None
    return "wss://" + endpoint.removeprefix("https://").rstrip("/")


def bucket_origins(settings: Settings) -> list[str]:
    """The origins of the workspace bucket's presigned URLs, where `/media/{name}` sends an object too large for a
    Lambda response on AWS: virtual-hosted style (`https://{bucket}.s3.amazonaws.com`, as boto3 presigns, and the
    regional host), or path style for a bucket name with dots (whose virtual host no certificate covers)."""
    bucket, region = settings.bucket_name, settings.region
    hosts = ["s3.amazonaws.com", f"s3.{region}.amazonaws.com"]
    if "." not in bucket:
        hosts = [f"{bucket}.{host}" for host in hosts]
    return [f"https://{host}" for host in hosts]


def headers(services: Services) -> dict[str, str]:
    """The headers of every console answer: the page may load its own files only, connect to its own origin (and
    on AWS to the WebSocket API), and show images from its own origin (and on AWS from its own bucket, where large
    media redirect)."""
    connect, images = "'self'", "'self' data: blob:"
    ws = websocket_url(services)
    if ws:
        origin = urlsplit(ws)
        connect += f" {origin.scheme}://{origin.netloc}"
        images += " " + " ".join(bucket_origins(services.settings))
    policy = (
        f"default-src 'none'; script-src 'self'; style-src 'self'; img-src {images}; connect-src {connect}; "
        "manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    return {
        "Content-Security-Policy": policy,
        "Cache-Control": "no-cache",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "DENY",
    }


def command_rows() -> list[dict[str, str]]:
    """The slash commands and directives, as `/help` lists them: `{usage, description, group}`."""
    return [
        {"usage": usage, "description": what, "group": title}
        for title, rows in commands.help_sections()
        for usage, what in rows
    ]


@router.get("/")
def page(request: Request, services: ServicesDep) -> Response:
    return _file("index.html", request, services)


@router.get("/docs")
def docs(request: Request, services: ServicesDep) -> Response:
    """The HTTP API's description in Swagger UI, from the gateway's own files only."""
    return _file("docs/docs.html", request, services)


@router.get("/console/config.json")
def config(services: ServicesDep) -> JSONResponse:
    settings = services.settings
    body: dict[str, Any] = {
        "wsUrl": websocket_url(services),
        "tokenRequired": bool(settings.require_token or settings.auth_token or settings.auth_token_secret),
        "version": __version__,
        "commands": command_rows(),
    }
    return JSONResponse(body, headers=headers(services))


@router.get("/console/{name:path}")
def asset(name: str, request: Request, services: ServicesDep) -> Response:
    return _file(name, request, services)


def _file(name: str, request: Request, services: Services) -> Response:
    found = viewer_files().get(name) if name.startswith(VIEWER) else files().get(name)
    if found is None:
        raise HTTPException(status_code=404, detail="Not Found")
    body, media_type, tag = found
    answer = {**headers(services), "ETag": tag}
    if request.headers.get("if-none-match") == tag:
        return Response(status_code=304, headers=answer)
    return Response(body, media_type=media_type, headers=answer)
