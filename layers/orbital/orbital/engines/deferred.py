"""Deferred calls: a request answered later by a node (tool.invoke, logs.get, node.probe, transfers).

A pending call is one DynamoDB item (`st` = pending | done). Whoever flips it from pending to done first answers
the caller — the node's result, the node's loss, or the timeout — so a call is answered exactly once. The wait
belongs to Step Functions, but not one execution per call (ADR 0019): a call is due at the second its timeout ends,
rounded up, and one `deferred_call` execution per due second (named after it, started by the first call due then)
waits for that second and answers, as timed out, every call due then that is still pending:

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

import json
import logging
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orbital.engines import waitgroup
from orbital.errors import ConflictError, UnavailableError
from orbital.protocol.frames import error_frame, ok_frame
from orbital.store import conditions as cond
from orbital.store import http_answers, keys
from orbital.store.table import ConditionFailedError

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.store.table import Record

log = logging.getLogger("orbital.deferred")

PENDING = "pending"
DONE = "done"
TOMBSTONE_SECONDS = 3600
INLINE_OUTCOME_BYTES = 256 * 1024
"""An outcome larger than this (JSON) is kept in S3 and referenced from the call (DynamoDB items cap at 400 KB)."""
OUTCOME_REF = "$outcome"
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
"""How long an answered call is remembered, so a late result is reported as dropped rather than unknown."""


@dataclass
class PendingCall:
    call_id: str
    kind: str
    node_id: str
    node_connection_id: str
    timeout_ms: int
    created_at: int
    caller_connection_id: str | None = None
    frame_id: Any = None
    tool: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_data(self) -> dict[str, Any]:
        return {
            "callId": self.call_id,
            "kind": self.kind,
            "nodeId": self.node_id,
            "nodeConnectionId": self.node_connection_id,
            "timeoutMs": self.timeout_ms,
            "createdAt": self.created_at,
            "callerConnectionId": self.caller_connection_id,
            "frameId": self.frame_id,
            "tool": self.tool,
            "extra": self.extra,
        }

    @classmethod
    def from_data(cls, d: dict[str, Any]) -> PendingCall:
        return cls(
            call_id=d["callId"],
            kind=d["kind"],
            node_id=d["nodeId"],
            node_connection_id=d.get("nodeConnectionId") or "",
            timeout_ms=int(d.get("timeoutMs") or 0),
            created_at=int(d.get("createdAt") or 0),
            caller_connection_id=d.get("callerConnectionId"),
            frame_id=d.get("frameId"),
            tool=d.get("tool"),
            extra=d.get("extra") or {},
        )

    @property
    def timeout_seconds(self) -> int:
        return max(1, math.ceil(self.timeout_ms / 1000))


@dataclass
class Lookup:
    call: PendingCall
    state: str


def create(services: Services, call: PendingCall) -> None:
    """Record a pending call. A call without a node (waiting for another run) is not indexed by node."""
    ttl = int(time.time()) + call.timeout_seconds + TOMBSTONE_SECONDS
    services.table.put(
        keys.pending_call(call.call_id),
        call.to_data(),
        attrs={"st": PENDING, "ck": call.kind},
        gsi=keys.node_calls_index(call.node_id, call.call_id) if call.node_id else None,
        ttl=ttl,
        condition=cond.not_exists("PK"),
    )


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
    second = due_second(call)
    try:
        services.table.put(keys.call_due(second, call.call_id), {"kind": call.kind}, ttl=second + TOMBSTONE_SECONDS)
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
    call_ids = [rec.sk for rec in services.table.query(keys.call_due_pk(second))]
    calls = services.table.get_many(keys.pending_call(call_id) for call_id in call_ids)
    answered = 0
    for call_id in call_ids:
        rec = calls.get(keys.pending_call(call_id))
        if rec is None or rec.attrs.get("st", PENDING) != PENDING:
            continue
        if time_out(services, call_id) is not None:
            answered += 1
    return answered


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
    rec = services.table.get(keys.pending_call(call_id))
    if rec is None:
        return None
    return Lookup(PendingCall.from_data(rec.data), str(rec.attrs.get("st", PENDING)))


def claim(
    services: Services, call_id: str, outcome: dict[str, Any] | None = None
) -> tuple[PendingCall, str | None] | None:
    """Flip pending → done (storing `outcome`, if given, for whoever consumes it later). Returns the call and the
    task token if one was recorded; None if the call was already answered or never existed. The answered call
    leaves its node's index, so that index holds only what is pending (node loss and the sweep read it)."""
    done: dict[str, Any] = {"st": DONE}
    if outcome is not None:
        done["out"] = _stored_outcome(services, call_id, outcome)
    try:
        old = services.table.update(
            keys.pending_call(call_id),
            set_attrs=done,
            condition=cond.eq("st", PENDING),
            return_values="ALL_OLD",
            unindex=True,
        )
    except ConflictError:
        return None
    if old is None:
        return None
    return PendingCall.from_data(old.data), old.attrs.get("tok")


