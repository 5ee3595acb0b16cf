"""What a method handler receives besides its params: who called, over which socket, and the ports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.store.connections import Connection


@dataclass
class CallContext:
    services: Services
    connection_id: str
    frame_id: Any
    conn: Connection | None = None
    close_after: tuple[int, str] | None = None
    """Close the socket (code, reason) after the response has been sent."""
    after_reply: list[Any] = field(default_factory=list)
    """Callables run after the response is on its way (e.g. closing a replaced socket)."""
    internal: dict[str, Any] = field(default_factory=dict)
    """What the gateway's own code passes to a method beside its params, which no frame can set: a dialect's
    translator gives `chat.send` the `media` of a message (`orbital.dialects.base.call`)."""
    _config: dict[str, Any] | None = None

    @property
    def mode(self) -> str | None:
        return self.conn.mode if self.conn else None

    def config(self) -> dict[str, Any]:
        """The effective configuration, read at most once per call."""
        if self._config is None:
            self._config = self.services.config.effective()
        return self._config

    def now_ms(self) -> int:
        return self.services.now_ms()
