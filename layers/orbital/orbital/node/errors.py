"""How a node's connection to the gateway fails: refused for good, lost, a handshake that failed, a message too
large to send."""

from __future__ import annotations


class FatalConnectError(Exception):
    """The gateway refused this node for good (bad token, invalid registration): retrying cannot help."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class ConnectionLostError(ConnectionError):
    def __init__(self, code: int | None = None, reason: str = "") -> None:
        super().__init__(f"connection lost ({code} {reason})".strip() if code else "connection lost")
        self.code = code
        self.reason = reason


class HandshakeFailedError(Exception):
    pass


class MessageTooLargeError(Exception):
    """A request over the gateway's message limit: not sent (the gateway would close the socket for it)."""

    def __init__(self, method: str, size: int, limit: int) -> None:
        super().__init__(f"{method} of {size} bytes exceeds the gateway's limit of {limit} bytes per message")
        self.method = method
        self.size = size
        self.limit = limit
