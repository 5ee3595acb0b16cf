"""The signed URLs of the file workspace (`orbital.store.backends.files`), served by `orbital.local.object_urls`.

    {base}/_objects/{key, percent-encoded whole}?expires={unix seconds}&signature={hex}

The signature is HMAC-SHA256, under a key drawn at each start, of the method, the expiry and the key: a URL reads
(GET) or writes (PUT) one object until it expires, and nothing else.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable
from urllib.parse import parse_qs, quote

PATH = "/_objects/"


class ObjectUrls:
    """Makes and checks the signed URLs. `base_url`: the gateway's HTTP URL, or a callable giving it."""

    def __init__(self, key: bytes, base_url: str | Callable[[], str] | None) -> None:
        if len(key) < 16:
            raise ValueError("a URL signing key has at least 16 bytes")
        self._key = key
        self.base_url = base_url

    def __repr__(self) -> str:  # never the key
        return f"ObjectUrls(base_url={self.base_url!r})"

    def _signature(self, method: str, key: str, expires: int) -> str:
        message = f"{method}\n{expires}\n{key}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def url(self, method: str, key: str, expires_in: int, *, now: float | None = None) -> str:
        base = self.base_url() if callable(self.base_url) else self.base_url
        if not base:
            raise RuntimeError("the file workspace has no gateway URL to make presigned URLs on")
        expires = int(now if now is not None else time.time()) + int(expires_in)
        signature = self._signature(method, key, expires)
        return f"{base.rstrip('/')}{PATH}{quote(key, safe='')}?expires={expires}&signature={signature}"

    def refusal(self, method: str, key: str, query: str, *, now: float | None = None) -> str | None:
        """Why a request with this method, key and query string may not go on; None when it may."""
        fields = parse_qs(query, keep_blank_values=True)
        expires_text = (fields.get("expires") or [""])[0]
        signature = (fields.get("signature") or [""])[0]
        if not expires_text.isascii() or not expires_text.isdigit() or not signature:
            return "not a signed URL (expires and signature wanted)"
        expires = int(expires_text)
        if not hmac.compare_digest(self._signature(method, key, expires), signature):
            return "the signature does not match this method, object and expiry"
        if expires < (now if now is not None else time.time()):
            return "the URL has expired"
        return None
