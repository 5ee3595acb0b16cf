"""The Sender port: frames pushed to a socket, and the socket closed (the API Gateway management API on AWS, the
local gateway's bridge in `orbital dev`).

`post` returns False when the socket is gone (the caller removes the stale connection); a reply over the sender's
frame limit goes out as a 413 error reply to the same request instead, so that its caller does not wait
for it forever. `close` first tells the peer why in a `connection.closing` event (unless `notify` is off), since a
close through the management API carries no code or reason on AWS.

Backends: `orbital.aws.push.ManagementApiSender` (boto3) and `orbital.local.sender.BridgeSender`. They implement this
Protocol structurally and never import it; `tests/contract/test_sender_contract.py` holds both to it.
"""

from __future__ import annotations

from typing import Any, Protocol


class Sender(Protocol):
    def post(self, connection_id: str, frame: dict[str, Any] | bytes) -> bool: ...

    def close(self, connection_id: str, code: int = 1000, reason: str = "", *, notify: bool = True) -> None: ...
