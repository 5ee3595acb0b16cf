"""What happens when a run ends, besides its `final` / `error` event: whoever waits for its reply is answered, and
its reply is delivered where it has to go.

* `notify: {callId}` — a `gsv__SessionSend` in another run waits for this run's reply (F14: the reply of this very
  run, not whatever assistant message happens to be newest). The waiting call is settled with
  `{status: "ok", runId, sessionKey, reply}`, or `{status: "error", …, error}` when the run failed.
* `deliver` — the channel (and peer) the reply goes to (`orbital.channels.delivery`).
* `cron` — a scheduled job waits for the run's real outcome (fix F9): its run record is written when the run ends.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from orbital.engines import deferred

if TYPE_CHECKING:
    from orbital.runtime.services import Services

log = logging.getLogger("orbital.agent.notify")


def deliver(services: Services, session_key: str, run: dict[str, Any], state: str, text: str | None) -> None:
    if not run.get("deliver"):
        return
    from orbital.channels import delivery

    try:
        delivery.deliver(services, session_key, run, state, text)
    except Exception:
        log.exception("channel delivery of run %s failed", run.get("runId"))


def run_ended(
    services: Services,
    session_key: str,
    run: dict[str, Any],
    *,
    reply: str | None = None,
    error: str | None = None,
) -> None:
    notify = run.get("notify")
    call_id = notify.get("callId") if isinstance(notify, dict) else None
    if call_id:
        result: dict[str, Any] = {"runId": run.get("runId"), "sessionKey": session_key}
        if error is None:
            result.update(status="ok", reply=reply or "")
        else:
            result.update(status="error", error=error)
        deferred.settle(services, str(call_id), {"result": result})
    deliver(services, session_key, run, "error" if error is not None else "final", error or reply)
    job = notify.get("cron") if isinstance(notify, dict) else None
    if isinstance(job, dict) and job.get("jobId"):
        from orbital.agent import cron_runs

        cron_runs.finished(services, job, reply=reply, error=error)
