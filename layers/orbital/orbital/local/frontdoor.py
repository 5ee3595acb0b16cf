"""The local gateway's front door: who may reach it at all, before any route or handler sees the request.

In every mode a browser may reach the gateway only from the gateway's own pages: a request that carries an `Origin`
is refused unless that origin is the one the request addresses (its `Host`) or a loopback origin with the gateway's
port. Any other web page in the user's browser (another site, a page some local program serves on another port or on
`foo.localhost`) may open a WebSocket to 127.0.0.1 or send it a form; it gets 403.

A gateway in `same-user` mode (token-less, for clients that cannot send a token) serves only its own OS user on this
machine, talking to it directly: the request comes from a loopback socket owned by the gateway's user
(`local/peer_uid.py`), names a loopback host (`localhost`, `127.x.x.x`, `[::1]`), carries no proxy header
(`Forwarded`, `X-Forwarded-*`, `X-Real-IP`, `Via`) and comes from no foreign page. Everything else is refused with 403
and a sentence saying what to do:

- another user of the machine connects from loopback too, but its socket is not the gateway user's;
- a tunnel (ngrok, cloudflared, `tailscale funnel`, …) connects from 127.0.0.1 but names its public host or adds
  forwarding headers;
- a DNS-rebinding page in the user's browser names its own host.

With a token only the `Origin` rule applies here: `connect` (and every HTTP route that acts) asks for the token itself.
The front door then only notes whose socket the peer is (`runtime.attempts.PEER_UID`), so that failed tokens count
against that user: another user of the machine guessing tokens is held back, the owner is not. ADR 0025 has the whole
model.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from orbital.local import peer_uid
from orbital.protocol.peers import is_proxy_header, loopback_address
from orbital.runtime.attempts import PEER_UID

ASGIApp = Callable[[dict[str, Any], Callable[..., Awaitable[Any]], Callable[..., Awaitable[Any]]], Awaitable[None]]

TOKEN = "token"
SAME_USER = "same-user"
MODES = (TOKEN, SAME_USER)

REFUSAL = (
    "This Orbital gateway runs without a token (AUTH=same-user), so it serves only its own user on this machine "
    "directly (no tunnel, proxy, other host or web page). To reach it any other way, restart it with a token: "
    "make dev (without AUTH=same-user) keeps one in its data directory; give clients that token."
)
OTHER_USER = (
    "This Orbital gateway runs without a token (AUTH=same-user) and serves only the user who started it. Run your "
    "client as that user, or have the gateway restarted with a token (make dev without AUTH=same-user) and use it."
)
FOREIGN_PAGE = (
    "A web page of another site may not use this Orbital gateway: open the console from the gateway's own address "
    "(the one `make dev` prints)."
)


def loopback_name(host: str) -> bool:
    """`host` (without port) names this machine: a loopback address or `localhost` (not `*.localhost`: any local
    program may serve pages there)."""
    name = host.strip().lower().rstrip(".")
    return name == "localhost" or loopback_address(name)


def _hostname(authority: str) -> str | None:
    """The host of a `Host` header value (`name`, `name:port`, `[v6]:port`), None if it is malformed."""
    try:
        parts = urlsplit(f"//{authority}")
        return parts.hostname
    except ValueError:
        return None


def _authority(url: str) -> tuple[str, int | None] | None:
    """(host, port) of an origin or `//authority`, None if malformed."""
    try:
        parts = urlsplit(url)
        return (parts.hostname or "", parts.port) if parts.hostname else None
    except ValueError:
        return None


def foreign_origin(origin: str, host: str | None, port: int | None) -> bool:
    """A browser's `Origin` that is neither the origin the request addresses (`http://` + its `Host`) nor a loopback
    origin on the gateway's `port`."""
    if not origin.startswith(("http://", "https://")):
        return True  # "null" (a file, a sandboxed frame) or another scheme
    found = _authority(origin)
    if found is None:
        return True
    name, origin_port = found
    if origin_port is None:
        origin_port = 443 if origin.startswith("https://") else 80
    addressed = _authority(f"//{host}") if host else None
    same_name = addressed is not None and addressed[0].lower().rstrip(".") == name.lower().rstrip(".")
    # no port in Host: the scheme's own, which the origin names too (TLS may end at a proxy in front)
    if (
        same_name
        and addressed is not None
        and ((addressed[1] is None and found[1] is None) or addressed[1] == origin_port)
    ):
        return False
    return not (loopback_name(name) and port is not None and origin_port == port)


