"""What the gateway keeps of remote MCP servers' logins (OAuth, ADR 0045): one grant per server and the logins under
way.

A grant (`MCPAUTH/{server}`) holds the server URL it was made for (tokens are only ever sent to that URL: a server
whose URL changes needs a new login), the authorization server's issuer and token endpoint, the resource the tokens
are for, the client registration (dynamic, or the configured client id), and the tokens with the epoch-ms time the
access token expires. Its `status` is `ok` or `needs-login` (the refresh token was refused: the grant was revoked or
expired), with the reason. The tokens and the client secret are secrets: nothing here is returned by a method or
logged, and `public` is what may be shown.

A login under way (`MCPLOGIN/{state}`) holds the PKCE verifier and what the exchange needs; it is valid 10 minutes
and used once: `take_login` deletes it in the same request that reads it (one conditional delete), so a state sent
back twice finishes at most one login.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orbital.store import conditions as cond
from orbital.store import keys
from orbital.store.table import ConflictError, Table

LOGIN_TTL_MS = 10 * 60_000

OK = "ok"
NEEDS_LOGIN = "needs-login"


@dataclass(frozen=True)
class Grant:
    server: str
    url: str
    """The MCP server URL the grant was made for."""
    issuer: str
    token_endpoint: str
    resource: str | None
    client: dict[str, Any]
    """The client registration (`OAuthClientInformationFull` as JSON; may hold a client secret)."""
    tokens: dict[str, Any] | None
    """`{access_token, refresh_token?, scope?, token_type}`; None once the grant needs a new login."""
    expires_at_ms: int | None
    """When the access token expires (None: the server did not say)."""
    status: str
    reason: str | None
    updated_at_ms: int

    def usable_for(self, url: str) -> bool:
        return self.status == OK and self.tokens is not None and self.url == url

    def public(self) -> dict[str, Any]:
        """What may be shown of the grant: never a token nor a secret."""
        return {"status": self.status, "reason": self.reason, "expiresAt": self.expires_at_ms}


def _grant(server: str, data: dict[str, Any]) -> Grant:
    tokens = data.get("tokens")
    expires = data.get("expiresAt")
    updated = data.get("updatedAt")
    reason = data.get("reason")
    resource = data.get("resource")
    client = data.get("client")
    return Grant(
        server=server,
        url=str(data.get("url", "")),
        issuer=str(data.get("issuer", "")),
        token_endpoint=str(data.get("tokenEndpoint", "")),
        resource=resource if isinstance(resource, str) else None,
        client=dict(client) if isinstance(client, dict) else {},
        tokens=dict(tokens) if isinstance(tokens, dict) else None,
        expires_at_ms=expires if isinstance(expires, int) else None,
        status=str(data.get("status", NEEDS_LOGIN)),
        reason=reason if isinstance(reason, str) else None,
        updated_at_ms=updated if isinstance(updated, int) else 0,
    )


def get(table: Table, server: str) -> Grant | None:
    rec = table.get(keys.mcp_auth(server))
    return None if rec is None else _grant(server, rec.data)


def state(table: Table, server: str, url: str) -> str:
    """`ok` when a grant for `url` is kept for `server`, else `needs-login` (no grant, revoked, or made for another
    URL)."""
    grant = get(table, server)
    return OK if grant is not None and grant.usable_for(url) else NEEDS_LOGIN


def save(
    table: Table,
    server: str,
    *,
    url: str,
    issuer: str,
    token_endpoint: str,
    resource: str | None,
    client: dict[str, Any],
    tokens: dict[str, Any],
    expires_at_ms: int | None,
    now_ms: int,
) -> Grant:
    """A new grant (a login just finished), replacing any earlier one."""
    data = {
        "url": url,
        "issuer": issuer,
        "tokenEndpoint": token_endpoint,
        "resource": resource,
        "client": dict(client),
        "tokens": dict(tokens),
        "expiresAt": expires_at_ms,
        "status": OK,
        "reason": None,
        "updatedAt": now_ms,
    }
    table.put(keys.mcp_auth(server), data)
    return _grant(server, data)


def replace_tokens(
    table: Table, grant: Grant, tokens: dict[str, Any] | None, expires_at_ms: int | None, *, now_ms: int, reason: str
) -> Grant:
    """The grant with new tokens (a refresh), or without any (`tokens` None: it needs a new login, for `reason`)."""
    data = {
        "url": grant.url,
        "issuer": grant.issuer,
        "tokenEndpoint": grant.token_endpoint,
        "resource": grant.resource,
        "client": dict(grant.client),
        "tokens": dict(tokens) if tokens is not None else None,
        "expiresAt": expires_at_ms if tokens is not None else None,
        "status": OK if tokens is not None else NEEDS_LOGIN,
        "reason": None if tokens is not None else reason,
        "updatedAt": now_ms,
    }
    table.put(keys.mcp_auth(grant.server), data)
    return _grant(grant.server, data)


def forget(table: Table, server: str) -> None:
    table.delete(keys.mcp_auth(server))


# --- logins under way ------------------------------------------------------------------------------------------------


def save_login(table: Table, state: str, data: dict[str, Any], *, now_ms: int) -> int:
    """Keep a login under way for 10 minutes under its `state`; returns when it expires (epoch ms)."""
    expires = now_ms + LOGIN_TTL_MS
    table.put(
        keys.mcp_login(state),
        {**data, "expiresAt": expires},
        ttl=expires // 1000 + 1,
        condition=cond.not_exists("PK"),
    )
    return expires


def take_login(table: Table, state: str, *, now_ms: int) -> dict[str, Any] | None:
    """The login under way of `state`, deleted in the same request that reads it; None when there is none (unknown,
    used already or expired)."""
    try:
        old = table.delete(keys.mcp_login(state), condition=cond.exists("PK"), return_old=True)
    except ConflictError:
        return None
    if old is None:
        return None
    expires = old.data.get("expiresAt")
    if not isinstance(expires, int) or expires <= now_ms:
        return None
    return dict(old.data)
