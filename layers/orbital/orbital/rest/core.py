"""The routes every Orbital gateway serves: health, GSV's media route, and channel webhooks.

- `GET /health` → `{"status": "healthy"}`.
- `GET /media/{name}` (GSV): `name` must match `^[a-f0-9-]+\\.[a-z0-9]+$` (any case), else 404. The object
  `media/{name}`: 404 `Not Found` when absent, or private (an upload made with the gateway token that did not ask
  to be public, an install's artifact) and asked for without the credential that reads it; past its `expires-at`, or
  a public one past its link's lifetime (`media.publicLinkDays`, 7 by default, from its upload), it is deleted and
  the answer is 410 `Expired`; else its bytes with its content type (one stored as an image whose bytes are no image
  is sent as `application/octet-stream`, `Content-Disposition: attachment`), `Cache-Control: private, max-age=3600`
  and `Access-Control-Allow-Origin: *`. A public object needs no credential: the names are random UUIDs. On Lambda
  an object too large for a response is a 302 to a presigned S3 URL instead.
- `GET /api/session-media/{sessionKey}/{name}` (Orbital): an image a tool returned in a session, stored beside the
  session (`media/{sessionKey}/{uuid}.{ext}`, which GSV's media route never serves); only with the gateway token,
  only PNG, JPEG, GIF or WebP as its bytes show (whatever type it was stored with), inert like media. The console
  fetches it with its bearer to show a tool card's image.
- `POST /channels/telegram/{account}/webhook`: only a request carrying the account's webhook secret is looked at,
  before its body is read. An update that cannot be used is answered 200 so Telegram does not redeliver it; one
  that failed for a passing reason is answered 503, and Telegram delivers it again.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from orbital.domain import roles, sniff
from orbital.domain.media_types import base_type
from orbital.rest.auth import Caller, gateway_with, identify
from orbital.rest.deps import ServicesDep
from orbital.rest.limits import LAMBDA_BODY_BYTES
from orbital.store import artifacts, keys

if TYPE_CHECKING:
    from orbital.ports.services import Services

log = logging.getLogger("orbital.rest")

router = APIRouter()

MEDIA_HEADERS = {"Cache-Control": "private, max-age=3600", "Access-Control-Allow-Origin": "*"}
"""GSV's headers for a media object."""
INERT = {"X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox"}
"""Beside them: a stored object is never run as a page of the gateway's origin (an uploaded HTML or SVG file would
otherwise run script where the console lives)."""
DOWNLOAD = {"Content-Disposition": "attachment"}


@router.get("/health", tags=["gateway"], summary="Whether the gateway is up")
def health() -> dict[str, str]:
    return {"status": "healthy"}


@router.get(
    "/media/{name}",
    tags=["gateway"],
    summary="A stored media object or artifact (GSV's media route)",
    response_class=Response,
    responses={
        200: {"description": "The object's bytes", "content": {"application/octet-stream": {}}},
        302: {"description": "On AWS, for an object larger than a Lambda response: a presigned S3 URL"},
        404: {"description": "`Not Found`"},
        410: {"description": "`Expired` (the object is deleted)"},
    },
)
def media(name: str, request: Request, services: ServicesDep) -> Response:
    found = artifacts.head(services.workspace, name)  # None for a name out of GSV's pattern too
    if found is None or not _may_read(request, found):
        return PlainTextResponse("Not Found", 404)
    key = keys.media_object(name)
    if _ended(services, found):
        services.workspace.delete(key)
        return PlainTextResponse("Expired", 410)
    if services.capabilities.bounded_responses and found.size_bytes > LAMBDA_BODY_BYTES:
        return RedirectResponse(services.workspace.presign_get(key), 302, headers=MEDIA_HEADERS)
    loaded = services.workspace.get(key)
    if loaded is None:
        return PlainTextResponse("Not Found", 404)
    data, info = loaded
    kind = info.content_type or sniff.OCTET_STREAM
    if base_type(kind).startswith("image/") and sniff.image_type(data[: sniff.HEAD_BYTES]) is None:
        # stored as an image, but its bytes are none: never shown as one (a download, not a picture)
        return Response(data, media_type=sniff.OCTET_STREAM, headers={**MEDIA_HEADERS, **INERT, **DOWNLOAD})
    return Response(data, media_type=kind, headers={**MEDIA_HEADERS, **INERT})


SESSION_IMAGE = re.compile(r"^[0-9a-f-]{8,64}\.(png|jpe?g|gif|webp)$")
"""The name of an image a tool returned (`agent.tools` stores it under the session as `{uuid}.{ext}`)."""
SHOWN_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