@dataclass
class NodeAnswer:
    """What `claim_answer` did: the call it claimed (and the task token of an execution of the earlier definition,
    if one was recorded), or else the call as it stood (None: there is none, or it has expired)."""

    claimed: tuple[PendingCall, str | None] | None = None
    found: Lookup | None = None


def claim_answer(services: Services, call_id: str, node_id: str, kind: str) -> NodeAnswer:
    """A node's answer to a call whose outcome is only passed on (`kind`, no outcome stored), in one write: the call
    is claimed if it is pending, of that kind and pending on that node. Otherwise the same request reads the call as
    it stands, for the caller to decide as after `get` (another kind, another node, answered already); when none
    comes back (no such call), it is read to make sure. A call recorded without its kind (`ck`, by an earlier
    version) is refused too, and found."""
    try:
        old = services.table.update(
            keys.pending_call(call_id),
            set_attrs={"st": DONE},
            condition=cond.eq("st", PENDING) & cond.eq("ck", kind) & cond.eq("GSI1PK", keys.node_calls_pk(node_id)),
            return_values="ALL_OLD",
            unindex=True,
            current_on_conflict=True,
        )
    except ConditionFailedError as refused:
        rec = refused.current
        if rec is None:  # no call, or a store that did not send the item back: a read tells which
            return NodeAnswer(found=get(services, call_id))
        return NodeAnswer(found=Lookup(PendingCall.from_data(rec.data), str(rec.attrs.get("st", PENDING))))
    if old is None:
        return NodeAnswer()
    return NodeAnswer(claimed=(PendingCall.from_data(old.data), old.attrs.get("tok")))


def _stored_outcome(services: Services, call_id: str, outcome: dict[str, Any]) -> str:
    """The `out` attribute for an outcome: its JSON, or (too large for an item) a reference to it in S3."""
    text = json.dumps(outcome, separators=(",", ":"), ensure_ascii=False)
    if len(text.encode("utf-8")) <= INLINE_OUTCOME_BYTES:
        return text
    ref = keys.call_outcome_blob(call_id)
    services.workspace.put(ref, text.encode("utf-8"), content_type="application/json")
    return json.dumps({OUTCOME_REF: ref})


def outcome_of(services: Services, rec: Record) -> dict[str, Any]:
    """The stored outcome of an answered call (`{"result": …}` or `{"error": …}`)."""
    raw = rec.attrs.get("out")
    if not isinstance(raw, str) or not raw:
        return {"error": "No answer was recorded"}
    value = json.loads(raw)
    if isinstance(value, dict) and isinstance(value.get(OUTCOME_REF), str):
        found = services.workspace.get(value[OUTCOME_REF])
        value = json.loads(found[0]) if found is not None else {"error": "The answer is no longer available"}
    return value if isinstance(value, dict) else {"result": value}


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
    try:
        services.table.put(
            keys.pending_call(call_id),
            {"callId": call_id, "kind": "failed", "nodeId": "", "extra": {"group": group} if group else {}},
            attrs={"st": DONE, "out": _stored_outcome(services, call_id, outcome)},
            ttl=int(time.time()) + TOMBSTONE_SECONDS,
            condition=cond.not_exists("PK"),
        )
    except ConflictError:
        return False
    if group:
        waitgroup.done_one(services, group)
    return True


def register_token(services: Services, call_id: str, token: str) -> bool:
    """Record the execution's task token while the call is pending. False: the call was already answered."""
    try:
        services.table.update(
            keys.pending_call(call_id),
            set_attrs={"tok": token},
            condition=cond.eq("st", PENDING),
            return_values="NONE",
        )
    except ConflictError:
        return False
    return True


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
    recs = services.table.query_index(keys.node_calls_pk(node_id))
    return [PendingCall.from_data(r.data) for r in recs if r.attrs.get("st") == PENDING]


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
