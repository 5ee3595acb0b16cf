"""The local AWS stand-in's credentials: drawn at each start, required of every request to its port.

The moto server of `orbital dev` listens on a loopback port for what cannot be answered in process (presigned
transfer URLs followed by a node, `orbital export` / `import` while the gateway runs). Loopback is not private on a
machine shared with other users, and moto checks no signature. So the server only answers a request that presents
this start's access key id (in its SigV4 `Authorization` header, in a presigned URL's `X-Amz-Credential`, or, for
moto's own `/moto-api` calls, in `X-Orbital-Key`). The key id is known only to this process (its environment), to
`runtime.json` in the data directory (readable by its owner only) and to the presigned URLs it hands to
authenticated nodes. Anyone else gets 403 AccessDenied. (The signature itself is not checked: whoever holds the key
id already holds the gateway's token or the user's files.)
"""

from __future__ import annotations

import hmac
import re
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

KEY_HEADER = "X-Orbital-Key"
"""Carries the key id on requests that are not signed (moto's own configuration API)."""

_CREDENTIAL = re.compile(r"Credential=([A-Za-z0-9]+)/")


@dataclass(frozen=True, repr=False)
class Credentials:
    key_id: str
    secret: str

    @classmethod
    def draw(cls) -> Credentials:
        """A fresh pair, shaped like AWS's (an upper-case alphanumeric key id, a 40-character secret)."""
        return cls("ORBL" + secrets.token_hex(10).upper(), secrets.token_urlsafe(30)[:40])

    def pair(self) -> tuple[str, str]:
        return self.key_id, self.secret


def presented_key_id(environ: dict[str, Any]) -> str | None:
    """The access key id a WSGI request presents, if any."""
    header = environ.get("HTTP_" + KEY_HEADER.upper().replace("-", "_"))
    if isinstance(header, str) and header:
        return header
    found = _CREDENTIAL.search(str(environ.get("HTTP_AUTHORIZATION") or ""))
    if found is not None:
        return found[1]
    query = parse_qs(str(environ.get("QUERY_STRING") or ""))
    for name in ("X-Amz-Credential", "AWSAccessKeyId"):
        values = query.get(name)
        if values:
            return values[0].split("/", 1)[0]
    return None


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

_DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
    b"<Message>This local AWS endpoint answers only the Orbital gateway that started it</Message></Error>"
)


def require_key(app: WsgiApp, key_id: str) -> WsgiApp:
    """`app` answering only requests that present `key_id` (403 AccessDenied otherwise)."""
    expected = key_id.encode()

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        presented = presented_key_id(environ)
        if presented is None or not hmac.compare_digest(presented.encode(), expected):
            start_response(
                "403 Forbidden", [("Content-Type", "application/xml"), ("Content-Length", str(len(_DENIED)))]
            )
            return [_DENIED]
        return app(environ, start_response)

    return guarded
