"""What a run waits for: the wait group of one model reply's tool calls (`engines/waitgroup.py`), whose plan lists the
calls in the model's order (on the group, or in S3 when large: `orbital.agent.tools`), and cancelling the calls
still pending when the run is stopped or fails."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from orbital.engines import deferred, waitgroup

if TYPE_CHECKING:
    from orbital.ports.services import Services

CANCELLED = "Run cancelled by user"


def group_id(execution: str, iteration: int) -> str:
    return f"{execution}:{iteration}"


def load_plan(services: Services, data: dict[str, Any]) -> list[dict[str, Any]]:
    if isinstance(data.get("calls"), list):
        return list(data["calls"])
    ref = data.get("callsRef")
    if isinstance(ref, str):
        found = services.workspace.get(ref)
        if found is not None:
            return list(json.loads(found[0]))
    return []


def cancel_pending(services: Services, execution: str, iteration: int) -> int:
    """Settle every unanswered call of a run's current wait group as cancelled. Returns how many there were."""
    gid = group_id(execution, iteration)
    rec = waitgroup.load(services, gid)
    if rec is None:
        return 0
    cancelled = 0
    for entry in load_plan(services, rec.data):
        call_id = entry.get("callId")
        if call_id and deferred.claim(services, str(call_id), {"error": CANCELLED}) is not None:
            cancelled += 1
    waitgroup.close(services, gid)
    return cancelled
