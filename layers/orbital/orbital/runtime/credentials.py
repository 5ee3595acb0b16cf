"""What a bearer token presented to the gateway is worth: the one judgement behind `$connect`'s `Authorization`
header and every HTTP route (ADR 0025).

- `GATEWAY`: the gateway's own token (compared in constant time).
- `INSTALL`: a WindieOS install's token (`wnd_install_…`) registered under the current gateway token; it names a user.
- `DEVICE`: a device token (`orb_dev_…`, ADR 0043) of this gateway, neither revoked nor expired; `device` is its
  record (role and binding). Read afresh at every use: a revocation is refused at the next one.
- `NONE`: nothing presented, or a bearer a gateway without a token has no use for (it ignores bearers, as GSV does).
- `WRONG`: anything else on a gateway with a token, and an install token no install has (unknown, revoked, or of an
  earlier gateway token) on any gateway: a revoked install must not become the owner by being ignored. So is a device
  token that is unknown, revoked or expired, and any device token on a gateway without a token (it issues none).

A deployment that should have a token and has none is `MISSING_TOKEN`; a token secret that cannot be read raises
`TokenUnreadableError` (the caller answers "try again", never lets anyone in). Tokens are never logged.
"""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from orbital.aws import secrets
from orbital.store import devices, installs

if TYPE_CHECKING:
    from orbital.ports.services import Services

log = logging.getLogger("orbital.credentials")


class Kind(Enum):
    GATEWAY = "gateway"
    INSTALL = "install"
    DEVICE = "device"
    NONE = "none"
    WRONG = "wrong"
    MISSING_TOKEN = "missing-token"


class TokenUnreadableError(Exception):
    """The gateway token's secret could not be read (a passing failure)."""


@dataclass(frozen=True)
class Judged:
    kind: Kind
    install: installs.Install | None = None
    device: devices.Device | None = None
    token_set: bool = False
    """The gateway has a token (so `NONE` is no credential)."""


def judge(services: Services, presented: str | None) -> Judged:
    settings = services.settings
    if not secrets.token_configured(settings):
        if settings.require_token:  # a deployment without its token serves nothing
            return Judged(Kind.MISSING_TOKEN)
        if presented is not None and devices.looks_like_token(presented):
            return Judged(Kind.WRONG)  # no gateway token, no key: no device token is this gateway's
        if presented is not None and installs.looks_like_token(presented):
            found = installs.find(services.table, presented, gateway_token="")
            # an unknown or revoked install is refused, never taken for the owner
            return Judged(Kind.INSTALL, found) if found is not None else Judged(Kind.WRONG)
        return Judged(Kind.NONE)
    try:
        expected = secrets.gateway_token(settings) or ""
    except Exception as exc:
        log.error("reading the gateway token failed (%s)", type(exc).__name__)
        raise TokenUnreadableError from None
    if presented is None:
        return Judged(Kind.NONE, token_set=True)
    if devices.looks_like_token(presented):
        device = (
            devices.authenticate(services.table, presented, key=devices.device_key(expected), now_ms=services.now_ms())
            if expected
            else None
        )
        return Judged(Kind.DEVICE, device=device, token_set=True) if device else Judged(Kind.WRONG, token_set=True)
    if installs.looks_like_token(presented):
        found = installs.find(services.table, presented, gateway_token=expected) if expected else None
        return Judged(Kind.INSTALL, found, token_set=True) if found else Judged(Kind.WRONG, token_set=True)
    if expected and hmac.compare_digest(presented.encode(), expected.encode()):
        return Judged(Kind.GATEWAY, token_set=True)
    return Judged(Kind.WRONG, token_set=True)


def gateway_token_for_installs(services: Services) -> str:
    """The key install tokens are registered under: the gateway token, "" for a gateway without one."""
    if not secrets.token_configured(services.settings):
        return ""
    try:
        return secrets.gateway_token(services.settings) or ""
    except Exception as exc:
        log.error("reading the gateway token failed (%s)", type(exc).__name__)
        raise TokenUnreadableError from None
