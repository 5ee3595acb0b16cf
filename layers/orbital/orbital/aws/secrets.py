"""The gateway token on AWS lives in Secrets Manager (the template creates the secret from its `GatewayAuthToken`
parameter), never in a function's environment. It is read once per container and kept for the container's life;
a failed read is not cached, so the next request tries again."""

from __future__ import annotations

import logging
import threading

from orbital.aws import clients
from orbital.settings import Settings

log = logging.getLogger("orbital.secrets")

_cache: dict[str, str] = {}
_lock = threading.Lock()


def gateway_token(settings: Settings) -> str | None:
    """The token clients must present: the environment's (local), else the secret's. None when neither is set."""
    if settings.auth_token:
        return settings.auth_token
    secret = settings.auth_token_secret
    if not secret:
        return None
    with _lock:
        cached = _cache.get(secret)
    if cached is not None:
        return cached
    value = clients.secretsmanager().get_secret_value(SecretId=secret).get("SecretString")
    if not isinstance(value, str) or not value:
        log.error("the gateway token secret holds no text")
        return None
    with _lock:
        _cache[secret] = value
    return value


def token_configured(settings: Settings) -> bool:
    """Whether a token is set up at all (without reading the secret)."""
    return bool(settings.auth_token or settings.auth_token_secret)


def forget() -> None:
    """Drop cached secrets (tests)."""
    with _lock:
        _cache.clear()
