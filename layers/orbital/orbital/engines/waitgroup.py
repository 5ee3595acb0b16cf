"""Wait groups: a Step Functions task that waits until N deferred calls have all been answered.

A group is one item holding a count of calls still outstanding (`n`), the waiting execution's task token (`tok`)
once it has registered, and any data its owner keeps there. Each answered call decrements the count exactly once
(its answer was claimed first, see `engines/deferred.py`); whoever sees the count reach zero with a token recorded
releases the execution. The token is recorded only while calls are outstanding, so the two races end the same way:

    last answer before the token:  register's conditional write fails → the execution releases itself at once
    last answer after the token:   the decrement returns the token → the answerer releases the execution

No Lambda waits, and no call is left unanswered: the group's own timeout (the task's `TimeoutSecondsPath`) settles
whatever is still outstanding.

A group may wait more than once for the same model reply (a run paused for a tool approval waits for the decision,
then for the approved call): each wait is a **round** (`r`), and the next round replaces the group's calls and count
in one write that only the first attempt of that step wins (`reopen`).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from orbital.errors import ConflictError
from orbital.store import conditions as cond
from orbital.store import keys

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.store.table import Record

log = logging.getLogger("orbital.waitgroup")

TTL_SECONDS = 3 * 86400


def _ttl(data: dict[str, Any]) -> int:
    """Kept three days, or a day past its deadline when that is later (an approval may wait a week)."""
    deadline = data.get("deadlineMs")
    later = int(deadline) // 1000 + 86400 if isinstance(deadline, int | float) else 0
    return max(int(time.time()) + TTL_SECONDS, later)


def open_group(services: Services, group_id: str, data: dict[str, Any], count: int) -> bool:
    """Create a group with `count` calls outstanding. False if it exists already (a retried step): a group is
    never overwritten, since answers may already have counted down the existing one."""
    try:
        services.table.put(
            keys.wait_group(group_id),
            data,
            attrs={"n": count, "r": 0},
            ttl=_ttl(data),
            condition=cond.not_exists("PK"),
        )
    except ConflictError:
        return False
    return True


def reopen(services: Services, group_id: str, data: dict[str, Any], count: int, round_: int) -> bool:
    """Start round `round_` of a group whose previous round is over (every call answered or timed out): its calls
    and count are replaced and the previous round's token dropped, in one conditional write. False if that round
    was started already (a retried step) or the group is gone (its run ended)."""
    try:
        services.table.put(
            keys.wait_group(group_id),
            data,
            attrs={"n": count, "r": round_},
            ttl=_ttl(data),
            condition=cond.exists("PK") & cond.eq("r", round_ - 1),
        )
    except ConflictError:
        return False
    return True


def round_of(rec: Record) -> int:
    value = rec.attrs.get("r")
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def load(services: Services, group_id: str) -> Record | None:
    return services.table.get(keys.wait_group(group_id))


def register(services: Services, group_id: str, token: str) -> bool:
    """Record the waiting execution's token. False when nothing is outstanding (any more): the caller must release
    its own execution."""
    try:
        services.table.update(
            keys.wait_group(group_id),
            set_attrs={"tok": token},
            condition=cond.exists("PK") & cond.gt("n", 0),
            return_values="NONE",
        )
    except ConflictError:
        return False
    return True


def release(services: Services, token: str | None, output: dict[str, Any] | None = None) -> None:
    """Let a waiting execution go on. A token that already ended (timeout, stop) is fine."""
    if not token:
        return
    try:
        services.workflows.succeed(token, output or {})
    except Exception as exc:  # the execution is not reachable: its own timeout ends it
        log.debug("releasing a wait group: %s", type(exc).__name__)


def done_one(services: Services, group_id: str) -> None:
    """One call of the group was answered (call this exactly once per call, after claiming its answer)."""
    try:
        rec = services.table.update(keys.wait_group(group_id), add={"n": -1}, condition=cond.exists("PK"))
    except ConflictError:
        return  # the group is gone (its run ended)
    if rec is None:
        return
    if int(rec.attrs.get("n") or 0) <= 0:
        release(services, rec.attrs.get("tok"))


def close(services: Services, group_id: str) -> None:
    try:
        services.table.delete(keys.wait_group(group_id))
    except Exception:
        log.debug("could not delete wait group %s", group_id)
