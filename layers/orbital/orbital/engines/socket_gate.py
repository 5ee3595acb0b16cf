"""Sockets that have not authenticated, on a gateway with a token: they can do nothing and cost little.

- `$connect` arms a deadline: a pending call of kind `socket-auth` that times out `AUTH_TIMEOUT_MS` after the socket
  opened, on the timers every deferred call uses (one execution per due second, ADR 0019), so nothing waits in a
  Lambda. Arming is best effort: if it fails, the socket is still limited by its requests and, on AWS, by API
  Gateway's idle timeout.
- A successful `connect` settles the deadline (one conditional write).
- A deadline that passes unsettled closes the socket, saying why first (`connection.closing`).
- Until then a request answers `101 Not connected` as before (the dispatcher's own check; nothing is written); each
  such request, or failed `connect`, is counted in this process's memory (no table access), and the
  `MAX_UNAUTHENTICATED_REQUESTS`-th closes the socket after its answer. On AWS a socket's frames may reach several
  containers, each counting its own: still a handful of invocations at most before the deadline closes it anyway.
  Frames that are not requests (malformed JSON, unknown types) are ignored, as GSV ignores them, and cost no table
  access either.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import TYPE_CHECKING

from orbital.aws import secrets
from orbital.engines import deferred

if TYPE_CHECKING:
    from orbital.ports.services import Services

log = logging.getLogger("orbital.gate")

KIND = "socket-auth"
"""Deferred-call kind of an authentication deadline."""
AUTH_TIMEOUT_MS = 10_000
MAX_UNAUTHENTICATED_REQUESTS = 8
CLOSE_CODE = 1008
TIMED_OUT = "Not authenticated within 10 s: send connect with the gateway token first"
TOO_MANY = "Too many requests before connect: send connect with the gateway token first"
_REMEMBERED = 4096
"""Sockets whose unauthenticated requests this process counts at once (the oldest are forgotten beyond)."""

_counts: collections.OrderedDict[str, int] = collections.OrderedDict()
_lock = threading.Lock()


def applies(services: Services) -> bool:
    """Whether sockets must authenticate: the gateway has a token (always on AWS; locally with `--token`)."""
    return secrets.token_configured(services.settings)


def call_id(connection_id: str) -> str:
    """The id of a socket's deadline (`$connect` may write pending calls of these ids only: template.yaml)."""
    return f"auth-{connection_id}"


def arm(services: Services, connection_id: str) -> None:
    """`$connect`: the socket must authenticate within `AUTH_TIMEOUT_MS`."""
    call = deferred.PendingCall(
        call_id=call_id(connection_id),
        kind=KIND,
        node_id="",
        node_connection_id=connection_id,
        timeout_ms=AUTH_TIMEOUT_MS,
        created_at=services.now_ms(),
        caller_connection_id=connection_id,
    )
    try:
        deferred.create(services, call)
        deferred.start_wait(services, call)
    except Exception as exc:
        log.warning("socket %s: no authentication deadline (%s)", connection_id, type(exc).__name__)


def settle(services: Services, connection_id: str) -> None:
    """The socket authenticated: its deadline no longer applies."""
    with _lock:
        _counts.pop(connection_id, None)
    deferred.claim(services, call_id(connection_id))


def expired(services: Services, call: deferred.PendingCall) -> None:
    """The deadline of a socket that did not authenticate (already claimed): close it."""
    _close(services, call.node_connection_id, TIMED_OUT)


def one_too_many(connection_id: str) -> bool:
    """Count a request the socket made without being connected: True when it reaches the limit (the caller closes
    the socket, after the answer)."""
    with _lock:
        seen = _counts.pop(connection_id, 0) + 1
        if seen >= MAX_UNAUTHENTICATED_REQUESTS:
            return True
        _counts[connection_id] = seen
        while len(_counts) > _REMEMBERED:
            _counts.popitem(last=False)
    return False


def forget(connection_id: str) -> None:
    """The socket is gone."""
    with _lock:
        _counts.pop(connection_id, None)


def _close(services: Services, connection_id: str, reason: str) -> None:
    with _lock:
        _counts.pop(connection_id, None)
    try:
        services.sender.close(connection_id, CLOSE_CODE, reason)
    except Exception as exc:
        log.warning("could not close unauthenticated socket %s: %s", connection_id, type(exc).__name__)
