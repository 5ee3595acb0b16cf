"""What every dialect's translator needs: calling the gateway's own methods, accepting a socket, starting a run the
socket is subscribed to, and the stable session keys of dialect conversations."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orbital.protocol.dispatch import Dispatcher
from orbital.store import subscriptions
from orbital.store.connections import Connection
from orbital.store.subscriptions import Subscription

if TYPE_CHECKING:
    from orbital.ports.services import Services


@dataclass
class Called:
    """What a method of the gateway answered: its payload, or its error."""

    ok: bool
    payload: Any = None
    code: int = 0
    message: str = ""
    details: Any = None


def call(
    services: Services,
    conn: Connection,
    method: str,
    params: dict[str, Any],
    *,
    internal: dict[str, Any] | None = None,
) -> Called:
    """Call one of the gateway's methods as this socket would with a GSV request: the same dispatcher, handlers,
    mode rules and errors. `internal`: what the method gets beside its params and no GSV client can send
    (`CallContext.internal`: the `media` of a message for `chat.send`)."""
    frame = {"type": "req", "id": "dialect", "method": method, "params": params}
    outcome = Dispatcher(services.registry).dispatch(services, conn.connection_id, frame, conn=conn, internal=internal)
    outcome.run_after_reply()
    response = outcome.response or {}
    if response.get("ok"):
        return Called(True, response.get("payload"))
    error = response.get("error") or {}
    code, message = int(error.get("code") or 500), str(error.get("message") or "failed")
    return Called(False, code=code, message=message, details=error.get("details"))


def accept(services: Services, conn: Connection | None, connection_id: str, dialect: str, **extra: Any) -> Connection:
    """Record the socket as a client speaking `dialect` (a client that is not in the GSV audience: it gets frames
    only for the runs it starts)."""
    kept = {k: v for k, v in (conn.extra if conn is not None else {}).items() if k != "pending"}
    accepted = Connection(
        connection_id, "client", services.now_ms(), dialect=dialect, extra={**kept, **extra, "dialect": dialect}
    )
    services.connections.save(accepted)
    return accepted


def new_run_id() -> str:
    return str(uuid.uuid4())


def subscribe(services: Services, conn: Connection, run_id: str, session_key: str, ref: dict[str, Any]) -> Subscription:
    """Subscribe the socket to a run before it starts (so it misses none of its events)."""
    assert conn.dialect is not None
    sub = Subscription(run_id, conn.connection_id, conn.dialect, session_key, ref)
    subscriptions.subscribe(services.table, sub)
    return sub


def unsubscribe(services: Services, sub: Subscription) -> None:
    """The run did not start (a command, a refusal): nothing will end it."""
    subscriptions.drop(services.table, sub)


def conversation_key(agent_id: str, dialect: str, *parts: str) -> str:
    """`agent:{agentId}:{dialect}:group:{h}`: stable whatever GSV's key canonicalization does (a `group` key keeps
    its case and is never folded into the main session), `h` the first 32 hex digits of the SHA-256 of the
    conversation's ids (NUL-joined, so no two tuples collide)."""
    digest = hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()[:32]
    return f"agent:{agent_id}:{dialect}:group:{digest}"
