"""Which protocol a socket speaks, from its first text frame (and `?dialect=` on the upgrade URL, which forces one).

| first frame (a JSON object)                                              | dialect  |
|--------------------------------------------------------------------------|----------|
| `type` is `req` or `bin`                                                 | GSV      |
| `type` is `handshake`                                                    | WindieOS |
| `type` is another WindieOS message (`query`, ...)                        | WindieOS (refused: no handshake) |
| a `token`, no `method` and no `type`                                     | Exoclaw (its auth frame) |
| `id` and `method`, no `type`, method one of Exoclaw's four               | Exoclaw  |
| `jsonrpc` "2.0", any other method                                        | xeno     |
| anything else, non-JSON, binary                                          | GSV's rules (dropped, socket kept) |

A socket that received Exoclaw's unprompted hello (a loopback gateway without a token) takes any frame no other
dialect claims, non-JSON included, as Exoclaw's.
"""

from __future__ import annotations

from typing import Any

GSV = "gsv"
XENO = "xeno"
EXOCLAW = "exoclaw"
WINDIE = "windie"
KNOWN = frozenset({GSV, XENO, EXOCLAW, WINDIE})
EXOCLAW_METHODS = frozenset({"ping", "status", "chat.send", "plugin.list"})
WINDIE_TYPES = frozenset(
    {
        "query",
        "stop-query",
        "rehydrate-conversation",
        "compact-history",
        "load-settings",
        "update-settings",
        "list-models",
        "tool-result",
        "tool-bundle-result",
        "wakeword-detected",
    }
)
"""What a WindieOS client sends after its handshake: as a first frame, a WindieOS client that skipped it."""


def detect(frame: Any) -> str | None:
    """The dialect a first frame (parsed JSON, or None when it was not JSON) belongs to; None: no dialect claims it
    (GSV's rules apply)."""
    if not isinstance(frame, dict):
        return None
    kind = frame.get("type")
    if kind is not None:
        if kind in ("req", "bin"):
            return GSV
        if kind == "handshake" or (isinstance(kind, str) and kind in WINDIE_TYPES):
            return WINDIE
        return None
    method = frame.get("method")
    if "token" in frame and method is None:
        return EXOCLAW
    if not isinstance(method, str) or "id" not in frame:
        return None
    if method in EXOCLAW_METHODS:
        return EXOCLAW
    if frame.get("jsonrpc") == "2.0":
        return XENO
    return None


def forced(query: Any) -> str | None:
    """`?dialect=` of the upgrade URL, if it names a known dialect."""
    if isinstance(query, dict):
        value = query.get("dialect")
        if isinstance(value, str) and value.strip().lower() in KNOWN:
            return value.strip().lower()
    return None
