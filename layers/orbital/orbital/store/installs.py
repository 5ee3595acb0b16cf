"""Install identities: a WindieOS install registers once and gets a token; the token names a user id.

A token is `wnd_install_` followed by 32 random bytes in URL-safe base64; the user id is `user_` plus 16 hex
digits, the install id `inst_` plus 16. The table keeps only an HMAC-SHA-256 of the token keyed with the gateway's
own token (`keys.install`): a copy of the table hands out no credential, and changing the gateway token ends every
install at once, as it ends every other way in (ADR 0025). `revoke` ends one. Whether registration is open, and who
may call it, is the HTTP layer's decision.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from orbital.store import conditions as cond
from orbital.store import keys
from orbital.store.table import ConflictError, Table

TOKEN_PREFIX = "wnd_install_"


@dataclass(frozen=True)
class Install:
    user_id: str
    install_id: str
    operating_system: str
    created_at_ms: int


def _hash(token: str, gateway_token: str) -> str:
    return hmac.new(gateway_token.encode("utf-8"), token.encode("utf-8"), hashlib.sha256).hexdigest()


def looks_like_token(value: str) -> bool:
    return value.startswith(TOKEN_PREFIX)


def register(table: Table, operating_system: str, *, now_ms: int, gateway_token: str) -> tuple[Install, str]:
    """A new install and its token (the only time the token exists in the clear). `gateway_token`: the gateway's
    token ("" for a gateway without one)."""
    while True:
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        install = Install(
            user_id=f"user_{secrets.token_hex(8)}",
            install_id=f"inst_{secrets.token_hex(8)}",
            operating_system=operating_system[:64],
            created_at_ms=now_ms,
        )
        try:
            table.put(
                keys.install(_hash(token, gateway_token)),
                {
                    "userId": install.user_id,
                    "installId": install.install_id,
                    "os": install.operating_system,
                    "createdAt": now_ms,
                },
                condition=cond.not_exists("PK"),
            )
        except ConflictError:  # 256 random bits colliding: draw again rather than hand out someone else's
            continue
        return install, token


def _install(data: dict[str, object]) -> Install:
    created = data.get("createdAt")
    return Install(
        user_id=str(data.get("userId", "")),
        install_id=str(data.get("installId", "")),
        operating_system=str(data.get("os", "")),
        created_at_ms=created if isinstance(created, int) else 0,
    )


def find(table: Table, token: str, *, gateway_token: str) -> Install | None:
    """The install a token belongs to (registered under this gateway token), or None."""
    if not looks_like_token(token):
        return None
    rec = table.get(keys.install(_hash(token, gateway_token)))
    return None if rec is None else _install(rec.data)


def listing(table: Table) -> list[Install]:
    """Every install, the oldest first (those of an earlier gateway token included, until revoked)."""
    found = [_install(rec.data) for rec in table.query(keys.INSTALLS_PK)]
    return sorted(found, key=lambda i: (i.created_at_ms, i.install_id))


def revoke(table: Table, install_id: str) -> bool:
    """End the install `install_id` (its token stops working at once). False if there is none."""
    removed = False
    for rec in table.query(keys.INSTALLS_PK):
        if rec.data.get("installId") == install_id:
            table.delete((rec.pk, rec.sk))
            removed = True
    return removed
