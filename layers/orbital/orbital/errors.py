"""Errors that reach the wire.

    RpcError(code, message)            any GSV error response
    ├── BadRequestError      400
    ├── UnauthorizedError    401
    ├── ForbiddenError       403
    ├── NotFoundError        404
    ├── ConflictError        409       (optimistic-concurrency loss, retried by callers)
    ├── PayloadTooLargeError 413
    └── UnavailableError     503

Domain code raises these; only the dispatcher turns them into frames. Anything else becomes a 500 whose message is
the exception text for ValueError-like domain errors and a generic text otherwise (no stack traces on the wire).
"""

from __future__ import annotations

from typing import Any


class RpcError(Exception):
    code: int = 500

    def __init__(self, message: str, *, code: int | None = None, details: Any = None, retryable: bool | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = details
        self.retryable = retryable

    def to_wire(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details is not None:
            err["details"] = self.details
        if self.retryable is not None:
            err["retryable"] = self.retryable
        return err


class BadRequestError(RpcError):
    code = 400


class UnauthorizedError(RpcError):
    code = 401


class ForbiddenError(RpcError):
    code = 403


class NotFoundError(RpcError):
    code = 404


class ConflictError(RpcError):
    code = 409


class PayloadTooLargeError(RpcError):
    code = 413


class UnavailableError(RpcError):
    code = 503


class GatewayFailureError(RpcError):
    """A 500 with a message meant for the user (GSV reports thrown errors with their message)."""

    code = 500
