"""Sending frames to sockets through the API Gateway management API: the AWS backend of the Sender port
(`orbital.ports.sender`).

A 410 (GoneException) means the socket is gone: `post` returns False and the caller removes the stale connection.

Closing a socket through the management API (`DeleteConnection`) carries no close code or reason on AWS, so `close`
first tells the peer why in a frame it reads before the close: `{"type":"evt","event":"connection.closing",
"payload":{"code","reason"}}`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from orbital.aws import clients
from orbital.protocol.frames import MAX_MESSAGE_BYTES, too_large
from orbital.protocol.jsontext import compact

if TYPE_CHECKING:
    from botocore.client import BaseClient

log = logging.getLogger("orbital.push")

_compact_json = compact(ensure_ascii=True)
"""`json.dumps(frame, separators=(",", ":"))` without building an encoder for every frame (non-ASCII escaped, so
any string, a lone surrogate too, encodes)."""


def post_data(frame: dict[str, Any]) -> bytes:
    """What `ManagementApiSender.post` sends for `frame`: its compact JSON, every non-ASCII character escaped."""
    return _compact_json(frame).encode()


MAX_POST_BYTES = MAX_MESSAGE_BYTES
CLOSING_EVENT = "connection.closing"
"""Sent right before the gateway closes a socket, with the close code and reason the close itself cannot carry."""


def encode(frame: dict[str, Any] | bytes, max_bytes: int) -> bytes:
    """What a sender posts for `frame`: bytes as they are; a frame as its compact JSON, except a reply over
    `max_bytes`, which goes as a 413 error reply to the same request (its caller must not wait for it forever)."""
    if isinstance(frame, bytes):
        return frame
    data = post_data(frame)
    if len(data) > max_bytes and frame.get("type") == "res":
        data = post_data(too_large(frame, len(data), max_bytes))
    return data


def closing_notice(code: int, reason: str) -> dict[str, Any]:
    """The event that tells a socket why it is about to be closed."""
    return {"type": "evt", "event": CLOSING_EVENT, "payload": {"code": code, "reason": reason}}


class ManagementApiSender:
    def __init__(self, endpoint_url: str, *, max_bytes: int = MAX_POST_BYTES) -> None:
        self.endpoint_url = endpoint_url
        self.max_bytes = max_bytes
        """What one post may carry (API Gateway refuses a WebSocket message over 128 KB): a reply over it is sent as
        a 413 error reply to the same request instead, so that its caller does not wait for it forever."""
        self._client: BaseClient | None = None

    @property
    def client(self) -> BaseClient:
        if self._client is None:
            self._client = clients.management(self.endpoint_url)
        return self._client

    def post(self, connection_id: str, frame: dict[str, Any] | bytes) -> bool:
        data = encode(frame, self.max_bytes)
        try:
            self.client.post_to_connection(ConnectionId=connection_id, Data=data)
        except self.client.exceptions.GoneException:
            return False
        except Exception as exc:  # a socket we cannot reach is treated as gone only on 410
            log.warning("post_to_connection failed for %s: %s", connection_id, type(exc).__name__)
            raise
        return True

    def close(self, connection_id: str, code: int = 1000, reason: str = "", *, notify: bool = True) -> None:
        """Close a socket, first telling it why in a `connection.closing` event (unless `notify` is off: a socket
        of another dialect, which has been told in its own terms)."""
        try:
            if notify and not self.post(connection_id, closing_notice(code, reason)):
                return  # already gone
        except Exception:  # the close matters more than the notice
            log.debug("could not tell %s why it is closed", connection_id)
        try:
            self.client.delete_connection(ConnectionId=connection_id)
        except self.client.exceptions.GoneException:
            pass
