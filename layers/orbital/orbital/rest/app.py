"""The HTTP side of the gateway: a handful of routes, served from API Gateway HTTP API events on Lambda and as an
ASGI app by the local gateway's bridge. One `handle` answers both (ADR 0014: no web framework on the Lambda path,
whose cold start it would double).

Routes: `GET /health`; `POST /channels/telegram/{account}/webhook`. Anything else is a 404, a known path with another
method a 405. Every answer is JSON.
"""

from __future__ import annotations

import base64
import functools
import hmac
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("orbital.rest")

_TELEGRAM_WEBHOOK = re.compile(r"^/channels/telegram/(?P<account>[^/]+)/webhook$")


MAX_BODY_BYTES = 1024 * 1024
"""The largest request body any route takes (a Telegram update is a few KB). Refused with 413 before it is read
into memory: locally from `Content-Length` and while reading; on Lambda before it is decoded."""


@dataclass
class Answer:
    status: int
    body: dict[str, Any]


TOO_LARGE = Answer(413, {"error": f"Request body too large (at most {MAX_BODY_BYTES} bytes)"})


def handle(method: str, path: str, headers: Mapping[str, str], body: bytes) -> Answer:
    """Answer one request. `headers` have lower-case names."""
    if path == "/health":
        if method != "GET":
            return Answer(405, {"error": "Method Not Allowed"})
        return Answer(200, {"status": "healthy"})
    match = _TELEGRAM_WEBHOOK.match(path)
    if match is not None:
        if method != "POST":
            return Answer(405, {"error": "Method Not Allowed"})
        return _telegram_webhook(match["account"], headers, body)
    return Answer(404, {"error": "Not Found"})


def _telegram_webhook(account_id: str, headers: Mapping[str, str], body: bytes) -> Answer:
    """Telegram delivers an update. Only a request carrying the account's webhook secret is looked at. An update that
    cannot be used (malformed, refused) is answered 200 so Telegram does not redeliver it; one that failed for a
    passing reason (storage, starting the run) is answered 503: Telegram delivers it again and, since a failed
    message is not marked as received, it is then processed."""
    presented = headers.get("x-telegram-bot-api-secret-token")
    if not presented or not _telegram_secret_matches(account_id, presented):
        return Answer(401, {"ok": False, "error": "unauthorized"})
    if not _telegram_update(account_id, body):
        return Answer(503, {"ok": False, "error": "try again"})
    return Answer(200, {"ok": True})


def _telegram_secret_matches(account_id: str, presented: str) -> bool:
    from orbital.channels.telegram import TelegramAdapter
    from orbital.runtime.services import get_services

    try:
        expected = TelegramAdapter().webhook_secret(get_services(), account_id)
    except Exception as exc:  # configuration unreadable: refuse rather than process unauthenticated
        log.warning("telegram webhook: reading the configuration failed (%s)", type(exc).__name__)
        return False
    if expected is None:
        return False
    return hmac.compare_digest(presented.encode("utf-8"), expected.encode("utf-8"))


def _telegram_update(account_id: str, body: bytes) -> bool:
    """Parse the update and hand it to the inbound pipeline. False when it should be delivered again (a passing
    failure, or the same message still being processed by an earlier delivery); failures are logged by type only."""
    from orbital.channels.adapters import is_passing
    from orbital.channels.telegram import TelegramAdapter
    from orbital.runtime.services import get_services

    update_id: Any = None
    try:
        update = json.loads(body)
        if not isinstance(update, dict):
            raise ValueError("an update is a JSON object")
        update_id = update.get("update_id")
        services = get_services()
        params = TelegramAdapter().inbound_params(services, account_id, update)
        if params is None:
            return True
        from orbital.channels import inbound

        result = inbound.receive(services, params)
    except Exception as exc:
        passing = not isinstance(exc, ValueError) and is_passing(exc)
        code = getattr(exc, "code", None)
        log.warning(
            "telegram update %s for account %s not processed%s: %s (code %s)",
            update_id if isinstance(update_id, int) else "?",
            account_id,
            ", asking for it again" if passing else "",
            type(exc).__name__,
            code if code is not None else "-",
        )
        return not passing
    return result.get("processing") is not True


def _encode(answer: Answer) -> bytes:
    return json.dumps(answer.body, separators=(",", ":")).encode("utf-8")


@functools.cache
def lambda_adapter() -> Callable[[dict[str, Any], object], dict[str, Any]]:
    """The Lambda handler's body: an API Gateway HTTP API event (payload format 2.0) in, its response out."""

    def serve(event: dict[str, Any], _context: object) -> dict[str, Any]:
        http = (event.get("requestContext") or {}).get("http") or {}
        method = str(http.get("method") or event.get("httpMethod") or "GET").upper()
        path = str(event.get("rawPath") or http.get("path") or event.get("path") or "/")
        headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
        raw = str(event.get("body") or "")
        encoded = bool(event.get("isBase64Encoded"))
        if (len(raw) * 3 // 4 if encoded else len(raw)) > MAX_BODY_BYTES:  # before decoding it
            answer = TOO_LARGE
        else:
            body = base64.b64decode(raw) if encoded else raw.encode("utf-8")
            answer = TOO_LARGE if len(body) > MAX_BODY_BYTES else handle(method, path, headers, body)
        return {
            "statusCode": answer.status,
            "headers": {"content-type": "application/json"},
            "body": _encode(answer).decode("utf-8"),
            "isBase64Encoded": False,
        }

    return serve


def create_app() -> Callable[..., Any]:
    """The same routes as an ASGI app (the local gateway mounts it; tests drive it with an HTTP client). Each
    request is answered on a worker thread: `handle` reads and writes the store."""
    import anyio.to_thread

    async def app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        body = await _read_body(receive, headers)
        if body is None:
            return  # the client went away
        if isinstance(body, Answer):
            answer = body
        else:
            path, root = scope["path"], scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root) :] or "/"
            answer = await anyio.to_thread.run_sync(handle, scope["method"], path, headers, body)
        data = _encode(answer)
        await send(
            {
                "type": "http.response.start",
                "status": answer.status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": data})

    return app


async def _read_body(receive: Callable[..., Any], headers: Mapping[str, str]) -> bytes | Answer | None:
    """The request's body, `TOO_LARGE` as soon as it is known to pass `MAX_BODY_BYTES` (from `Content-Length`, or
    while reading: what was read is dropped), None if the client disconnected."""
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return TOO_LARGE
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return TOO_LARGE
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)
