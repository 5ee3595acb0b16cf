"""Steps of the state machines, run by the `workflow_steps` function (`{"step": name, ...}` in, JSON out).

The deferred-call steps are the runtime's own (`STEPS`); a family adds the steps of its own state machine with
`Router.workflow_step`, and they are found through `Services.hooks`.
"""

from __future__ import annotations

import logging
from typing import Any

from orbital.engines import deferred
from orbital.ports.services import Services
from orbital.runtime.services import get_services

log = logging.getLogger("orbital.workflows")


def _due(services: Services, event: dict[str, Any]) -> dict[str, Any]:
    return {"timedOut": deferred.answer_due(services, int(event["due"]))}


def _register(services: Services, event: dict[str, Any]) -> dict[str, Any]:
    """An execution of the earlier per-call definition stores its task token on the call (ADR 0019)."""
    call_id, token = event["callId"], event["taskToken"]
    if not deferred.register_token(services, call_id, token):
        # answered before the execution got here: end the wait now
        deferred.close_execution(services, token)
        return {"registered": False}
    return {"registered": True}


def _timeout(services: Services, event: dict[str, Any]) -> dict[str, Any]:
    claimed = deferred.time_out(services, event["callId"])
    if claimed is None:
        return {"timedOut": False}
    return {"timedOut": True, "kind": claimed[0].kind}


def _fail(services: Services, event: dict[str, Any]) -> dict[str, Any]:
    err = event.get("error") or {}
    message = f"Call failed: {err.get('Error') or 'error'}"
    claimed = deferred.claim_for_failure(services, event["callId"], message)
    if claimed is None:
        return {"failed": False}
    call, _ = claimed
    log.warning("deferred call %s failed in its workflow: %s", call.call_id, err.get("Error"))
    deferred.answer(services, call, error={"code": 500, "message": message})
    return {"failed": True}


STEPS = {"due": _due, "register": _register, "timeout": _timeout, "fail": _fail}
"""`due` is the timer of a second (statemachines/deferred_call.asl.json); `register`, `timeout` and `fail` serve
executions started by the earlier definition, one per call, still running when this one was deployed."""


def handle_step(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    services = get_services()
    step = event.get("step")
    func = (STEPS.get(step) or services.hooks.workflow_steps.get(step)) if isinstance(step, str) else None
    if func is None:
        raise ValueError(f"unknown workflow step: {step!r}")
    return func(services, event)
