"""SDK clients of the adapters that build one (Anthropic, OpenAI, Gemini), made once and shared by every call and
thread that reaches the same endpoint with the same key and headers, so connections are reused across model calls.
A container that meets more than a few distinct endpoints of one SDK starts that SDK's set over."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from orbital.agent.providers._types import ProviderInfo

MAX_PER_SDK = 8

_clients: dict[tuple[Any, ...], Any] = {}
_lock = threading.Lock()


def sdk_client(info: ProviderInfo, make: Callable[[ProviderInfo], Any]) -> Any:
    """The client `make(info)` builds for `info`'s endpoint, key and headers: the one made before, if any."""
    key = (make, info.base_url, info.api_key, tuple(sorted(info.headers.items())))
    with _lock:
        client = _clients.get(key)
        if client is None:
            same_sdk = [k for k in _clients if k[0] is make]
            if len(same_sdk) >= MAX_PER_SDK:
                for stale in same_sdk:
                    del _clients[stale]
            client = _clients[key] = make(info)
        return client
