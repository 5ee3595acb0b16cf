"""How the gateway reaches a messenger: one adapter per channel.

A channel either has a built-in adapter (Telegram: webhooks in, Bot API out — serverless, nothing to keep
connected) or is served by a connected channel socket (a `channel`-mode WebSocket client that bridges a messenger,
as GSV's channel workers do over WebSocket). `adapter_for` picks the built-in one by channel name, else the socket
one. Adding a messenger is one module with a class like `TelegramAdapter` and one line in `BUILT_IN` (ADR 0009).
What an adapter is and says (`ChannelAdapter`, `Outbound`, `ChannelError`) is in `orbital.channels.base`.
"""

from __future__ import annotations

import importlib
import re

from orbital.channels.base import ChannelAdapter
from orbital.channels.socket import SocketAdapter


def is_passing(exc: BaseException) -> bool:
    """A failure worth another delivery of the same message (storage or a service out of breath, a conflict), not
    one the message itself causes (bad input, a refused sender, a bug, a spent token budget: an error that says it is
    not `retryable`)."""
    retryable = getattr(exc, "retryable", None)
    if retryable is not None:
        return retryable is True
    code = getattr(exc, "code", None)
    if isinstance(code, int) and not isinstance(code, bool):
        return code in (408, 409, 429) or code >= 500
    try:
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:  # pragma: no cover - botocore is always installed
        return isinstance(exc, OSError | TimeoutError)
    return isinstance(exc, BotoCoreError | ClientError | OSError | TimeoutError)


_INTERNAL = re.compile(r"arn:aws|An error occurred \(|Traceback|botocore|\b\d{12}\b")
GENERIC_FAILURE = "something went wrong on the gateway"


def public_reason(text: str) -> str:
    """What a messenger user may read of an error: the message, unless it carries the gateway's internals (AWS
    resource names, account ids, exception dumps)."""
    return GENERIC_FAILURE if _INTERNAL.search(text) else text


BUILT_IN: dict[str, str] = {
    "telegram": "orbital.channels.telegram:TelegramAdapter",
}
"""Channel name → adapter class (`module:Class`), imported only when that channel is used."""


def built_in(channel: str) -> ChannelAdapter | None:
    target = BUILT_IN.get(channel)
    if target is None:
        return None
    module, name = target.split(":", 1)
    # by name, so a messenger's module (its client, its rules) is imported only when that channel is used
    adapter: ChannelAdapter = getattr(importlib.import_module(module), name)()
    return adapter


def adapter_for(channel: str) -> ChannelAdapter:
    """The built-in adapter of `channel`, else the one that talks to its connected channel socket."""
    found = built_in(channel)
    if found is not None:
        return found
    return SocketAdapter(channel)