def refusal(
    client: tuple[str, int] | None, headers: Iterable[tuple[bytes, bytes]], port: int | None = None
) -> str | None:
    """Why a request to a gateway without a token is refused (its address, Host, proxy headers or Origin), or None
    when it may come in (the owner of its socket is checked apart)."""
    if client is None or not loopback_address(client[0]):
        return "not from this machine"
    host: str | None = None
    origin: str | None = None
    for name, value in headers:
        if name == b"host":
            host = value.decode("latin-1")
        elif is_proxy_header(name.decode("latin-1")):
            return f"came through a proxy ({name.decode('latin-1')})"
        elif name == b"origin":
            origin = value.decode("latin-1")
    hostname = _hostname(host) if host else None
    if hostname is None or not loopback_name(hostname):
        return f"addressed to {host!r}" if host else "no Host header"
    if origin is not None and foreign_origin(origin, host, port):
        return f"from a web page of {origin}"
    return None


def origin_refusal(headers: Iterable[tuple[bytes, bytes]], port: int | None) -> str | None:
    """Why a request from a browser page is refused in every mode (its `Origin` is foreign), or None."""
    host: str | None = None
    origin: str | None = None
    for name, value in headers:
        if name == b"host":
            host = value.decode("latin-1")
        elif name == b"origin":
            origin = value.decode("latin-1")
    if origin is not None and foreign_origin(origin, host, port):
        return f"from a web page of {origin}"
    return None


Owner = Callable[[tuple[str, int], tuple[str, int]], "int | None"]


def guard(
    app: ASGIApp,
    *,
    mode: str,
    on_refused: Callable[[str], None] | None = None,
    owner: Owner = peer_uid.owner,
    uid: int | None = None,
) -> ASGIApp:
    """`app` behind the front door of a gateway in `mode` (`token` or `same-user`). `owner` finds the uid of a
    peer's socket (`peer_uid.owner`), `uid` is the user to serve in `same-user` mode (default: this process's)."""
    if mode not in MODES:
        raise ValueError(f"unknown auth mode {mode!r}")
    own_uid = os.getuid() if uid is None else uid

    async def guarded(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        kind = scope["type"]
        if kind in ("http", "websocket"):
            headers = scope.get("headers") or ()
            server = scope.get("server")
            port = int(server[1]) if server and server[1] is not None else None
            client = scope.get("client")
            text = FOREIGN_PAGE
            if mode == TOKEN:
                why = origin_refusal(headers, port)
                if why is None and client is not None and server:
                    # who the peer is, for the count of failed tokens (`runtime.attempts`): another user's guesses
                    # must not hold the owner back
                    found = owner((client[0], int(client[1])), (server[0], int(server[1])))
                    if found is not None:
                        scope[PEER_UID] = found
            else:
                why = refusal(client, headers, port)
                text = FOREIGN_PAGE if why and why.startswith("from a web page") else REFUSAL
                if why is None and client is not None:  # refusal() refuses a request without a peer
                    found = owner((client[0], int(client[1])), (server[0], int(server[1]))) if server else None
                    if found != own_uid:
                        why = "from another user of this machine" if found is not None else "from an unknown socket"
                        text = OTHER_USER
                    else:
                        scope[PEER_UID] = found
            if why is not None:
                if on_refused is not None:
                    on_refused(why)
                await deny(scope, receive, send, 403, text)
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
