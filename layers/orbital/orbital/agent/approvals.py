"""Asking before a tool runs (ADR 0040): the gate every tool call of a run goes through, the pending approvals of
paused runs, and their answers from wherever the user is.

The gate (`decide`) applies the policy in config `toolApproval` (`orbital.domain.approval_policy`). A call it asks
about becomes an **approval**: one item (`keys.approval`) holding what clients are shown (the arguments masked and
cut), and one deferred call of kind `approval` in the run's wait group (`orbital.agent.tools`), whose timeout is the
approval's. The run's execution waits on that group as it waits for a node (AwaitTools, `.waitForTaskToken`): no
Lambda runs while it waits. The session's current run points at its approval (`currentRun.approval`), so a message
into the session finds it in the meta it reads anyway, and the pause ends with the run (`/stop`, a reset).

A decision is one conditional write on the approval item (`st`: pending → approve | deny | timeout | cancel): the
first answer wins, from any client or chat, and a later one is told who decided and when. The winner records it in
the session's approval history, clears the pointer, tells clients (`approval.resolved`, the hooks) and only then
settles the deferred call, which lets the execution go on; the next turn step reads the decision from the item and
dispatches an approved call then, once (its wait group is reopened by one conditional write: `tools.resume`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from orbital.agent import events, notify
from orbital.agent import taint as run_taint
from orbital.domain import approval_policy as policy
from orbital.domain import taint as taint_rules
from orbital.domain.approval_policy import DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS, MIN_TIMEOUT_MS, Verdict
from orbital.domain.config import masked_at
from orbital.engines import deferred
from orbital.errors import BadRequestError, ConflictError, ForbiddenError, NotFoundError
from orbital.protocol.frames import event_frame
from orbital.store import conditions as cond
from orbital.store import keys

if TYPE_CHECKING:
    from orbital.ports.services import Services

log = logging.getLogger("orbital.agent.approvals")

KIND = deferred.APPROVAL
PENDING = "pending"
DECISIONS = ("approve", "deny", "timeout", "cancel")
VIAS = frozenset({"console", "cli", "chat", "telegram", "xeno", "exoclaw", "windie", "rpc", "timeout", "stop"})
SHOWN_STRING_CHARS = 400
HISTORY_DEFAULT_LIMIT = 50
HISTORY_MAX_LIMIT = 500
KEEP_SECONDS = 30 * 86400
"""How long a decided approval item stays (its history entry stays with the session)."""
SYSTEM = {"kind": "system", "id": "gateway", "label": "gateway"}
NOT_AN_OWNER = "Only an owner can approve or deny this tool call."


# --- the gate ----------------------------------------------------------------------------------------------------


TAINT_RULE = taint_rules.TAINT_RULE


def decide(config: dict[str, Any], tool: str, args: dict[str, Any], run: dict[str, Any] | None) -> Verdict:
    """The verdict for one tool call of `run` (the session's `currentRun`): `toolApproval` as GSV reads it, then the
    taint rule (ADR 0041): while the run is tainted, a risky call gets `toolApproval.whenTainted` ("ask" unless set
    to "deny") whatever the rules say; a rule's `deny` stays (it is stricter). The taint verdict's rule is
    `TAINT_RULE`, which `remembered` never lets pass: an earlier "approve for this session" does not skip it."""
    value = config.get("toolApproval") if isinstance(config, dict) else None
    verdict = policy.evaluate(value, tool, args)
    if verdict.decision == "deny" or not isinstance(run, dict) or not run_taint.is_tainted(run.get("taint")):
        return verdict
    safe = taint_rules.safe_tools(config) if isinstance(config, dict) else []
    if not taint_rules.is_risky(tool, args, own_target=_own_target(run), safe=safe):
        return verdict
    when = value.get("whenTainted") if isinstance(value, dict) else None
    senders = sorted(taint_rules.source_senders(run.get("taint")))
    by = f" ({', '.join(senders)})" if senders else ""
    reason = f"this run read content that did not come from an owner{by}, and {tool} is risky"
    return Verdict("deny" if when == "deny" else "ask", TAINT_RULE, reason)


def _own_target(run: dict[str, Any]) -> dict[str, Any] | None:
    """The conversation a run answers in (`{channel, accountId, peer}`): a channel run's delivery target."""
    target = run.get("deliver")
    if isinstance(target, dict) and target.get("channel") and isinstance(target.get("peer"), dict):
        return {"channel": target["channel"], "accountId": target.get("accountId"), "peer": target["peer"]}
    return None


def timeout_ms(config: dict[str, Any]) -> int:
    """`toolApproval.timeoutMs` (default ten minutes), kept between a second and a week."""
    value = config.get("toolApproval") if isinstance(config, dict) else None
    raw = value.get("timeoutMs") if isinstance(value, dict) else None
    if isinstance(raw, bool) or not isinstance(raw, int | float) or raw != raw:
        return DEFAULT_TIMEOUT_MS
    return int(max(MIN_TIMEOUT_MS, min(MAX_TIMEOUT_MS, raw)))


def args_hash(tool: str, args: Any) -> str:
    text = json.dumps([tool, args], sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def grant_of(approval: dict[str, Any]) -> dict[str, Any]:
    """What `remember: "session"` allows: every call the same rule asks about, or (no rule) the same call."""
    rule_id = approval.get("ruleId")
    if isinstance(rule_id, str) and rule_id:
        return {"ruleId": rule_id}
    return {"tool": approval.get("tool"), "argsHash": approval.get("argsHash")}


def remembered(meta: dict[str, Any] | None, verdict: Verdict, tool: str, args: Any) -> bool:
    """Whether an owner allowed calls like this one for the rest of the session (`remember: "session"`)."""
    if verdict.rule_id == TAINT_RULE:  # a tainted run asks each time
        return False
    grants = (meta or {}).get("approvalGrants")
    if not isinstance(grants, list) or not grants:
        return False
    session_id = (meta or {}).get("sessionId")
    digest = None
    for grant in grants:
        if not isinstance(grant, dict) or grant.get("sessionId") != session_id:
            continue
        if verdict.rule_id and grant.get("ruleId") == verdict.rule_id:
            return True
        if grant.get("tool") == tool and not grant.get("ruleId"):
            digest = digest or args_hash(tool, args)
            if grant.get("argsHash") == digest:
                return True
    return False


# --- what clients are shown -----------------------------------------------------------------------------------


def _cut(value: Any) -> Any:
    if isinstance(value, str):
        return value if len(value) <= SHOWN_STRING_CHARS else value[: SHOWN_STRING_CHARS - 3] + "..."
    if isinstance(value, dict):
        return {str(k): _cut(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v) for v in value]
    return value


def shown_args(args: Any) -> Any:
    """A call's arguments as users see them: secrets masked (the configuration's rule: `apiKey`, `password`,
    `Authorization`, …), every string cut to 400 characters."""
    return _cut(masked_at(args, []))


def new_id() -> str:
    return os.urandom(4).hex()


def public(approval: dict[str, Any]) -> dict[str, Any]:
    """The approval as clients get it (the contract's shape), without the fields the gateway keeps for itself."""
    return {k: v for k, v in approval.items() if k not in _INTERNAL}


_INTERNAL = frozenset({"execution", "iteration", "waitCallId", "argsHash", "group"})


def build(
    *,
    approval_id: str,
    session_key: str,
    run: dict[str, Any],
    tool_call_id: str,
    tool: str,
    args: dict[str, Any],
    verdict: Verdict,
    wait_call_id: str,
    group: str,
    iteration: int,
    now_ms: int,
    timeout: int,
) -> dict[str, Any]:
    """A new approval (not stored yet)."""
    shown = shown_args(args)
    taint = run.get("taint")
    sources = taint.get("sources") if isinstance(taint, dict) else None
    sources = sources if isinstance(sources, list) else []
    return {
        "approvalId": approval_id,
        "sessionKey": session_key,
        "runId": run.get("runId"),
        "callId": tool_call_id,
        "tool": tool,
        "args": shown,
        "ruleId": verdict.rule_id,
        "reason": verdict.reason,
        "taint": {"tainted": bool(sources), "sources": sources},
        "requestedAt": now_ms,
        "expiresAt": now_ms + timeout,
        "prompt": policy.prompt_text(tool, masked_at(args, []), verdict.rule_id, verdict.reason),
        "state": PENDING,
        "execution": run.get("execution"),
        "iteration": iteration,
        "waitCallId": wait_call_id,
        "group": group,
        "argsHash": args_hash(tool, args),
    }


def wait_call(approval: dict[str, Any]) -> deferred.PendingCall:
    """The deferred call the run's wait group counts for this approval (answered by the decision)."""
    return deferred.PendingCall(
        call_id=str(approval["waitCallId"]),
        kind=KIND,
        node_id="",
        node_connection_id="",
        timeout_ms=int(approval["expiresAt"]) - int(approval["requestedAt"]),
        created_at=int(approval["requestedAt"]),
        tool=str(approval["tool"]),
        extra={
            "sessionKey": approval["sessionKey"],
            "runId": approval["runId"],
            "group": approval["group"],
            "approvalId": approval["approvalId"],
            "onTimeout": {"approval": "timeout"},
        },
    )


# --- asking ------------------------------------------------------------------------------------------------------


def open_request(services: Services, approval: dict[str, Any], run: dict[str, Any]) -> bool:
    """Store a new approval and pause the run on it: the item, the deferred call its wait group counts, the
    session's pointer (only while the run owns the session), then the `paused` event, `approval.requested` and the
    hooks. False (the approval is settled as cancelled) when the run no longer owns the session."""
    key = str(approval["sessionKey"])
    ttl = int(approval["expiresAt"]) // 1000 + KEEP_SECONDS
    services.table.put(
        keys.approval(str(approval["approvalId"])),
        approval,
        attrs={"st": PENDING},
        gsi=keys.approvals_index(int(approval["requestedAt"]), str(approval["approvalId"])),
        ttl=ttl,
        condition=cond.not_exists("PK"),
    )
    deferred.create(services, wait_call(approval))
    pointer = {
        "approvalId": approval["approvalId"],
        "tool": approval["tool"],
        "iteration": approval["iteration"],
        "expiresAt": approval["expiresAt"],
    }
    owned: list[bool] = []

    def point(meta: dict[str, Any]) -> bool:
        owned.clear()
        current = meta.get("currentRun")
        if not isinstance(current, dict) or current.get("runId") != approval["runId"]:
            return False
        if current.get("execution") != approval["execution"]:
            return False
        current["approval"] = pointer
        owned.append(True)
        return True

    services.sessions.update_meta(key, point)
    if not owned:
        _decide(services, approval, "cancel", by=SYSTEM, via="stop")
        return False
    shown = public(approval)
    message = {"role": "assistant", "content": [{"type": "text", "text": approval["prompt"]}], "timestamp": _now()}
    events.Audience(services, key).send(
        events.chat_payload(str(approval["runId"]), "paused", message=message, approval=shown)
    )
    _broadcast(services, "approval.requested", shown)
    for hook in services.hooks.on_approval_requested:
        try:
            hook(services, shown, run)
        except Exception:
            log.exception("an approval-requested hook failed")
    try:  # a channel-originated run: the peer is sent the prompt
        notify.deliver(services, key, run, "paused", str(approval["prompt"]))
    except Exception:
        log.exception("delivering the approval prompt failed")
    return True


def _broadcast(services: Services, event: str, payload: dict[str, Any]) -> None:
    """An approval event to every client-mode socket (as `chat` events go: GSV has no subscriptions)."""
    for connection_id, _key in events.Audience(services, str(payload.get("sessionKey") or "")).targets():
        try:
            services.push(connection_id, event_frame(event, payload))
        except Exception as exc:
            log.warning("%s to %s failed: %s", event, connection_id, type(exc).__name__)


# --- reading -----------------------------------------------------------------------------------------------------


def load(services: Services, approval_id: str) -> tuple[dict[str, Any], str] | None:
    """An approval and its state (`pending` or the decision), or None."""
    if not isinstance(approval_id, str) or not approval_id:
        return None
    rec = services.table.get(keys.approval(approval_id))
    if rec is None:
        return None
    return dict(rec.data), str(rec.attrs.get("st") or PENDING)


def load_resolution(services: Services, approval_id: str) -> dict[str, Any] | None:
    """How an approval was decided (`approvalId`, `decision`, `by`, `via`, `decidedAt`), or None while it is
    pending (or unknown)."""
    rec = services.table.get(keys.approval(approval_id))
    if rec is None or str(rec.attrs.get("st") or PENDING) == PENDING:
        return None
    try:
        by = json.loads(str(rec.attrs.get("by") or "{}"))
    except ValueError:
        by = {}
    return {
        "approvalId": approval_id,
        "decision": rec.attrs.get("st"),
        "by": by if isinstance(by, dict) else {},
        "via": rec.attrs.get("via"),
        "decidedAt": rec.attrs.get("decidedAt"),
    }


def _with_state(rec: Any) -> dict[str, Any]:
    return {**rec.data, "state": str(rec.attrs.get("st") or PENDING)}


def pending(services: Services, session_key: str | None = None) -> list[dict[str, Any]]:
    """The approvals waiting for an answer (of one session, or all), oldest first, as clients see them."""
    found = []
    now = _now()
    for rec in services.table.query_index(keys.APPROVALS_GSI_PK):
        if rec.attrs.get("st", PENDING) != PENDING:
            continue
        if session_key is not None and rec.data.get("sessionKey") != session_key:
            continue
        if int(rec.data.get("expiresAt") or 0) + 3_600_000 < now:
            continue  # its run ended without settling it (a crash): no longer answerable in practice
        found.append(public(_with_state(rec)))
    return found


def history(services: Services, session_key: str, limit: int | None = None) -> list[dict[str, Any]]:
    """Who decided what, when and from where, in one session: newest first."""
    count = HISTORY_DEFAULT_LIMIT if limit is None else max(1, min(HISTORY_MAX_LIMIT, int(limit)))
    recs = services.table.query(
        keys.session_pk(session_key), sk_prefix=keys.APPROVAL_HISTORY_PREFIX, forward=False, limit=count
    )
    return [dict(rec.data) for rec in recs]


def waits_for_answer(meta: dict[str, Any] | None) -> bool:
    """Whether a session's meta (as just read) shows its run paused for an approval: the cheap check a message's
    path makes before `answer_from_message` reads anything."""
    run = (meta or {}).get("currentRun")
    return isinstance(run, dict) and isinstance(run.get("approval"), dict)


def paused(services: Services, run: dict[str, Any] | None) -> bool:
    """Whether `run` (a session's current run) waits for an answer to a tool approval."""
    pointer = run.get("approval") if isinstance(run, dict) else None
    if not isinstance(pointer, dict):
        return False
    found = load(services, str(pointer.get("approvalId") or ""))
    return found is not None and found[1] == PENDING


def pending_of_session(services: Services, session_key: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The session's current run and its pending approval (the item), if it is paused."""
    meta = services.sessions.load_meta(session_key) or {}
    run = meta.get("currentRun")
    pointer = run.get("approval") if isinstance(run, dict) else None
    if not isinstance(pointer, dict):
        return None
    assert isinstance(run, dict)
    found = load(services, str(pointer.get("approvalId") or ""))
    if found is None:
        return run, {"approvalId": pointer.get("approvalId"), "tool": pointer.get("tool"), "state": "gone"}
    approval, state = found
    return run, {**approval, "state": state}


# --- deciding ----------------------------------------------------------------------------------------------------


def _now() -> int:
    return int(time.time() * 1000)


def _decide(services: Services, approval: dict[str, Any], decision: str, *, by: dict[str, Any], via: str) -> bool:
    """The one conditional write: pending → `decision`. True for the winner, who then records it and wakes the run."""
    approval_id = str(approval["approvalId"])
    now = _now()
    try:
        services.table.update(
            keys.approval(approval_id),
            set_attrs={"st": decision, "by": json.dumps(by), "via": via, "decidedAt": now},
            condition=cond.eq("st", PENDING),
            return_values="NONE",
            unindex=True,
        )
    except ConflictError:
        return False
    entry = {
        "approvalId": approval_id,
        "runId": approval.get("runId"),
        "tool": approval.get("tool"),
        "args": approval.get("args"),
        "ruleId": approval.get("ruleId"),
        "reason": approval.get("reason"),
        "taint": approval.get("taint"),
        "decision": decision,
        "by": by,
        "via": via,
        "requestedAt": approval.get("requestedAt"),
        "decidedAt": now,
    }
    key = str(approval["sessionKey"])
    try:
        services.table.put(keys.approval_history(key, now, approval_id), entry)
    except Exception:
        log.exception("could not record the decision on approval %s", approval_id)
    resolution = {
        "approvalId": approval_id,
        "sessionKey": key,
        "runId": approval.get("runId"),
        "tool": approval.get("tool"),
        "decision": decision,
        "by": by,
        "via": via,
        "decidedAt": now,
    }
    _broadcast(services, "approval.resolved", resolution)
    for hook in services.hooks.on_approval_resolved:
        try:
            hook(services, public({**approval, "state": decision}), resolution)
        except Exception:
            log.exception("an approval-resolved hook failed")
    return True


def _unpoint(services: Services, session_key: str, approval_id: str, grant: dict[str, Any] | None) -> None:
    def apply(meta: dict[str, Any]) -> bool:
        changed = False
        run = meta.get("currentRun")
        pointer = run.get("approval") if isinstance(run, dict) else None
        if isinstance(pointer, dict) and pointer.get("approvalId") == approval_id:
            assert isinstance(run, dict)
            run.pop("approval", None)
            changed = True
        if grant is not None:
            grants = [g for g in meta.get("approvalGrants") or [] if isinstance(g, dict)]
            grants = [g for g in grants if g.get("sessionId") == meta.get("sessionId")]  # older sessions' go
            entry = {**grant, "sessionId": meta.get("sessionId")}
            if entry not in grants:
                grants.append(entry)
            meta["approvalGrants"] = grants[-100:]
            changed = True
        return changed

    services.sessions.update_meta(session_key, apply)


def _earlier(approval_id: str, state: str, data: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    """The answer to a decision that came too late."""
    by = attrs.get("by")
    try:
        who = json.loads(by) if isinstance(by, str) else {}
    except ValueError:
        who = {}
    label = (who.get("label") or who.get("id") or "someone") if isinstance(who, dict) else "someone"
    at = attrs.get("decidedAt")
    when = (
        datetime.fromtimestamp(int(at) / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        if isinstance(at, int | float)
        else "an earlier time"
    )
    message = {
        "approve": f"Already approved by {label} at {when}",
        "deny": f"Already denied by {label} at {when}",
        "timeout": f"Timed out at {when}",
        "cancel": f"Cancelled at {when}",
    }.get(state, f"Already decided at {when}")
    return {"approvalId": approval_id, "decision": state, "resolved": False, "message": message}


def may_answer(config: dict[str, Any], approval: dict[str, Any], by: dict[str, Any]) -> bool:
    """Whether `by` may answer `approval`: a client authenticated as the owner (a gateway token holder, the console,
    the CLI; not a guest), or a channel sender listed in config `owners`; the sender whose message tainted the run
    never (`orbital.domain.taint.may_answer`)."""
    if not isinstance(by, dict) or not isinstance(approval, dict):
        return False
    return taint_rules.may_answer(config if isinstance(config, dict) else {}, approval, by)


def resolve(
    services: Services,
    approval_id: str,
    decision: str,
    *,
    by: dict[str, Any],
    via: str,
    remember: str | None = None,
) -> dict[str, Any]:
    """Answer an approval (`approval.resolve`, a typed yes/no, a button). The first answer wins: `{approvalId,
    decision, resolved: true}`; a later one gets `resolved: false` with the earlier decision and a `message`.
    Raises 404 for an unknown id and 403 for a caller who may not answer it."""
    if decision not in ("approve", "deny"):
        raise BadRequestError('decision must be "approve" or "deny"')
    if remember not in (None, "session"):
        raise BadRequestError('remember must be "session"')
    rec = services.table.get(keys.approval(approval_id)) if isinstance(approval_id, str) and approval_id else None
    if rec is None:
        raise NotFoundError(f"Unknown approval id: {approval_id}")
    approval = dict(rec.data)
    if not may_answer(services.config.effective(), approval, by):
        raise ForbiddenError("Only an owner can approve or deny tool calls")
    state = str(rec.attrs.get("st") or PENDING)
    if state == PENDING and _decide(services, approval, decision, by=by, via=via):
        grant = grant_of(approval) if decision == "approve" and remember == "session" else None
        _unpoint(services, str(approval["sessionKey"]), approval_id, grant)
        deferred.settle(services, str(approval["waitCallId"]), {"approval": decision})  # the run goes on
        return {"approvalId": approval_id, "decision": decision, "resolved": True}
    again = services.table.get(keys.approval(approval_id))
    current = again if again is not None else rec
    return _earlier(approval_id, str(current.attrs.get("st") or state), current.data, current.attrs)


def answer_from_message(
    services: Services, session_key: str, text: str, *, by: dict[str, Any], via: str
) -> dict[str, Any] | None:
    """A message into a session whose run is paused for an approval (GSV's `chat.send` while paused): None when it is
    not paused (the message goes on as usual); otherwise the message is consumed, as a decision or a reminder, and
    the answer is `{status: "paused", runId, response, approvalId?}` with GSV's words."""
    found = pending_of_session(services, session_key)
    if found is None:
        return None
    run, approval = found
    run_id = run.get("runId")
    approval_id = str(approval.get("approvalId") or "")
    tool = str(approval.get("tool") or "")
    if approval.get("state") == "gone":
        _unpoint(services, session_key, approval_id, None)
        return {"status": "paused", "runId": run_id, "response": policy.NO_PENDING_CALL_TEXT}
    if approval.get("state") != PENDING:  # decided a moment ago: the run goes on
        return {"status": "paused", "runId": run_id, "response": policy.NO_PENDING_CALL_TEXT}
    decision, given = policy.parse_answer(text)
    if decision is None:
        return _reminder(run_id, approval_id, policy.reminder_text(approval_id, tool))
    if given is not None and given != approval_id:
        return _reminder(run_id, approval_id, policy.unknown_id_text(given, approval_id, tool))
    if not may_answer(services.config.effective(), approval, by):
        return _reminder(run_id, approval_id, f"{NOT_AN_OWNER} " + policy.reminder_text(approval_id, tool))
    outcome = resolve(services, approval_id, decision, by=by, via=via)
    if not outcome.get("resolved"):
        return {"status": "paused", "runId": run_id, "response": str(outcome.get("message"))}
    response = policy.approved_text(tool) if decision == "approve" else policy.denied_text(tool)
    return {"status": "paused", "runId": run_id, "response": response}


def _reminder(run_id: Any, approval_id: str, text: str) -> dict[str, Any]:
    return {"status": "paused", "runId": run_id, "response": text, "approvalId": approval_id}


# --- the run's side: timeouts, stops, what the next step reads ----------------------------------------------------


def conclude(services: Services, approval_id: str) -> dict[str, Any] | None:
    """What the call an approval was about gets, once the run's wait is over: None when it was approved (it is
    dispatched now), else its outcome (denied, cancelled, or timed out: nobody answered in time, recorded now unless
    an answer wins the same race)."""
    found = load(services, approval_id)
    if found is None:
        return {"error": policy.DENIED_BY_USER}
    approval, state = found
    timeout = int(approval.get("expiresAt") or 0) - int(approval.get("requestedAt") or 0)
    if state == PENDING:
        if _decide(services, approval, "timeout", by=SYSTEM, via="timeout"):
            _unpoint(services, str(approval["sessionKey"]), approval_id, None)
            deferred.settle(services, str(approval.get("waitCallId")), {"approval": "timeout"})
            state = "timeout"
        else:
            again = load(services, approval_id)
            state = again[1] if again is not None else "cancel"
    return outcome_for(state, timeout)


def cancel_run(services: Services, run: dict[str, Any] | None) -> bool:
    """A paused run ended (`/stop`, a reset, a failure): its approval is cancelled. True if one was."""
    pointer = run.get("approval") if isinstance(run, dict) else None
    if not isinstance(pointer, dict):
        return False
    found = load(services, str(pointer.get("approvalId") or ""))
    if found is None or found[1] != PENDING:
        return False
    approval = found[0]
    if not _decide(services, approval, "cancel", by=SYSTEM, via="stop"):
        return False
    deferred.claim(services, str(approval.get("waitCallId")), {"approval": "cancel"})
    return True


def outcome_for(decision: str, timeout: int) -> dict[str, Any] | None:
    """The outcome a call gets for a decision other than approve (None for approve: the call is dispatched)."""
    if decision == "approve":
        return None
    if decision == "timeout":
        return {"error": policy.timed_out_text(timeout)}
    if decision == "cancel":
        return {"error": "Run cancelled by user"}
    return {"error": policy.DENIED_BY_USER}
