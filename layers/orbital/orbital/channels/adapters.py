"""How the gateway reaches a messenger: one adapter per channel.

A channel either has a built-in adapter (Telegram: webhooks in, Bot API out — serverless, nothing to keep
connected) or is served by a connected channel socket (a `channel`-mode WebSocket client that bridges a messenger,
as GSV's channel workers do over WebSocket). `adapter_for` picks the built-in one by channel name, else the socket
one. Adding a messenger is one module with a class like `TelegramAdapter` and one line in `BUILT_IN` (ADR 0009).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from orbital.ports.services import Services


@dataclass
class Outbound:
    """A message to send: to `peer` (`{kind, id, name?, threadId?}`) of account `account_id`."""

    account_id: str
    peer: dict[str, Any]
    text: str
    reply_to_id: str | None = None
    session_key: str = ""


@dataclass
class ControlResult:
    """What `start` / `stop` / `status` / `login` / `logout` answer (the RPC result without `channel`)."""

    ok: bool = True
    data: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


class ChannelAdapter(Protocol):
    """What the gateway needs from a messenger. Every method may raise `ChannelError` with a user-facing text."""

    channel: str

    def send(self, services: Services, message: Outbound) -> str | None:
        """Deliver a message; returns the messenger's message id when it has one."""
        ...

    def typing(self, services: Services, account_id: str, peer: dict[str, Any], on: bool) -> None:
        """Show (or stop showing) that the agent is writing. Best effort."""
        ...

    def start(self, services: Services, account_id: str, config: dict[str, Any]) -> ControlResult: ...

    def stop(self, services: Services, account_id: str) -> ControlResult: ...

    def status(self, services: Services, account_id: str | None) -> list[dict[str, Any]]:
        """`[{accountId, connected, authenticated, mode?, lastActivity?, error?, extra?}]` (spec §12.5)."""
        ...

    def login(self, services: Services, account_id: str, force: bool) -> ControlResult: ...

    def logout(self, services: Services, account_id: str) -> ControlResult: ...


class ChannelError(Exception):
    """A channel operation failed; `message` is what the caller (or the model) is told."""

    def __init__(self, message: str, *, code: int = 500) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


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
    adapter: ChannelAdapter = getattr(importlib.import_module(module), name)()
    return adapter


def adapter_for(channel: str) -> ChannelAdapter:
    """The built-in adapter of `channel`, else the one that talks to its connected channel socket."""
    found = built_in(channel)
    if found is not None:
        return found
    from orbital.channels.socket import SocketAdapter

    return SocketAdapter(channel)
