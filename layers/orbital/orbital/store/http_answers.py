"""Answers of deferred calls made over HTTP (ADR 0029).

A method called through `POST /api/v1/{method}` runs as a client socket whose connection id is a waiter id
(`http:` and 32 hex digits; no API Gateway or local connection id has a colon). A deferred call records it as its
caller like any socket's id; when the call is answered (the node's result, its loss, the timeout) the `res` frame
is written here instead of being posted, and the HTTP request, which polls for it, takes it. An answer nobody takes
(the request gave up first) goes with its ttl.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from orbital.protocol.frames import encode_sendable
from orbital.protocol.jsontext import loads
from orbital.store import keys
from orbital.store.table import Table

WAITER_PREFIX = "http:"
TTL_SECONDS = 3600


def new_waiter() -> str:
    return f"{WAITER_PREFIX}{uuid.uuid4().hex}"


def is_waiter(connection_id: str | None) -> bool:
    return bool(connection_id) and str(connection_id).startswith(WAITER_PREFIX)


def deliver(table: Table, waiter_id: str, frame: dict[str, Any], *, max_bytes: int) -> bool:
    """Keep the answer for its request. A frame over `max_bytes` becomes the 413 a socket would get instead."""
    text = encode_sendable(frame, max_bytes)
    table.put(keys.http_answer(waiter_id), {"frame": text}, ttl=int(time.time()) + TTL_SECONDS)
    return True


def take(table: Table, waiter_id: str) -> dict[str, Any] | None:
    """The answer, if it has arrived (removed from the table once read)."""
    key = keys.http_answer(waiter_id)
    rec = table.get(key)
    if rec is None:
        return None
    table.delete(key)
    frame = loads(rec.data["frame"])
    return frame if isinstance(frame, dict) else None
