"""Images in stored messages are references to S3 objects (`{"type":"image","r2Key","mimeType"}`, spec §5.3, §7.4);
before a model call they are replaced by their bytes. A missing object becomes the text "[Image no longer
available]". Bodies are kept in a per-process cache bounded by size, so a conversation with images does not fetch
them again on every turn.
"""

from __future__ import annotations

import base64
import copy
import logging
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cachetools import LRUCache

    from orbital.ports.services import Services
    from orbital.store.history import MessageMemo

log = logging.getLogger("orbital.agent.media")

CACHE_BYTES = 50 * 1024 * 1024
MISSING = "[Image no longer available]"

_made: LRUCache[str, str] | None = None
"""Images (base64) by object key: at most `CACHE_BYTES` characters in all, the least recently used out first."""
_lock = threading.Lock()


def _cache() -> LRUCache[str, str]:
    global _made
    if _made is None:
        # lazy: agent_steps imports this module at every cold start, and only turns with images use the cache
        from cachetools import LRUCache

        _made = LRUCache(maxsize=CACHE_BYTES, getsizeof=len)
    return _made


def _cached(key: str) -> str | None:
    with _lock:
        return _cache().get(key)


def _remember(key: str, data: str) -> None:
    with _lock:
        cache = _cache()
        if key not in cache and len(data) <= CACHE_BYTES:  # an image larger than the whole bound is not kept
            cache[key] = data


def _load(services: Services, key: str) -> str | None:
    hit = _cached(key)
    if hit is not None:
        return hit
    try:
        found = services.workspace.get(key)
    except Exception:
        log.exception("reading image %s failed", key)
        return None
    if found is None:
        return None
    data = base64.b64encode(found[0]).decode("ascii")
    _remember(key, data)
    return data


def _references(message: dict[str, Any]) -> bool:
    """Whether a stored message refers to an image object (user and toolResult messages)."""
    content = message.get("content")
    if message.get("role") not in ("user", "toolResult") or not isinstance(content, list):
        return False
    return any(isinstance(b, dict) and b.get("type") == "image" and b.get("r2Key") for b in content)


def hydrate(
    services: Services, messages: list[dict[str, Any]], memo: MessageMemo | None = None
) -> list[dict[str, Any]]:
    """A copy of `messages` with every referenced image inlined (user and toolResult messages). With the memo of
    the session's history, only the messages added since its last call are looked through for references (where
    the earlier ones refer to images is kept; their bytes are not)."""
    if memo is None:
        positions = [i for i, m in enumerate(messages) if _references(m)]
    else:
        count, kept = memo.prefix("media", messages)
        positions = [*(kept or ()), *(i for i in range(count, len(messages)) if _references(messages[i]))]
        memo.keep_prefix("media", messages, len(messages), tuple(positions))
    out = list(messages)
    for index in positions:
        out[index] = _hydrated(services, messages[index])
    return out


def _hydrated(services: Services, message: dict[str, Any]) -> dict[str, Any]:
    blocks = []
    for block in message["content"]:
        if isinstance(block, dict) and block.get("type") == "image" and block.get("r2Key"):
            data = _load(services, str(block["r2Key"]))
            if data is None:
                blocks.append({"type": "text", "text": MISSING})
            else:
                blocks.append({"type": "image", "data": data, "mimeType": block.get("mimeType") or "image/png"})
        else:
            blocks.append(block)
    copied = copy.copy(message)
    copied["content"] = blocks
    return copied
