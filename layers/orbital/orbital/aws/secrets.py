"""The gateway token on AWS lives in Secrets Manager (the template creates the secret from its `GatewayAuthToken`
parameter), never in a function's environment. It is read through Powertools' `SecretsProvider` (our own client
factory's client) and kept at most `MAX_AGE_S` per container, so a rotation of the secret takes effect within
minutes without a deployment; a failed read is not cached, so the next request tries again."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from orbital.aws import clients
from orbital.protocol.local_token import MIN_TOKEN_LENGTH
from orbital.settings import Settings

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.parameters import SecretsProvider

log = logging.getLogger("orbital.secrets")

MAX_AGE_S = 300
"""How long a container keeps the token it read before reading it again."""

_provider: SecretsProvider | None = None
_lock = threading.Lock()


def _secrets() -> SecretsProvider:
    global _provider
    with _lock:
        if _provider is None:
            # imported here: only a deployment that keeps its token in a secret pays for it, once per container
            from aws_lambda_powertools.utilities.parameters import SecretsProvider

            _provider = SecretsProvider(boto3_client=clients.secretsmanager())
        return _provider


def gateway_token(settings: Settings) -> str | None:
    """The token clients must present: the environment's (local), else the secret's. None when neither is set."""
    if settings.auth_token:
        return settings.auth_token
    secret = settings.auth_token_secret
    if not secret:
        return None
    value = _secrets().get(secret, max_age=MAX_AGE_S)
    if not isinstance(value, str) or not value:
        log.error("the gateway token secret holds no text")
        return None
    if len(value) < MIN_TOKEN_LENGTH:  # set by hand past the template's MinLength: nobody gets in, never a weak door
        log.error(
            "the gateway token secret is shorter than %d characters: every client is refused until it is replaced",
            MIN_TOKEN_LENGTH,
        )
        return None
    return value


def token_configured(settings: Settings) -> bool:
    """Whether a token is set up at all (without reading the secret)."""
    return bool(settings.auth_token or settings.auth_token_secret)


def forget() -> None:
    """Drop the cached token and the client that read it (tests)."""
    global _provider
    with _lock:
        _provider = None
