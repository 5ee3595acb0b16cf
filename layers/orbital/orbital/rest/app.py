"""The HTTP side of the gateway: FastAPI, served by Mangum on Lambda and mounted directly by the local gateway."""

from __future__ import annotations

import functools
import hmac
import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

log = logging.getLogger("orbital.rest")


def create_app() -> FastAPI:
    app = FastAPI(title="Orbital", version="0.1.0", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "healthy"}

    @app.post("/channels/telegram/{account_id}/webhook")
    async def telegram_webhook(account_id: str, request: Request) -> JSONResponse:
        """Telegram delivers an update. Only a request carrying the account's webhook secret is looked at. An update
        that cannot be used (malformed, refused) is answered 200 so Telegram does not redeliver it; one that failed
        for a passing reason (storage, starting the run) is answered 503: Telegram delivers it again and, since a
        failed message is not marked as received, it is then processed."""
        presented = request.headers.get("x-telegram-bot-api-secret-token")
        if not presented or not await run_in_threadpool(_telegram_secret_matches, account_id, presented):
            return JSONResponse({"ok": False, "error": "unauthorized"}, status_code=401)
        body = await request.body()
        if not await run_in_threadpool(_telegram_update, account_id, body):
            return JSONResponse({"ok": False, "error": "try again"}, status_code=503)
        return JSONResponse({"ok": True})

    @app.exception_handler(404)
    def not_found(_request: Any, _exc: Any) -> JSONResponse:
        return JSONResponse({"error": "Not Found"}, status_code=404)

    return app


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


@functools.cache
def lambda_adapter() -> Any:
    from mangum import Mangum

    return Mangum(create_app(), lifespan="off")
