"""How much of a request body the HTTP routes take, checked before the body is read into memory.

Every route takes at most `MAX_BODY_BYTES`, except an artifact upload, which takes up to the artifact limit plus
its multipart framing. On Lambda a request arrives whole in the event, at most `LAMBDA_PAYLOAD_BYTES` of it, base64
encoded when binary; an upload that could not fit is refused with the same 413 before the function is asked
(API Gateway answers 413 itself above its own limit).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from orbital.store import artifacts
from orbital.store.artifacts import MAX_ARTIFACT_BYTES

MAX_BODY_BYTES = 1024 * 1024
"""The largest body of any route but an upload (a Telegram update is a few KB; an admin call's params ~ KBs)."""

MULTIPART_SLACK = 64 * 1024

LAMBDA_PAYLOAD_BYTES = 6 * 1024 * 1024
"""A synchronous Lambda invocation's request and response payload limit."""
LAMBDA_BODY_BYTES = (LAMBDA_PAYLOAD_BYTES - 64 * 1024) * 3 // 4
"""The most body bytes an event can carry once base64 encoded, with room for the rest of the event (~4.4 MiB)."""
MAX_RESPONSE_BYTES = LAMBDA_PAYLOAD_BYTES - 64 * 1024
"""The largest JSON answer of the admin API (a Lambda response, with room for its headers), locally too."""


def body_limit(method: str, path: str, *, on_lambda: bool = False) -> int:
    if method == "POST" and path.rstrip("/") == artifacts.UPLOAD_ROUTE.rstrip("/"):
        upload = MAX_ARTIFACT_BYTES + MULTIPART_SLACK
        return min(upload, LAMBDA_BODY_BYTES) if on_lambda else upload
    return MAX_BODY_BYTES


def too_large(limit: int) -> dict[str, Any]:
    """The 413's body, in the one shape of every HTTP error."""
    return {"detail": f"Request body too large (at most {limit} bytes)", "code": 413}


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class BodyLimit:
    """ASGI middleware: 413 as soon as a request's body is known to pass its limit (from `Content-Length`, or while
    it streams in, before the route has read it). What was read of a refused body is dropped."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = body_limit(scope["method"], scope["path"])
        declared = next((v for k, v in scope.get("headers", []) if k == b"content-length"), b"")
        if declared.isdigit() and int(declared) > limit:
            await _refuse(send, limit)
            return
        seen = 0
        refused = False

        async def limited() -> MutableMapping[str, Any]:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    refused = True
                    raise _TooLargeError
            return message

        started = False

        async def tracked(message: MutableMapping[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited, tracked)
        except _TooLargeError:
            if not started:
                await _refuse(send, limit)
        except Exception:
            if not refused:
                raise
            if not started:  # the route wrapped the refusal in its own error (a form parser does)
                await _refuse(send, limit)


class _TooLargeError(Exception):
    pass


async def _refuse(send: Send, limit: int) -> None:
    import json

    body = json.dumps(too_large(limit)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
