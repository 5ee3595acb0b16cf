"""What a messenger adapter is (`ChannelAdapter`), what it is given (`Outbound`) and what it answers or raises; the
adapters themselves and the choice between them are in `orbital.channels.adapters`."""

from __future__ import annotations

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
