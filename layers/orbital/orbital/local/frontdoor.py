"""The local gateway's front door: who may reach it at all, before any route or handler sees the request.

A gateway started without a token serves only its own user on this machine, talking to it directly: the request
comes from a loopback address, names a loopback host (`localhost`, `*.localhost`, `127.x.x.x`, `[::1]`), carries no
proxy header (`Forwarded`, `X-Forwarded-*`, `X-Real-IP`, `Via`) and, if a browser sent it, comes from a loopback
page (`Origin`). Everything else is refused with 403 and a sentence saying to set a token:

- a tunnel (ngrok, cloudflared, `tailscale funnel`, …) connects from 127.0.0.1 but names its public host or adds
  forwarding headers;
- a DNS-rebinding page in the user's browser names its own host;
- any other web page in the user's browser may open a WebSocket to 127.0.0.1, but its `Origin` is not loopback.

With a token nothing is refused here: `connect` (and every HTTP route that acts) asks for the token itself.
ADR 0025 has the whole model.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from orbital.protocol.peers import is_proxy_header, loopback_address

ASGIApp = Callable[[dict[str, Any], Callable[..., Awaitable[Any]], Callable[..., Awaitable[Any]]], Awaitable[None]]

REFUSAL = (
    "This Orbital gateway has no token, so it serves only this machine directly (no tunnel, proxy, other host or "
    "web page). To reach it any other way, restart it with a token: make dev TOKEN=<secret> "
    "(or orbital dev --token <secret>), and give clients that token."
)


def loopback_name(host: str) -> bool:
    """`host` (without port) names this machine: a loopback address, `localhost` or a `*.localhost` name (which
    resolve only to loopback, RFC 6761)."""
    name = host.strip().lower().rstrip(".")
    return name == "localhost" or name.endswith(".localhost") or loopback_address(name)


def _hostname(authority: str) -> str | None:
    """The host of a `Host` header value (`name`, `name:port`, `[v6]:port`), None if it is malformed."""
    try:
        parts = urlsplit(f"//{authority}")
        return parts.hostname
    except ValueError:
        return None


def refusal(client: tuple[str, int] | None, headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """Why a request to a gateway without a token is refused, or None when it may come in."""
    if client is None or not loopback_address(client[0]):
        return "not from this machine"
    host: str | None = None
    for name, value in headers:
        if name == b"host":
            host = value.decode("latin-1")
        elif is_proxy_header(name.decode("latin-1")):
            return f"came through a proxy ({name.decode('latin-1')})"
        elif name == b"origin":
            origin = value.decode("latin-1")
            hostname = urlsplit(origin).hostname if origin.startswith(("http://", "https://")) else None
            if hostname is None or not loopback_name(hostname):
                return f"from a web page of {origin}"
    hostname = _hostname(host) if host else None
    if hostname is None or not loopback_name(hostname):
        return f"addressed to {host!r}" if host else "no Host header"
    return None


def guard(app: ASGIApp, *, token_set: bool, on_refused: Callable[[str], None] | None = None) -> ASGIApp:
    """`app` behind the front door. With `token_set` it is `app` itself."""
    if token_set:
        return app

    async def guarded(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        kind = scope["type"]
        if kind in ("http", "websocket"):
            why = refusal(scope.get("client"), scope.get("headers") or ())
            if why is not None:
                if on_refused is not None:
                    on_refused(why)
                await deny(scope, receive, send, 403, REFUSAL)
                return
        await app(scope, receive, send)

    return guarded


async def deny(
    scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any], status: int, text: str
) -> None:
    """Answer a request with `status` and `text`: an HTTP response, or for a WebSocket upgrade an HTTP response
    instead of the upgrade where the server can send one (else a bare refusal, which clients see as 403)."""
    body = text.encode("utf-8") + b"\n"
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    message = await receive()  # websocket.connect
    if message.get("type") != "websocket.connect":
        return
    if "websocket.http.response" in (scope.get("extensions") or {}):
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008})
