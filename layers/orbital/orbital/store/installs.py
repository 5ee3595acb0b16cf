"""Install identities: a WindieOS install registers once and gets a token; the token names a user id.

Only the SHA-256 of a token is stored (`keys.install`), so a copy of the table does not hand out credentials. A
token is `wnd_install_` followed by 32 random bytes in URL-safe base64; the user id is `user_` plus 16 hex digits,
the install id `inst_` plus 16. Whether registration is open, and who may call it, is the HTTP layer's decision.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from orbital.store import keys
from orbital.store.table import ConflictError, Table

TOKEN_PREFIX = "wnd_install_"


@dataclass(frozen=True)
class Install:
    user_id: str
    install_id: str
    operating_system: str
    created_at_ms: int


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def looks_like_token(value: str) -> bool:
    return value.startswith(TOKEN_PREFIX)


def register(table: Table, operating_system: str, *, now_ms: int) -> tuple[Install, str]:
    """A new install and its token (the only time the token exists in the clear)."""
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
                keys.install(_hash(token)),
                {
                    "userId": install.user_id,
                    "installId": install.install_id,
                    "os": install.operating_system,
                    "createdAt": now_ms,
                },
                condition="attribute_not_exists(PK)",
            )
        except ConflictError:  # 256 random bits colliding: draw again rather than hand out someone else's
            continue
        return install, token


def find(table: Table, token: str) -> Install | None:
    """The install a token belongs to, or None."""
    if not looks_like_token(token):
        return None
    rec = table.get(keys.install(_hash(token)))
    if rec is None:
        return None
    attrs = rec.data
    return Install(
        user_id=str(attrs.get("userId", "")),
        install_id=str(attrs.get("installId", "")),
        operating_system=str(attrs.get("os", "")),
        created_at_ms=int(attrs.get("createdAt") or 0),
    )
