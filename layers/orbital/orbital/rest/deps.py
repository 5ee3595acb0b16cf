"""What the HTTP routes are handed (FastAPI's `Depends`): the gateway's `Services`, from the composition root of
the process serving them (`orbital.runtime.services.get_services`), never looked up by a route itself.

A route names it as a parameter (`services: ServicesDep`); a test serves the app on other Services with
`app.dependency_overrides[deps.services] = lambda: theirs`. What runs outside a route's parameters (the middleware
that judges a bearer first, the MCP endpoint's own ASGI handler, the auth dependencies) asks `services_for`, which
honours the same override.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Annotated, Any

from fastapi import Depends
from starlette.requests import HTTPConnection

from orbital.ports.services import Services
from orbital.runtime.services import get_services


def services() -> Services:
    """The Services of this request (a dependency: `Depends(services)`)."""
    return get_services()


ServicesDep = Annotated[Services, Depends(services)]


def services_for(connection: HTTPConnection | MutableMapping[str, Any]) -> Services:
    """The Services a route of the app serving `connection` (a request, or its ASGI scope) is handed: the app's
    override of `services` when it has one."""
    scope = connection.scope if isinstance(connection, HTTPConnection) else connection
    overrides = getattr(scope.get("app"), "dependency_overrides", None) or {}
    return overrides.get(services, services)()
