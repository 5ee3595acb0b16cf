"""What happens when a run ends, besides its `final` / `error` event: whoever waits for its reply is answered, and
the families hooked on a run's replies and end are called (`Hooks.on_run_reply`, `Hooks.on_run_ended`, in the
order the registry included them). The agent knows none of them:

* `notify: {callId}` — a `gsv__SessionSend` in another run waits for this run's reply (F14: the reply of this very
  run, not whatever assistant message happens to be newest). The waiting call is settled here with
  `{status: "ok", runId, sessionKey, reply}`, or `{status: "error", …, error}` when the run failed.
* `deliver` — the channel (and peer) the reply goes to: the channels family sends it, `partial` texts too
  (`orbital.channels.delivery`).
* `cron` — a scheduled job waits for the run's real outcome (fix F9): the cron family writes its run record when the
  run ends (`orbital.agent.cron_runs.finished`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orbital.engines import deferred

if TYPE_CHECKING:
    from orbital.ports.services import Services


def deliver(services: Services, session_key: str, run: dict[str, Any], state: str, text: str | None) -> None:
    """A reply text of the run (`partial`, `final` or `error`), to the hooks on a run's replies."""
    for hook in services.hooks.on_run_reply:
        hook(services, session_key, run, state, text)


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
    for hook in services.hooks.on_run_ended:
        hook(services, session_key, run, reply, error)
