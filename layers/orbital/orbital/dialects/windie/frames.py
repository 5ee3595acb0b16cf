"""The frames a WindieOS socket is sent: plain replies, a turn's numbered events, errors; what its handshake
established about a socket."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from orbital.dialects.windie.common import (
    MAX_REF_CHARS,
    _InvalidFrameError,
    _now_iso,
)
from orbital.domain.config import as_dict
from orbital.store import subscriptions
from orbital.store.subscriptions import Subscription

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.store.connections import Connection


def _plain(
    kind: str, payload: dict[str, Any], rid: Any = None, *, user: str | None = None, conversation: str | None = None
) -> dict[str, Any]:
    """A reply that is no turn's event: the request's id (a new one when there is none)."""
    frame: dict[str, Any] = {"id": rid if rid is not None else str(uuid.uuid4()), "type": kind, "payload": payload}
    if conversation is not None:
        frame["conversation_ref"] = conversation
    if user:
        frame["user_id"] = user
    frame["timestamp"] = _now_iso()
    return frame


def turn_event(ref: dict[str, Any], kind: str, payload: dict[str, Any], sequence: int) -> dict[str, Any]:
    """An event of a turn, with every correlation field a WindieOS client expects; `sequence` is its number in the
    turn (see `_numbered`)."""
    turn = str(ref.get("turn"))
    return {
        "id": turn,
        "type": kind,
        "payload": payload,
        "turn_ref": turn,
        "conversation_ref": ref.get("conv"),
        "event_id": f"{turn}-evt-{sequence:06d}-{kind}",
        "sequence": sequence,
        "session_id": ref.get("session"),
        "user_id": ref.get("user"),
        "timestamp": _now_iso(),
    }


def _local_events(ref: dict[str, Any], events: list[tuple[str, dict[str, Any]]], after: int = 0) -> list[Any]:
    """Events of a turn numbered here, after `after` (no run follows the turn: no other writer numbers it)."""
    return [turn_event(ref, kind, body, after + i) for i, (kind, body) in enumerate(events, start=1)]


def _numbered(services: Services, sub: Subscription, events: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """The next events of a followed turn, numbered 1, 2, 3 ... across the whole turn, whichever step, process or
    Lambda sends them: the numbers are taken from a counter on the socket's subscription to the run, in one
    atomic addition for the lot (the SDK keys sequences by `turn_ref` and refuses a gap or a repeat). Nothing when
    the subscription is gone (`stop-query` dropped it, the run ended): nothing more of the turn is sent then, and
    no number is taken (a socket gets only its own turns' events, so no other socket's event takes one either)."""
    if not events:
        return []
    last = subscriptions.count_events(services.table, sub.run_id, sub.connection_id, len(events))
    if last is None:
        sub.scratch["stopped"] = True
        return []
    return _local_events(sub.ref, events, last - len(events))


def _error(rid: Any, message: str, user: str, *, turn: str | None = None, conversation: str | None = None) -> Any:
    payload: dict[str, Any] = {"message": message}
    if turn is not None:
        payload["turn_ref"] = turn
    frame = _plain("error", payload, rid, user=user, conversation=conversation)
    if turn is not None:
        frame["turn_ref"] = turn
    return frame


class _WindieSocket:
    """What the handshake established about a socket."""

    def __init__(self, conn: Connection) -> None:
        state = as_dict(conn.extra.get("windie"))
        self.conn = conn
        self.user = str(state.get("user") or "")
        self.admin = bool(state.get("admin"))
        self.policy: dict[str, Any] = as_dict(state.get("policy"))
        self.runtime: dict[str, Any] = as_dict(state.get("runtime"))
        names = state.get("tools")
        self.tool_names: list[str] = [n for n in names if isinstance(n, str)] if isinstance(names, list) else []

    @property
    def narrows(self) -> bool:
        """Its runs' tools differ from everyone's: tools of its own, or a policy that narrows the list."""
        return bool(self.tool_names) or self.policy != {"mode": "default_plus_client"}

    @property
    def reader(self) -> str | None:
        """Whose artifacts it may use: an install's user its own; the gateway's credential every one."""
        return None if self.admin else self.user


def _ref(payload: dict[str, Any], name: str = "conversation_ref") -> str:
    value = payload.get(name)
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_REF_CHARS:
        raise _InvalidFrameError(f"{name} is required")
    return value
