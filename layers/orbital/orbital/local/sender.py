"""The local backend of the Sender port (`orbital.ports.sender`): frames posted to, and sockets closed on, the local
gateway's bridge (`orbital.local.bridge.Bridge.manage`), in this process and without HTTP.

The answers are the management API's: 2xx posted, 410 gone (`post` returns False), anything else refused. A close
carries its code and reason to the bridge, which closes the socket with them (API Gateway's DeleteConnection cannot);
the `connection.closing` event goes first all the same, as on AWS. Posts are counted like the boto3 factory's calls
(`orbital.aws.clients.count`).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from orbital.aws import clients
from orbital.aws.push import MAX_POST_BYTES, closing_notice, encode
from orbital.local.bridge import CLOSE_CODE_HEADER, CLOSE_REASON_HEADER, Bridge, BridgeUnavailableError

log = logging.getLogger("orbital.push")

SERVICE = "apigatewaymanagementapi"


class SendRefusedError(Exception):
    """The bridge refused a post or a close (an answer other than 2xx or 410)."""

    def __init__(self, status: int, error_code: str, message: str) -> None:
        super().__init__(f"{status} {error_code}: {message}")
        self.status, self.error_code, self.message = status, error_code, message


class BridgeSender:
    """Posts and closes through `bridge` (set once the bridge exists: until then every call raises
    BridgeUnavailableError, as the management API of a gateway that is not listening yet would fail to connect)."""

    def __init__(self, bridge: Bridge | None = None, *, max_bytes: int = MAX_POST_BYTES) -> None:
        self.bridge = bridge
        self.max_bytes = max_bytes
        """What one post may carry: see `orbital.aws.push.ManagementApiSender.max_bytes`."""

    def _manage(self, method: str, connection_id: str, data: bytes, headers: dict[str, str]) -> bool:
        bridge = self.bridge
        if bridge is None:
            raise BridgeUnavailableError("the local gateway's bridge is not running")
        clients.count(SERVICE, "PostToConnection" if method == "POST" else "DeleteConnection")
        status, out_headers, body = bridge.manage(method, connection_id, data, headers)
        if 200 <= status < 300:
            return True
        if status == 410:
            return False
        try:
            message = str(json.loads(body).get("message", ""))
        except (ValueError, AttributeError):
            message = body.decode("utf-8", "replace")
        raise SendRefusedError(status, out_headers.get("x-amzn-ErrorType", "ClientError"), message)

    def post(self, connection_id: str, frame: dict[str, Any] | bytes) -> bool:
        try:
            return self._manage("POST", connection_id, encode(frame, self.max_bytes), {})
        except Exception as exc:  # a socket we cannot reach is treated as gone only on 410
            log.warning("post_to_connection failed for %s: %s", connection_id, type(exc).__name__)
            raise

    def close(self, connection_id: str, code: int = 1000, reason: str = "", *, notify: bool = True) -> None:
        """Close a socket with `code` and `reason`, first telling it why in a `connection.closing` event (unless
        `notify` is off: a socket of another dialect, which has been told in its own terms)."""
        try:
            if notify and not self.post(connection_id, closing_notice(code, reason)):
                return  # already gone
        except Exception:  # the close matters more than the notice
            log.debug("could not tell %s why it is closed", connection_id)
        # as the management API's headers carried them before: ASCII, anything else as "?"
        headers = {CLOSE_CODE_HEADER: str(code), CLOSE_REASON_HEADER: reason.encode("ascii", "replace").decode()}
        self._manage("DELETE", connection_id, b"", headers)