@router.get(
    "/api/session-media/{key:path}",
    tags=["gateway"],
    summary="An image a tool returned in a session (the gateway token)",
    response_class=Response,
    responses={
        200: {"description": "The image", "content": {"image/png": {}, "image/jpeg": {}}},
        404: {"description": "`Not Found`: no such image of that session"},
        413: {"description": "On AWS, an image larger than a Lambda response"},
    },
)
def session_media(
    key: str, _caller: Annotated[Caller, Depends(gateway_with(roles.READ))], services: ServicesDep
) -> Response:
    session_key, _, name = key.rpartition("/")
    if not session_key or not SESSION_IMAGE.match(name):
        return PlainTextResponse("Not Found", 404)
    object_key = keys.session_media(session_key, name)
    info = services.workspace.head(object_key)
    if info is None or (info.content_type or "").split(";")[0].strip().lower() not in SHOWN_TYPES:
        return PlainTextResponse("Not Found", 404)
    if services.capabilities.bounded_responses and info.size > LAMBDA_BODY_BYTES:
        return PlainTextResponse("Too large to show here", 413)
    loaded = services.workspace.get(object_key)
    if loaded is None:
        return PlainTextResponse("Not Found", 404)
    data, _found = loaded
    shown = sniff.image_type(data[: sniff.HEAD_BYTES])  # the bytes decide, not the type they were stored with
    if shown is None:
        return PlainTextResponse("Not Found", 404)
    return Response(data, media_type=shown, headers={"Cache-Control": "private, max-age=3600", **INERT})


def public_link_ms(services: Services) -> int:
    """How long a public media link lives: `media.publicLinkDays` in the configuration (a positive number of days,
    fractions allowed), else `artifacts.PUBLIC_LINK_DAYS`."""
    section = services.config.effective().get("media")
    days = section.get("publicLinkDays") if isinstance(section, dict) else None
    if isinstance(days, bool) or not isinstance(days, int | float) or not 0 < days <= 3650:
        days = artifacts.PUBLIC_LINK_DAYS
    return int(days * artifacts.DAY_MS)


def _ended(services: Services, found: artifacts.Artifact) -> bool:
    """Past its own `expires-at`, or a public object whose link has expired."""
    now = services.now_ms()
    if found.expired(now):
        return True
    if found.owner != artifacts.GATEWAY_OWNER:
        return False
    ends = found.public_expiry_ms(public_link_ms(services))
    return ends is not None and ends < now


def _may_read(request: Request, found: artifacts.Artifact) -> bool:
    """A public object (GSV's media, an upload that asked to be public) is served to anyone by its unguessable name.
    Any other (the gateway credential's private uploads, an install's artifacts) is its owner's and the gateway
    credential's only, and to anyone else as absent as a missing one."""
    if found.owner == artifacts.GATEWAY_OWNER:
        return True
    try:
        caller = identify(request)
    except HTTPException:
        return False
    return found.readable_by(caller.user_id)


@router.post(
    "/channels/telegram/{account}/webhook",
    tags=["channels"],
    summary="Telegram delivers an update (checked against the account's webhook secret)",
)
async def telegram_webhook(account: str, request: Request, services: ServicesDep) -> JSONResponse:
    presented = request.headers.get("x-telegram-bot-api-secret-token")
    if not presented or not await run_in_threadpool(_telegram_secret_matches, services, account, presented):
        return JSONResponse({"ok": False, "error": "unauthorized"}, 401)
    body = await request.body()
    if not await run_in_threadpool(_telegram_update, services, account, body):
        return JSONResponse({"ok": False, "error": "try again"}, 503)
    return JSONResponse({"ok": True})


def _telegram_secret_matches(services: Services, account_id: str, presented: str) -> bool:
    from orbital.channels.telegram import TelegramAdapter  # lazy: on first delivery; no other route needs channels

    try:
        expected = TelegramAdapter().webhook_secret(services, account_id)
    except Exception as exc:  # configuration unreadable: refuse rather than process unauthenticated
        log.warning("telegram webhook: reading the configuration failed (%s)", type(exc).__name__)
        return False
    if expected is None:
        return False
    return hmac.compare_digest(presented.encode("utf-8"), expected.encode("utf-8"))


def _telegram_update(services: Services, account_id: str, body: bytes) -> bool:
    """Parse the update and hand it to the inbound pipeline. False when it should be delivered again (a passing
    failure, or the same message still being processed by an earlier delivery); failures are logged by type only."""
    from orbital.channels import inbound  # lazy: on first delivery, as above
    from orbital.channels.adapters import is_passing
    from orbital.channels.telegram import TelegramAdapter

    update_id: Any = None
    try:
        update = json.loads(body)
        if not isinstance(update, dict):
            raise ValueError("an update is a JSON object")
        update_id = update.get("update_id")
        if isinstance(update.get("callback_query"), dict):  # a button of a tool approval's prompt
            from orbital.channels import approval_prompt  # lazy: only button presses need it (as above)

            approval_prompt.callback(services, account_id, update)
            return True
        params = TelegramAdapter().inbound_params(services, account_id, update)
        if params is None:
            return True
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
