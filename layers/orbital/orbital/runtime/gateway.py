"""The API Gateway WebSocket adapter: Lambda events in, dispatcher calls, frames out.

`$connect` accepts the socket (registration happens in the `connect` RPC); `req` frames return their response as
the route response (one less management API call); `$default` takes everything else (malformed JSON, unknown
types, base64 `bin` chunks); `$disconnect` cleans up. Chunk frames go to the families' hooks (`Services.hooks`).
"""

from __future__ import annotations

import base64
import logging
from typing import Any

from orbital.aws import secrets
from orbital.engines import socket_gate
from orbital.methods import registry
from orbital.observability import count
from orbital.protocol.dispatch import Dispatcher, Outcome
from orbital.protocol.frames import encode_sendable
from orbital.runtime.lifecycle import disconnect
from orbital.runtime.services import Services, get_services

log = logging.getLogger("orbital.gateway")

_dispatcher: Dispatcher | None = None


def dispatcher() -> Dispatcher:
    global _dispatcher
    if _dispatcher is None:
        _dispatcher = Dispatcher(registry())
    return _dispatcher


def _endpoint(event: dict[str, Any]) -> str | None:
    rc = event.get("requestContext") or {}
    domain, stage = rc.get("domainName"), rc.get("stage")
    if not domain or not stage:
        return None
    return f"https://{domain}/{stage}"


def _prepare(event: dict[str, Any]) -> tuple[Services, str]:
    services = get_services()
    endpoint = _endpoint(event)
    if endpoint:
        services.use_endpoint(endpoint)
    return services, event["requestContext"]["connectionId"]


def handle_connect(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    services = get_services()
    settings = services.settings
    count("SocketsOpened")
    if settings.require_token and not secrets.token_configured(settings):
        log.error("refusing connection: this deployment has no auth token configured")
        return {"statusCode": 403, "body": "Gateway auth token not configured"}
    connection_id = (event.get("requestContext") or {}).get("connectionId")
    if isinstance(connection_id, str):
        services.connections.opened(connection_id)
        if socket_gate.applies(services):
            socket_gate.arm(services, connection_id)
    return {"statusCode": 200}


def handle_disconnect(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    services, connection_id = _prepare(event)
    count("SocketsClosed")
    socket_gate.forget(connection_id)
    disconnect(services, connection_id)
    return {"statusCode": 200}


def _finish(services: Services, connection_id: str, outcome: Outcome) -> dict[str, Any]:
    if outcome.close is not None:
        # the error must reach the client before the socket goes, so it cannot ride on the route response
        if outcome.response is not None:
            services.sender.post(connection_id, outcome.response)
        services.sender.close(connection_id, *outcome.close)
        disconnect(services, connection_id)
        return {"statusCode": 200}
    if outcome.has_after_reply():
        # API Gateway sends the route response only once this handler has returned, after anything the actions
        # push (probes to a node that has not seen its hello-ok yet): send the reply first, then run them
        if outcome.response is not None and not services.push(connection_id, outcome.response):
            return {"statusCode": 200}
        outcome.run_after_reply()
        return {"statusCode": 200}
    if outcome.response is None:
        return {"statusCode": 200}
    return {"statusCode": 200, "body": encode_sendable(outcome.response, services.settings.max_frame_bytes)}


def handle_message(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    services, connection_id = _prepare(event)
    count("FramesIn")
    body = event.get("body")
    if body is None:
        return {"statusCode": 200}
    if event.get("isBase64Encoded"):
        payload = base64.b64decode(body)
        for on_binary in services.hooks.binary_handlers:
            on_binary(services, connection_id, payload)
        return {"statusCode": 200}
    route = (event.get("requestContext") or {}).get("routeKey")
    if route == "bin" and services.hooks.bin_handlers:
        import json

        try:
            frame = json.loads(body)
        except ValueError:
            return {"statusCode": 200}
        for on_bin in services.hooks.bin_handlers:
            reply = on_bin(services, connection_id, frame)
            if reply is not None:
                return {"statusCode": 200, "body": encode_sendable(reply, services.settings.max_frame_bytes)}
        return {"statusCode": 200}
    outcome = dispatcher().dispatch_text(services, connection_id, body)
    if (
        outcome.close is None
        and _unauthenticated(outcome)
        and socket_gate.applies(services)
        and socket_gate.one_too_many(connection_id)
    ):
        outcome.close = (socket_gate.CLOSE_CODE, socket_gate.TOO_MANY)  # the answer is posted first, then the close
    return _finish(services, connection_id, outcome)


def _unauthenticated(outcome: Outcome) -> bool:
    """A request refused to a socket that has not connected (or a connect that failed without closing it)."""
    ctx = outcome.context
    response = outcome.response
    return ctx is not None and ctx.conn is None and response is not None and not response.get("ok")
