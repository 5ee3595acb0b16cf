"""The scheduler tick: one EventBridge schedule (`rate(1 minute)`) on AWS, every second in `orbital dev`.

Each tick looks at the cron runs under watch (stops task runs past their `timeoutSeconds`, records runs that
vanished), runs the cron jobs that are due (found through the index on next-run time; each claimed with a
conditional write, so overlapping or retried ticks never run a job twice; at most `cron.maxConcurrentRuns` going at
once), and runs the heartbeats that are due (claimed the same way). The first
tick that finds a configured agent without heartbeat state (a new gateway, a new agent) schedules its heartbeats
one interval on. Last, as a backstop, it answers deferred calls left pending well past their timeout
(`deferred.sweep_overdue`: their workflow ended without answering), at most once a minute of the tick's clock
(every tick on AWS; one in sixty locally).
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from orbital.ports.services import Services
from orbital.runtime.services import get_services

log = logging.getLogger("orbital.scheduler")

SWEEP_EVERY_MS = 60_000
_swept: weakref.WeakKeyDictionary[Services, int] = weakref.WeakKeyDictionary()
"""The minute (of the tick's clock) each Services last swept in."""


def _sweep_due(services: Services, now_ms: int) -> bool:
    minute = now_ms // SWEEP_EVERY_MS
    if _swept.get(services) == minute:
        return False
    _swept[services] = minute
    return True


def tick(services: Services, now_ms: int | None = None) -> dict[str, Any]:
    """One pass over everything time-driven; each part is independent (one failing does not stop the others)."""
    # lazy: imported by the first tick, not by the function's import (bench/cold_start.py)
    from orbital.agent import cron_runs, heartbeat_runs
    from orbital.engines import cron, deferred, heartbeat

    now = services.now_ms() if now_ms is None else now_ms
    out: dict[str, Any] = {}
    try:  # first: runs that ended or must end free their job (and a slot of `maxConcurrentRuns`)
        out["cronEnded"] = cron_runs.expire(services, now)
    except Exception:
        log.exception("cron watch pass failed")
    try:
        ran = cron.run(services, mode="due", now_ms=now, execute=cron_runs.executor(services, now))
        out["cron"] = ran["results"]
    except Exception:
        log.exception("cron pass failed")
    try:
        heartbeat.ensure_scheduled(services, now)
        out["heartbeats"] = heartbeat_runs.run_due(services, now)
    except Exception:
        log.exception("heartbeat pass failed")
    try:
        out["callsSwept"] = deferred.sweep_overdue(services, now) if _sweep_due(services, now) else 0
    except Exception:
        log.exception("pending-call sweep failed")
    return out


def handle_tick(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    """The `scheduler_tick` function: an EventBridge scheduled event in, a summary out (for logs)."""
    result = tick(get_services())
    return {
        "cron": len(result.get("cron") or []),
        "cronEnded": result.get("cronEnded", 0),
        "heartbeats": len(result.get("heartbeats") or []),
        "callsSwept": result.get("callsSwept", 0),
    }
