"""The API Gateway WebSocket adapter: Lambda events in, dispatcher calls, frames out.

`$connect` accepts the socket (registration happens in the `connect` RPC; a bearer token at the upgrade, which xeno's
bridge and WindieOS send, is checked there and remembered on the connection, as is `?dialect=`); `req` frames
return their response as the route response (one less management API call); `$default` takes everything else: the
frames of other gateways' dialects (`orbital.dialects`, chosen by a socket's first frame), malformed JSON, unknown
types, base64 `bin` chunks; `$disconnect` cleans up. Chunk frames go to the families' hooks (`Services.hooks`).
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

from orbital.dialects import detect, exoclaw
from orbital.engines import device_auth, socket_gate
from orbital.methods import registry
from orbital.observability import count
from orbital.ports.lifecycle import disconnect
from orbital.ports.services import Services
from orbital.protocol.dispatch import DIALECT_ONLY, Dispatcher, Outcome
from orbital.protocol.frames import encode_sendable
from orbital.protocol.peers import is_proxy_header
from orbital.protocol.registry import DialectClose, DialectInbound
from orbital.runtime import credentials
from orbital.runtime.attempts import ATTEMPTS, PEER_UID, TOO_MANY, peer_key
from orbital.runtime.services import adopt_endpoint, get_services
from orbital.store.connections import Connection

log = logging.getLogger("orbital.gateway")

_dispatcher: Dispatcher | None = None

UNAUTHORIZED_CLOSE = 4001
"""The close code of a `connect` whose token is wrong."""


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
        adopt_endpoint(services, endpoint)
    return services, event["requestContext"]["connectionId"]


def handle_connect(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    services = get_services()
    settings = services.settings
    count("SocketsOpened")
    connection_id = (event.get("requestContext") or {}).get("connectionId")
    peer = _peer(event)
    if ATTEMPTS.blocked(peer):
        return {"statusCode": 429, "body": TOO_MANY}
    try:
        judged = credentials.judge(services, _bearer(event))
    except credentials.TokenUnreadableError:
        return {"statusCode": 503, "body": "Try again"}
    if judged.kind is credentials.Kind.MISSING_TOKEN:
        log.error("refusing connection: this deployment has no auth token configured")
        return {"statusCode": 403, "body": "Gateway auth token not configured"}
    if not isinstance(connection_id, str):
        return {"statusCode": 200}
    if judged.kind is credentials.Kind.WRONG:
        ATTEMPTS.failed(peer)
        return {"statusCode": 401, "body": "Unauthorized"}
    # a device token of a role that may speak as a client counts as the bearer of its role (ADR 0043); a node's or
    # a channel's is no credential for the other gateways' dialects, and registers with `connect` as usual
    device = judged.device if judged.kind is credentials.Kind.DEVICE else None
    client_device = device is not None and device.role in device_auth.CLIENT_ROLES
    bearer = judged.kind is credentials.Kind.GATEWAY or client_device
    # a WindieOS install's token: that install's user, speaking WindieOS only
    install = judged.install
    forced = detect.forced(event.get("queryStringParameters"))
    if install is not None:
        forced = detect.WINDIE
    if bearer or forced:  # what later frames must know about this socket: who it is, which protocol it speaks
        extra: dict[str, Any] = {"pending": True, "bearer": True} if bearer else {"pending": True}
        if client_device and device is not None:
            extra.update(role=device.role, deviceId=device.token_id)
            device_auth.note_socket(services, device, connection_id)  # so that revoking the token closes it
        if install is not None:
            extra.update(install={"user": install.user_id, "id": install.install_id}, **{DIALECT_ONLY: True})
        if settings.local and _on_this_machine(event):
            extra["local"] = True  # a client on the gateway's own machine (its files are the gateway's files)
        services.connections.save(Connection(connection_id, "client", services.now_ms(), dialect=forced, extra=extra))
    if socket_gate.applies(services) and not bearer:
        socket_gate.arm(services, connection_id)  # an install's socket too: its handshake settles the deadline
    return {"statusCode": 200}


def _bearer(event: dict[str, Any]) -> str | None:
    """The token of an `Authorization: Bearer` header at the upgrade (xeno's bridge, WindieOS), if one was sent."""
    for name, value in (event.get("headers") or {}).items():
        if str(name).lower() == "authorization" and isinstance(value, str):
            scheme, _, token = value.strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def _peer(event: dict[str, Any]) -> str | None:
    """Who the socket came from, as failed attempts count it: the address (API Gateway's `identity.sourceIp`;
    locally the loopback peer) and, locally, the OS user whose socket it is where the front door could tell."""
    identity = (event.get("requestContext") or {}).get("identity") or {}
    source = identity.get("sourceIp")
    return peer_key(source if isinstance(source, str) else None, identity.get(PEER_UID))


def _on_this_machine(event: dict[str, Any]) -> bool:
    """The upgrade came through the local gateway's Unix socket (`sourceIp` "unix"), whose peers are the gateway's
    own user (checked at accept): a loopback TCP socket may be any user of the machine."""
    source = ((event.get("requestContext") or {}).get("identity") or {}).get("sourceIp")
    if source != "unix":
        return False
    return not any(is_proxy_header(str(name)) for name in event.get("headers") or {})


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
    if route not in ("req", "bin"):  # `$default`: another dialect's frame, or one GSV ignores
        answered = _other_dialect(services, connection_id, body, _peer(event))
        if answered is not None:
            return answered
    if route == "bin" and services.hooks.bin_handlers:
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
    if outcome.close is not None and outcome.close[0] == UNAUTHORIZED_CLOSE:  # `connect` with a wrong token
        ATTEMPTS.failed(_peer(event))
    if (
        outcome.close is None
        and _unauthenticated(outcome)
        and socket_gate.applies(services)
        and socket_gate.one_too_many(connection_id)
    ):
        outcome.close = (socket_gate.CLOSE_CODE, socket_gate.TOO_MANY)  # the answer is posted first, then the close
    return _finish(services, connection_id, outcome)


def _other_dialect(services: Services, connection_id: str, body: str, peer: str | None) -> dict[str, Any] | None:
    """A frame of a socket that speaks another gateway's protocol (or whose first frame says it does), answered by
    that dialect's translator; None for a GSV socket's frame (GSV's rules apply). A wrong token in a dialect's own
    first frame (Exoclaw's) counts against `peer` as a failed `connect` does."""
    try:
        frame = json.loads(body)
    except ValueError:
        frame = None
    conn = services.connections.get(connection_id)
    if conn is not None and not conn.pending:
        dialect = conn.dialect  # fixed by its first frame (None: a GSV socket)
    else:
        dialect = conn.dialect if conn is not None and conn.dialect else detect.detect(frame)
        if (
            dialect is None
            and frame is None
            and "\n" in body.strip()
            and detect.detect(_first_line(body)) == detect.XENO
        ):
            dialect = detect.XENO  # several of xeno's messages in one frame, one per line
        if dialect is None and conn is not None and conn.extra.get("greeted"):
            dialect = detect.EXOCLAW  # after the unprompted hello, what no dialect claims is Exoclaw's
    translate = services.hooks.dialect_frames.get(dialect) if dialect and dialect != detect.GSV else None
    if translate is None:
        return None
    frames = translate(services, DialectInbound(connection_id, body, frame, conn))
    if any(isinstance(item, DialectClose) and item.code == UNAUTHORIZED_CLOSE for item in frames):
        ATTEMPTS.failed(peer)
    return _send_dialect(services, connection_id, frames)


def _first_line(body: str) -> Any:
    """The first non-blank line of a frame, parsed (None when it is not JSON)."""
    line = next(part for part in body.split("\n") if part.strip())
    try:
        return json.loads(line)
    except ValueError:
        return None


def greet(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    """The local bridge's note that a socket said nothing for a moment after its upgrade (API Gateway has no such
    event, and on AWS a token is always required, so a client always speaks first): Exoclaw's unprompted hello."""
    services, connection_id = _prepare(event)
    conn = services.connections.get(connection_id)
    return _send_dialect(services, connection_id, exoclaw.hello_on_silence(services, connection_id, conn))


def _send_dialect(services: Services, connection_id: str, frames: list[Any]) -> dict[str, Any]:
    """A translator's frames in order: the last as the route response, the others posted first; a close ends them
    (everything before it posted, then the socket closed without GSV's `connection.closing` notice, which another
    dialect's client would not understand)."""
    out: list[Any] = []
    for item in frames:
        if isinstance(item, DialectClose):
            for frame in out:
                services.push(connection_id, frame)
            services.sender.close(connection_id, item.code, item.reason, notify=False)
            disconnect(services, connection_id)
            return {"statusCode": 200}
        out.append(item)
    if not out:
        return {"statusCode": 200}
    for frame in out[:-1]:
        if not services.push(connection_id, frame):
            return {"statusCode": 200}
    return {"statusCode": 200, "body": encode_sendable(out[-1], services.settings.max_frame_bytes)}


def _unauthenticated(outcome: Outcome) -> bool:
    """A request refused to a socket that has not connected (or a connect that failed without closing it)."""
    ctx = outcome.context
    response = outcome.response
    return ctx is not None and ctx.conn is None and response is not None and not response.get("ok")
