"""Every route of the HTTP app, for the tests that walk them (who may call each, which function serves each)."""

from __future__ import annotations

import re

WEBSOCKET = "WEBSOCKET"


def app_routes(*, sockets: bool = False) -> list[tuple[str, str]]:
    """(method, path) of every route of the app (HEAD left out), with `(WEBSOCKET, path)` for its WebSocket
    routes when `sockets`; a route of a kind this walk does not know fails it, so a new kind of route cannot slip
    past the walks."""
    from fastapi.routing import APIRoute, APIWebSocketRoute, iter_route_contexts
    from orbital.rest.app import create_app
    from starlette.routing import Route

    found = []
    for context in iter_route_contexts(create_app().routes):
        route = context.original_route
        if isinstance(route, APIWebSocketRoute):
            if sockets:
                found.append((WEBSOCKET, context.path))
            continue
        assert isinstance(route, APIRoute | Route), f"route of an unknown kind: {route!r}: extend this walk"
        assert context.path, route
        for method in sorted(context.methods or ()):
            if method != "HEAD":
                found.append((method, context.path))
    return found


def probe_path(path: str) -> str:
    """The path with each parameter filled in."""
    return re.sub(r"\{[^}]+\}", "probe", path)
