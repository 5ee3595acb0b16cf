"""A dialect's turn that answers a paused run's tool approval (xeno, Exoclaw, WindieOS).

Their clients run one turn at a time and wait for its end before the user can type again, so a run that pauses ends
its turn: the prompt is that turn's reply (each dialect's encoder, state `paused`, then its subscription goes). The
user's next message goes through `chat.send` like any other; the engine takes it as the answer (`{status: "paused",
runId, response, approvalId?}`). Its `response` is the reply of that turn, and when the answer let the run go on
(`Approved {tool}. Continuing run.` / `Denied {tool}. Continuing run without executing it.`: GSV's exact strings)
the turn follows the run from there: the run's next text, tool events and end arrive as that turn's, until it ends
or pauses again. An answer that leaves the run paused (a reminder, an unknown id) ends its turn with the response.

So that none of the run's events is missed, the answering turn subscribes to the paused run before `chat.send`
(`begin`); so that none overtakes the response, an event of that run for that socket waits, in this process, until
the response is out (`held`: a run step on another thread waits at most `HOLD_S`; one emitted on the very thread
that is answering is kept and handed back to be sent after the response). Across processes (AWS) the order is the
posting order, as for every other event.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orbital.agent import approvals
from orbital.dialects import base
from orbital.domain.messages import text_of

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.store.connections import Connection
    from orbital.store.subscriptions import Subscription

RESUMED_ENDINGS = ("Continuing run.", "Continuing run without executing it.")
"""How the engine's `response` ends when the answer let the run go on (GSV's strings, §4.5)."""
HOLD_S = 2.0
"""The longest a run's event waits for the answering turn's response to be sent (normally microseconds)."""


@dataclass
class _Hold:
    owner: int
    released: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    kept: list[dict[str, Any]] = field(default_factory=list)


_HOLDS: dict[tuple[str, str], _Hold] = {}
_GUARD = threading.Lock()


@dataclass
class Answer:
    """A turn that may answer the approval `run_id` waits for; `sub` follows that run for the turn."""

    run_id: str
    sub: Subscription
    _hold: _Hold


def paused_run(services: Services, session_key: str) -> str | None:
    """The session's current run when it waits for an approval (the session's meta says so: one read)."""
    meta = services.sessions.load_meta(session_key)
    if not approvals.waits_for_answer(meta):
        return None
    run_id = ((meta or {}).get("currentRun") or {}).get("runId")
    return run_id if isinstance(run_id, str) and run_id else None


def begin(services: Services, conn: Connection, session_key: str, ref: dict[str, Any]) -> Answer | None:
    """Before `chat.send` of a turn: when the session waits for an approval, subscribe the turn to the paused run
    (its events are held until `settle`). None when nothing waits."""
    run_id = paused_run(services, session_key)
    if run_id is None:
        return None
    hold = _Hold(threading.get_ident())
    with _GUARD:
        _HOLDS[(run_id, conn.connection_id)] = hold
    sub = base.subscribe(services, conn, run_id, session_key, {**ref, "answering": True})
    return Answer(run_id, sub, hold)


def resumed(payload: Any) -> bool:
    """Whether `chat.send`'s paused answer let the run go on (a decision), rather than leaving it paused."""
    if not isinstance(payload, dict) or payload.get("status") != "paused" or payload.get("approvalId"):
        return False
    response = payload.get("response")
    return isinstance(response, str) and response.endswith(RESUMED_ENDINGS)


def settle(services: Services, answer: Answer | None, *, follow: bool) -> list[dict[str, Any]]:
    """After the turn's own frames are out: release the run's events. `follow`: the turn goes on with the run
    (returns the events kept meanwhile on this thread, to encode and send now); else its subscription goes."""
    if answer is None:
        return []
    hold = answer._hold
    with _GUARD:
        if _HOLDS.get((answer.run_id, answer.sub.connection_id)) is hold:
            del _HOLDS[(answer.run_id, answer.sub.connection_id)]
    with hold.lock:
        kept, hold.kept = hold.kept, []
        hold.released.set()
    if not follow:
        base.unsubscribe(services, answer.sub)
        return []
    return kept


def held(sub: Subscription, payload: dict[str, Any]) -> bool:
    """For an encoder, first thing: True when this event of the run was kept for the answering turn (emitted on
    the answering thread before its response went out): the encoder sends nothing now. An event from another
    thread waits here (at most `HOLD_S`) until the response is out, then is encoded as usual (False)."""
    with _GUARD:
        hold = _HOLDS.get((sub.run_id, sub.connection_id))
    if hold is None:
        return False
    if hold.owner == threading.get_ident():
        with hold.lock:
            if not hold.released.is_set():
                hold.kept.append(payload)
                return True
        return False
    hold.released.wait(HOLD_S)
    return False


def prompt_of(payload: dict[str, Any]) -> str:
    """The text of a `paused` event: GSV's prompt (its `message`), else its approval's."""
    message = payload.get("message")
    text = text_of(message) if isinstance(message, dict) else ""
    approval = payload.get("approval")
    if not text and isinstance(approval, dict):
        text = str(approval.get("prompt") or "")
    return text


def end_turn(services: Services, sub: Subscription) -> None:
    """A turn ended by its run's pause: nothing more of the run goes to it (a later answer's turn follows it)."""
    sub.scratch["closed"] = True
    base.unsubscribe(services, sub)
