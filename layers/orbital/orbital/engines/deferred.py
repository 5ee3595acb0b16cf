"""Deferred calls: a request answered later by a node (tool.invoke, logs.get, node.probe, transfers).

A pending call is one table item (`st` = pending | done; its repository is `orbital.store.calls`). Whoever flips
it from pending to done first answers the caller — the node's result, the node's loss, or the timeout — so a call
is answered exactly once. The wait belongs to Step Functions, but not one execution per call (ADR 0019): a call is
due at the second its timeout ends, rounded up, and one `deferred_call` execution per due second (named after it,
started by the first call due then) waits for that second and answers, as timed out, every call due then that is
still pending:

    request handler: put call → post evt to node → mark the call due at its second (one small item) → make sure
                     that second's execution runs (StartExecution only if this container has not started it yet)
    execution:       waits until its second → the `due` step answers that second's calls still pending
    result handler:  claim (one write, which reads the call back if it refuses) → answer the caller (nothing to
                     stop: the timer of its second finds it done)
    node loss:       claim every call pending on the node → answer 503

The claim is a conditional update, so an answer and the timer cannot both answer a call. A call is answered at
most a second (the rounding) after its timeout, plus the execution's own latency. The family that owns a kind may
react to its timeout or node loss in its own way (`Router.on_call_timeout` / `on_call_node_lost`). Executions of
the earlier definition (one per call, `register` storing a task token on the call) are still ended by whoever
claims their call (`close_execution`).

Calls made by an agent run carry `extra.group`, a wait group (`engines/waitgroup.py`) that the run's own execution
waits on instead: answering such a call (`settle`) stores its outcome on the call and counts it done in the group,
whoever answers — the node, the node's loss, a timeout, a failed launch.
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING, Any

from orbital.engines import waitgroup
from orbital.errors import UnavailableError
from orbital.protocol.frames import error_frame, ok_frame
from orbital.store import http_answers
from orbital.store.calls import DONE as DONE  # the call items' names, as the engine's callers know them
from orbital.store.calls import PENDING as PENDING
from orbital.store.calls import TOMBSTONE_SECONDS as TOMBSTONE_SECONDS
from orbital.store.calls import Lookup as Lookup
from orbital.store.calls import NodeAnswer as NodeAnswer
from orbital.store.calls import PendingCall as PendingCall

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.store.table import Record

log = logging.getLogger("orbital.deferred")

OVERDUE_GRACE_MS = 60_000
"""How long past its timeout a call may stay pending before the scheduler tick answers it itself (`sweep_overdue`):
longer than the deferred_call workflow takes to answer a timeout, retries included (about 15 s)."""
MAX_ARMED_REMEMBERED = 512
"""Seconds whose timer a container remembers having started before it forgets those already past."""

AGENT_TOOL = "agent"
"""Kind of a node tool called by an agent run (answered by `tool.result`)."""
AGENT_LOGS = "agent-logs"
"""Kind of gsv__LogsGet (answered by `logs.result`)."""
AGENT_SESSION = "agent-session"
"""Kind of gsv__SessionSend waiting for the reply of the run it started."""
CLIENT_TOOL = "client-tool"
"""Kind of a tool an agent run calls on the client socket that started it (WindieOS's manifest tools: answered by
that socket's `tool-result`, failed by its loss; `agent.client_tools`)."""
APPROVAL = "approval"
"""Kind of the wait for an answer to a tool approval (`orbital.agent.approvals`): answered by the decision, or timed
out by the run's own wait (its wait group's deadline), never by a node."""
TOOL_CALL_KINDS = frozenset({"tool", "session", AGENT_TOOL})
"""Calls a node answers with `tool.result`: a client's tool.invoke, a session-routed tool.request, an agent run's."""


def create(services: Services, call: PendingCall) -> None:
    """Record a pending call. A call without a node (waiting for another run) is not indexed by node."""
    services.calls.create(call)


def due_second(call: PendingCall, now_s: float | None = None) -> int:
    """The epoch second whose timer answers `call` if it is still pending: its timeout's end rounded up, and never
    a second that has begun already (a timer started now still has that second to wait)."""
    now_s = time.time() if now_s is None else now_s
    return max(math.ceil((call.created_at + call.timeout_ms) / 1000), math.floor(now_s) + 1)


def start_wait(services: Services, call: PendingCall) -> None:
    """Make the call due at its second: mark it in that second's partition, and start that second's execution
    unless this container already did. The execution's name is the second (names must be new for 90 days: seconds
    are); one started by another container answers `ExecutionAlreadyExists`, which is as good."""
    arn = services.settings.deferred_call_arn
    if not arn:
        raise RuntimeError("deferred_call state machine is not configured (ORBITAL_DEFERRED_CALL_ARN)")
    second = due_second(call, services.now_ms() / 1000)  # the gateway's clock, as the call's own `created_at`
    try:
        services.calls.mark_due(second, call)
        _arm_timer(services, arn, second)
    except Exception:
        log.exception("could not start the wait for call %s", call.call_id)
        raise


def _arm_timer(services: Services, arn: str, second: int) -> None:
    armed = services.armed_timers
    if second in armed:
        return
    now = time.time()
    payload = {"due": second, "waitSeconds": max(0, math.ceil(second - now))}
    services.workflows.start(arn, f"due-{second}", payload)  # False: another container armed it already
    if len(armed) >= MAX_ARMED_REMEMBERED:  # only seconds still to come matter
        armed.difference_update([s for s in armed if s <= now])
    armed.add(second)


def answer_due(services: Services, second: int) -> int:
    """The timer of `second`: answer every call due then that is still pending as timed out (`time_out`). Returns
    how many it answered."""
    return sum(1 for call_id in services.calls.pending_due(second) if time_out(services, call_id) is not None)


def require_waits(services: Services) -> None:
    """Refuse a call at once, before anything is sent for it, if this gateway cannot start waits."""
    if not services.settings.deferred_call_arn:
        raise UnavailableError("Calls to nodes are not configured here (ORBITAL_DEFERRED_CALL_ARN is not set)")


def start_wait_after_send(services: Services, call: PendingCall) -> None:
    """Start the wait of a call whose event its node (or channel) already has. If that fails, the call stays
    pending: failing it would drop the answer the node is already working on and invite a retry that runs the tool a
    second time. The answer, the owner's loss, or the scheduler's sweep of overdue calls (`OVERDUE_GRACE_MS` after
    its timeout) ends it instead."""
    try:
        start_wait(services, call)
    except Exception:
        log.warning(
            "call %s (%s) runs without its wait: its answer or its owner's loss ends it, else the sweep of overdue "
            "calls",
            call.call_id,
            call.kind,
        )


def get(services: Services, call_id: str) -> Lookup | None:
    return services.calls.get(call_id)


def claim(
    services: Services, call_id: str, outcome: dict[str, Any] | None = None
) -> tuple[PendingCall, str | None] | None:
    """Flip pending → done, storing `outcome` if given (`CallRepo.claim`). None if the call was already answered or
    never existed."""
    return services.calls.claim(call_id, outcome)


def claim_answer(services: Services, call_id: str, node_id: str, kind: str) -> NodeAnswer:
    """A node's answer to a call whose outcome is only passed on, claimed in one write if it is pending, of that
    kind and on that node; else the call as it stands, for the caller to decide as after `get`
    (`CallRepo.claim_answer`)."""
    return services.calls.claim_answer(call_id, node_id, kind)


def outcome_of(services: Services, rec: Record) -> dict[str, Any]:
    """The stored outcome of an answered call (`{"result": …}` or `{"error": …}`)."""
    return services.calls.outcome_of(rec)


def group_of(call: PendingCall) -> str | None:
    """The wait group a call belongs to (calls made by an agent run), if any."""
    group = call.extra.get("group")
    return group if isinstance(group, str) and group else None


def settle(services: Services, call_id: str, outcome: dict[str, Any]) -> tuple[PendingCall, str | None] | None:
    """Answer a call with `outcome` and count it done in its wait group. None if it was already answered."""
    claimed = claim(services, call_id, outcome)
    if claimed is not None:
        group = group_of(claimed[0])
        if group:
            waitgroup.done_one(services, group)
    return claimed


def _count_done(services: Services, call: PendingCall) -> None:
    group = group_of(call)
    if group:
        waitgroup.done_one(services, group)


def claim_for_timeout(services: Services, call_id: str, default_error: str) -> tuple[PendingCall, str | None] | None:
    """Claim a call whose wait timed out. A call a run waits for gets its timeout outcome in the same write and is
    counted done in its wait group."""
    found = get(services, call_id)
    outcome = None
    if found is not None and group_of(found.call):
        given = found.call.extra.get("onTimeout")
        outcome = given if isinstance(given, dict) else {"error": default_error}
    claimed = claim(services, call_id, outcome)
    if claimed is not None:
        _count_done(services, claimed[0])
    return claimed


def claim_for_failure(services: Services, call_id: str, message: str) -> tuple[PendingCall, str | None] | None:
    """Claim a call whose wait failed (the deferred-call workflow's catch-all), likewise."""
    found = get(services, call_id)
    claimed = claim(services, call_id, {"error": message} if found is not None and group_of(found.call) else None)
    if claimed is not None:
        _count_done(services, claimed[0])
    return claimed


def time_out(services: Services, call_id: str) -> tuple[PendingCall, str | None] | None:
    """Answer a call whose wait is over as timed out: the reaction of the family that owns its kind, else a 504 to
    the caller. None if it was already answered."""
    claimed = claim_for_timeout(services, call_id, "Call timed out")
    if claimed is None:
        return None
    call = claimed[0]
    handler = services.hooks.call_timeout.get(call.kind)
    if handler is not None:
        handler(services, call)
    else:
        answer(services, call, error={"code": 504, "message": f"Call timed out after {call.timeout_ms}ms"})
    return claimed


def sweep_overdue(services: Services, now_ms: int) -> int:
    """The backstop for a wait that ended without answering its call (its workflow failed for good, or never got
    going): every call still pending on a connected node or channel socket `OVERDUE_GRACE_MS` past its timeout is
    answered as timed out, and its execution, if one still waits, is ended. Calls of an agent run are left to the
    run, whose own execution waits for them. Returns how many were answered."""
    owners = [node.node_id for node in services.connections.nodes()]
    owners += [f"channel:{key}" for key in services.connections.channel_sockets()]
    swept = 0
    for owner in owners:
        for call in pending_on_node(services, owner):
            if group_of(call) or call.created_at + call.timeout_ms + OVERDUE_GRACE_MS > now_ms:
                continue
            done = time_out(services, call.call_id)
            if done is None:
                continue
            log.warning(
                "call %s (%s) was still pending past its timeout: answered by the scheduler",
                done[0].call_id,
                done[0].kind,
            )
            close_execution(services, done[1], error="Overdue", cause="answered by the scheduler tick")
            swept += 1
    return swept


def record_answered(services: Services, call_id: str, outcome: dict[str, Any], *, group: str | None = None) -> bool:
    """Record a call that was answered before it could be created (its launch failed), and count it done in
    `group`. False if a record already exists (someone answered it)."""
    if not services.calls.record_answered(call_id, outcome, group=group):
        return False
    if group:
        waitgroup.done_one(services, group)
    return True


def register_token(services: Services, call_id: str, token: str) -> bool:
    """Record the execution's task token while the call is pending. False: the call was already answered."""
    return services.calls.register_token(call_id, token)


def close_execution(services: Services, token: str | None, *, error: str | None = None, cause: str = "") -> None:
    """End the waiting execution (success, or failure with `error`). A closed or expired token is fine."""
    if not token:
        return
    try:
        if error:
            services.workflows.fail(token, error=error, cause=cause[:32000])
        else:
            services.workflows.succeed(token, {})
    except Exception as exc:  # the execution is not reachable: its own timeout ends it
        log.debug("closing execution: %s", type(exc).__name__)


def answer(services: Services, call: PendingCall, *, payload: Any = None, error: dict[str, Any] | None = None) -> bool:
    """Send the deferred `res` to the caller (with the original frame id), or keep it for the HTTP request that waits
    for it. False if the caller's socket is gone."""
    if not call.caller_connection_id:
        return False
    frame = error_frame(call.frame_id, error) if error is not None else ok_frame(call.frame_id, payload)
    try:
        if http_answers.is_waiter(call.caller_connection_id):  # an HTTP request polls for it (ADR 0029)
            max_bytes = services.settings.max_frame_bytes
            return http_answers.deliver(services.table, call.caller_connection_id, frame, max_bytes=max_bytes)
        return services.push(call.caller_connection_id, frame)
    except Exception:
        log.exception("could not answer call %s", call.call_id)
        return False


def pending_on_node(services: Services, node_id: str) -> list[PendingCall]:
    return services.calls.pending_on_node(node_id)


def fail_node_calls(services: Services, node_id: str, reason: str, *, kinds: set[str] | None = None) -> int:
    """Answer every call pending on a node (node lost or replaced). Returns how many were failed."""
    failed = 0
    for call in pending_on_node(services, node_id):
        if kinds is not None and call.kind not in kinds:
            continue
        # a call a run waits for keeps its outcome in the same write as the claim, so the run never sees it done
        # without an answer
        claimed = claim(services, call.call_id, {"error": reason} if group_of(call) else None)
        if claimed is None:
            continue
        call, token = claimed
        handler = services.hooks.call_node_lost.get(call.kind)
        if handler is not None:
            handler(services, call, reason)
        else:
            answer(services, call, error={"code": 503, "message": reason})
        _count_done(services, call)
        close_execution(services, token, error="NodeLost", cause=reason)
        failed += 1
    return failed
