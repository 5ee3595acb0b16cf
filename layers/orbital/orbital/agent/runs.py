"""Runs of a session: one at a time, the rest queued in order (spec §5.11, fixes F4 and F16).

The session meta (`store/sessions.py`) carries the run state, written only with its optimistic version check:

* `currentRun`: `{runId, execution, startedAt, leaseUntil, input?, inputRef?, origin, iteration, collected}` while a
  run owns the session. `execution` is the name of its `agent_turn` Step Functions execution. The lease is renewed
  by every step of the run; a lease that has run out, or an execution that is no longer running, frees the session
  on the next submit, so a session is never left "processing" after its run died.
* `queue`: `[{runId, inputId, queuedAt, priority?, input?, inputRef?}]`, first in first out; priority entries
  (completions of background commands, spec §14.2) go before ordinary messages. Resets keep the queue.

A run's input (`{text, overrides?, media?, origin, notify?, deliver?}`) rides inline in the meta when small, or in its
own item (`keys.session_input`) when large, so the meta stays far below DynamoDB's item limit.

`submit` starts a run or queues it; `finish` releases the session and starts the next queued input; `stop` cancels
the current run (the `/stop` command). Starting means: the session is leased to the run first, then the execution
is started; if that fails the lease is released and the caller told.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orbital.agent import approvals, budgets, events, notify, taint, waits
from orbital.domain import ids
from orbital.domain.run_ends import RESET_REASON, USER_CANCELLED
from orbital.errors import UnavailableError
from orbital.store import keys

if TYPE_CHECKING:
    from orbital.ports.services import Services

log = logging.getLogger("orbital.agent.runs")

INLINE_INPUT_BYTES = 16 * 1024
"""Inputs larger than this (JSON) are stored in their own item instead of the session meta."""
START_LEASE_MS = 120_000
"""Lease of a run that has been claimed but whose first step has not run yet."""
STALE_CHECK_AFTER_MS = 15_000
"""A run older than this whose execution is no longer running is considered dead on the next submit."""

Emit = Callable[[str, str, dict[str, Any]], None]


@dataclass
class Submitted:
    run_id: str
    queued: bool
    position: int | None = None


@dataclass
class Stopped:
    was_running: bool
    run_id: str | None = None
    cancelled: int = 0


def now_ms() -> int:
    return int(time.time() * 1000)


def execution_name(run_id: str) -> str:
    """A Step Functions execution name for a run (a client-chosen runId is data, never trusted as a name)."""
    return ids.execution_name(run_id or "run")


def execution_arn(state_machine_arn: str, name: str) -> str:
    """The ARN of an execution of `state_machine_arn` named `name` (the service builds it the same way)."""
    return f"{state_machine_arn.replace(':stateMachine:', ':execution:', 1)}:{name}"


def _state_machine(services: Services) -> str:
    arn = services.settings.agent_turn_arn
    if not arn:
        raise UnavailableError("The agent is not configured on this gateway (ORBITAL_AGENT_TURN_ARN is not set)")
    return arn


# --- inputs ----------------------------------------------------------------------------------------------------


RUN_FIELDS = ("notify", "deliver", "origin", "taint")
"""Entry fields that follow the input onto the run: who waits for its reply (`notify`), where the reply is delivered
(`deliver`, channels), where the input came from (`origin`), and whether it came from someone other than the owner
(`taint`, `agent.taint`)."""


def _entry(
    session_key: str,
    services: Services,
    run_id: str,
    data: dict[str, Any],
    priority: bool,
    extra: dict[str, Any] | None,
) -> dict[str, Any]:
    """A queue entry for `data`: inline when small, else the input goes to its own item first."""
    input_id = uuid.uuid4().hex
    entry: dict[str, Any] = {"runId": run_id, "inputId": input_id, "queuedAt": now_ms()}
    if priority:
        entry["priority"] = True
    for name in RUN_FIELDS:
        if extra and extra.get(name) is not None:
            entry[name] = extra[name]
    if len(json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()) <= INLINE_INPUT_BYTES:
        entry["input"] = data
    else:
        services.table.put(keys.session_input(session_key, input_id), data, ttl=int(time.time()) + 7 * 86400)
        entry["inputRef"] = input_id
    return entry


def load_input(services: Services, session_key: str, run: dict[str, Any]) -> dict[str, Any]:
    """The input of a run (from the meta, or from its own item)."""
    if isinstance(run.get("input"), dict):
        return dict(run["input"])
    ref = run.get("inputRef")
    if ref:
        rec = services.table.get(keys.session_input(session_key, str(ref)))
        if rec is not None:
            return dict(rec.data)
    return {"text": ""}


def drop_input(services: Services, session_key: str, run: dict[str, Any]) -> None:
    ref = run.get("inputRef")
    if ref:
        try:
            services.table.delete(keys.session_input(session_key, str(ref)))
        except Exception:
            log.warning("could not delete input %s of %s", ref, session_key)


# --- leases ----------------------------------------------------------------------------------------------------


def _new_run(entry: dict[str, Any], now: int, meta: dict[str, Any]) -> dict[str, Any]:
    run_id = str(entry.get("runId") or uuid.uuid4())
    run = {
        "runId": run_id,
        "execution": execution_name(run_id),
        "startedAt": now,
        "leaseUntil": now + START_LEASE_MS,
        "iteration": 0,
    }
    for name in ("input", "inputRef", "inputId", *RUN_FIELDS):
        if name in entry:
            run[name] = entry[name]
    taint.begin(meta, run)  # what the session's history holds from others taints this run too
    return run


def _execution_running(services: Services, run: dict[str, Any]) -> bool:
    """Whether the run's execution is still running. True whenever that cannot be told (no state machine
    configured, a throttled or failed DescribeExecution): a live run must never be freed by mistake."""
    arn = services.settings.agent_turn_arn
    if not arn or not run.get("execution"):
        return True
    try:
        status = services.workflows.status(execution_arn(arn, str(run["execution"])))
    except Exception as exc:
        log.info("could not check the execution of run %s: %s", run.get("runId"), type(exc).__name__)
        return True
    if status is None:  # claimed a moment ago and not started yet, or never started at all
        return now_ms() - int(run.get("startedAt") or 0) < START_LEASE_MS
    return status == "RUNNING"


def is_stale(services: Services, run: dict[str, Any] | None, now: int) -> bool:
    """A run whose execution is no longer running although it still holds the session (it crashed past every
    catch, or never started). Young runs are trusted without asking; older ones are checked, and the lease only
    decides when there is no execution to ask about."""
    if not run:
        return False
    if now - int(run.get("startedAt") or 0) < STALE_CHECK_AFTER_MS:
        return False
    if not services.settings.agent_turn_arn or not run.get("execution"):
        return int(run.get("leaseUntil") or 0) < now
    return not _execution_running(services, run)


# --- submit ----------------------------------------------------------------------------------------------------


def submit(
    services: Services,
    session_key: str,
    data: dict[str, Any],
    *,
    run_id: str | None = None,
    priority: bool = False,
    extra: dict[str, Any] | None = None,
    channel_context: dict[str, Any] | None = None,
    emit_error: Emit | None = None,
    check_budget: bool = True,
    meta: dict[str, Any] | None = None,
) -> Submitted:
    """Start a run for `data` on the session, or queue it behind the current run. `extra` may carry the run
    fields of `RUN_FIELDS`; `channel_context` (`{channel, accountId, peer}`) becomes the session's last channel.

    With `check_budget` a run that a token budget refuses is not started nor queued: `BudgetExceededError` (429) is
    raised before anything is stored (`budgets.check_before_run`). `meta` is the session's meta if the caller has
    just read it (saves a read)."""
    run_id = run_id or str(uuid.uuid4())
    if meta is None:
        meta = services.sessions.load_meta(session_key) or {}
    if check_budget:
        text, overrides = data.get("text"), data.get("overrides")
        budgets.check_before_run(
            services,
            services.config.effective(),
            session_key,
            meta,
            str(text or ""),
            origin=(extra or {}).get("origin"),
            overrides=overrides if isinstance(overrides, dict) else None,
        )
    entry = _entry(session_key, services, run_id, data, priority, extra)
    events.run_ends(services).forget(run_id)  # a run id used again: its events go out again
    now = now_ms()
    current = meta.get("currentRun")
    stale = current.get("execution") if current and is_stale(services, current, now) else None
    outcome: dict[str, Any] = {}

    def place(meta: dict[str, Any]) -> bool:
        outcome.clear()
        if not meta.get("sessionKey"):
            meta["sessionKey"] = session_key  # set by the first message, never changed (spec §5.11)
        if channel_context:
            meta["channelContext"] = channel_context
        run = meta.get("currentRun")
        if run and stale is not None and run.get("execution") == stale:
            outcome["dead"] = run
            run = None
        queue = list(meta.get("queue") or [])
        if priority:
            at = next((i for i, e in enumerate(queue) if not e.get("priority")), len(queue))
            queue.insert(at, entry)
        else:
            at = len(queue)
            queue.append(entry)
        if run:
            outcome["position"] = at + 1
            meta["queue"] = queue
            return True
        # idle: the head of the queue starts (this entry, unless older entries wait: a dead run was taken over)
        head = queue.pop(0)
        meta["queue"] = queue
        meta["currentRun"] = _new_run(head, now, meta)
        outcome["run"] = meta["currentRun"]
        if head is not entry:
            outcome["position"] = at
        return True

    services.sessions.update_meta(session_key, place, now=now)
    dead = outcome.get("dead")
    if dead is not None:
        log.warning("run %s of %s ended without releasing the session", dead.get("runId"), session_key)
        approvals.cancel_run(services, dead)
        drop_input(services, session_key, dead)
        if emit_error is not None:
            emit_error(session_key, str(dead.get("runId")), {"error": DEAD_RUN})
        notify.run_ended(services, session_key, dead, error=DEAD_RUN)
    if "run" in outcome:
        ours = outcome["run"]["runId"] == run_id
        try:
            _start(services, session_key, outcome["run"], emit_error, notify_failure=not ours)
        except UnavailableError:
            if ours:
                raise
            # an older entry that could not start was reported to whoever waits for it; ours is queued or running
    if "position" in outcome:
        return Submitted(run_id, queued=True, position=int(outcome["position"]))
    return Submitted(run_id, queued=False)


DEAD_RUN = "Run ended unexpectedly"
MAX_RUN_ID = 200
"""The longest run id a client may choose (`chat.send`, `heartbeat.trigger`)."""


def _start(
    services: Services,
    session_key: str,
    run: dict[str, Any],
    emit_error: Emit | None,
    *,
    notify_failure: bool = True,
) -> None:
    """Start the execution of a run that owns the session; on failure free the session again (and go on). With
    `notify_failure` (a queued input whose sender is not waiting for this call), whoever waits for the run's end
    (a channel, a cron record, a SessionSend) hears of the failure."""
    payload = {"job": "turn", "sessionKey": session_key, "runId": run["runId"], "iteration": 0, "next": "start"}
    try:
        if not services.workflows.start(_state_machine(services), str(run["execution"]), payload):
            raise RuntimeError(f"an execution named {run['execution']} exists already")
    except Exception as exc:
        log.exception("could not start run %s of %s", run["runId"], session_key)
        message = exc.message if isinstance(exc, UnavailableError) else "Could not start the agent run; try again"
        if emit_error is not None:
            emit_error(session_key, str(run["runId"]), {"error": message})
        done = finish(services, session_key, str(run["runId"]), str(run["execution"]), emit_error=emit_error)
        if notify_failure and done is not None:
            notify.run_ended(services, session_key, done, error=message)
        if isinstance(exc, UnavailableError):
            raise
        raise UnavailableError(message, retryable=True) from None


def resume(services: Services, session_key: str, run: dict[str, Any]) -> bool:
    """A run paused for a tool approval whose execution is gone (the local gateway restarted: its executions lived
    in the process that stopped): a new execution of the same name goes straight back to waiting for the run's
    wait group, whose approval (and its timeout) is stored. False when it could not be started."""
    pointer = run.get("approval")
    if not isinstance(pointer, dict) or not run.get("execution"):
        return False
    iteration = pointer.get("iteration", run.get("iteration"))
    payload = {
        "job": "turn",
        "sessionKey": session_key,
        "runId": run["runId"],
        "iteration": int(iteration or 0),
        "next": "resume",
    }
    try:
        if not services.workflows.start(_state_machine(services), str(run["execution"]), payload):
            raise RuntimeError(f"an execution named {run['execution']} exists already")
    except Exception:
        log.exception("could not resume the paused run %s of %s", run.get("runId"), session_key)
        return False
    return True


# --- finish / stop -----------------------------------------------------------------------------------------------

TRACE_API = "orbital"
"""The `api` (and `provider`) of a message the gateway writes into a transcript itself."""
CANCELLED_MODEL = "run-cancelled"
FAILED_MODEL = "run-failed"


def end_trace(run_id: str, reason: str, *, failed: bool, now: int | None = None) -> dict[str, Any]:
    """The trace a run that ended without a reply leaves in the transcript, after its user message: an assistant
    message of the gateway's (`stopReason` "aborted" for a stop, "error" for a failure; `errorMessage` and its text
    say why), so `session.preview` and the console show what happened rather than a message left unanswered. The
    next model call sees it as a short assistant turn (`orbital.agent.providers._convert.prepare`), which keeps the
    turns alternating."""
    return {
        "role": "assistant",
        "content": [{"type": "text", "text": reason}],
        "api": TRACE_API,
        "provider": TRACE_API,
        "model": FAILED_MODEL if failed else CANCELLED_MODEL,
        "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0, "cost": {}},
        "stopReason": "error" if failed else "aborted",
        "errorMessage": reason,
        "runId": run_id,
        "timestamp": now if now is not None else now_ms(),
    }


def _release_with(
    services: Services,
    session_key: str,
    apply: Callable[[dict[str, Any]], bool],
    trace: dict[str, Any] | None,
    now: int,
) -> None:
    """Store `apply`'s meta change, with `trace` appended to the transcript in the same write when given."""
    if trace is None:
        services.sessions.update_meta(session_key, apply, now=now)
    else:
        services.sessions.append_messages(session_key, [trace], guard=apply, now=now)


def release(meta: dict[str, Any], run_id: str, execution: str | None, now: int) -> dict[str, Any] | None:
    """In a meta update: free the session held by this run and hand it to the next queued input (if any). Returns
    `{"done": run, "next": run | None}`, or None when the run no longer owns the session."""
    run = meta.get("currentRun")
    if not run or run.get("runId") != run_id or (execution and run.get("execution") != execution):
        return None
    queue = list(meta.get("queue") or [])
    nxt = None
    if queue:
        nxt = _new_run(queue.pop(0), now, meta)
        meta["currentRun"] = nxt
    else:
        meta.pop("currentRun", None)
    meta["queue"] = queue
    return {"done": run, "next": nxt}


def released(
    services: Services, session_key: str, outcome: dict[str, Any] | None, *, emit_error: Emit | None = None
) -> dict[str, Any] | None:
    """After `release` was stored: drop the finished run's input and start the next one. Returns the finished run."""
    if outcome is None:
        return None
    drop_input(services, session_key, outcome["done"])
    if outcome.get("next") is not None:
        try:
            _start(services, session_key, outcome["next"], emit_error)
        except UnavailableError:
            pass  # reported to clients; the one after it (if any) was started by the recursive finish
    return dict(outcome["done"])


def finish(
    services: Services,
    session_key: str,
    run_id: str,
    execution: str | None,
    *,
    emit_error: Emit | None = None,
    failure: str | None = None,
) -> dict[str, Any] | None:
    """Release the session held by this run (if it still holds it) and start the next queued input.
    Returns the finished run, or None when the run no longer owned the session. `failure`: the run failed with
    it, and leaves its trace in the transcript (`end_trace`) if its user message was stored."""
    now = now_ms()
    taken: dict[str, Any] = {}

    def apply(meta: dict[str, Any]) -> bool:
        taken.clear()
        outcome = release(meta, run_id, execution, now)
        if outcome is None:
            return False
        taken.update(outcome)
        return True

    trace = None
    if failure is not None:
        run = current_run(services, session_key)
        if run and run.get("runId") == run_id and run.get("userStored"):
            trace = end_trace(run_id, failure, failed=True, now=now)
    _release_with(services, session_key, apply, trace, now)
    return released(services, session_key, taken or None, emit_error=emit_error)


def stop(
    services: Services,
    session_key: str,
    *,
    emit_error: Emit | None = None,
    reason: str = USER_CANCELLED,
    start_next: bool = True,
    only: str | None = None,
    trace: bool = True,
) -> Stopped:
    """Cancel the current run (`/stop`, a manual reset): its execution is stopped, the calls it waits for are
    settled so late answers are dropped, clients get `reason`, and (with `start_next`) the next queued input
    starts. `only`: cancel it only if it is the run of that id (else nothing is stopped). With `trace`, a run whose
    message was stored leaves its trace after it (`end_trace`); a reset, which archives the conversation, does not."""
    meta = services.sessions.load_meta(session_key) or {}
    run = meta.get("currentRun")
    if not run or (only is not None and run.get("runId") != only):
        return Stopped(was_running=False)
    if run.get("hold"):  # a `hold`, no run: it ends by itself, within its lease, and is not stopped
        return Stopped(was_running=False)
    run_id, execution = str(run["runId"]), run.get("execution")
    now = now_ms()
    taken: dict[str, Any] = {}

    def apply(meta: dict[str, Any]) -> bool:
        taken.clear()
        outcome = release(meta, run_id, execution, now) if start_next else _release_only(meta, run_id, execution)
        if outcome is None:
            return False
        taken.update(outcome)
        return True

    note = end_trace(run_id, reason, failed=False, now=now) if trace and run.get("userStored") else None
    _release_with(services, session_key, apply, note, now)
    if not taken:  # it ended by itself meanwhile
        return Stopped(was_running=False)
    arn = services.settings.agent_turn_arn
    if arn and execution:
        try:
            services.workflows.stop(execution_arn(arn, str(execution)), error="Cancelled", cause=reason)
        except Exception as exc:
            log.info("stopping execution of run %s: %s", run_id, type(exc).__name__)
    approvals.cancel_run(services, taken["done"])  # a paused run: its approval is cancelled (history: "cancel")
    cancelled = waits.cancel_pending(services, str(execution or ""), int(taken["done"].get("iteration") or 0))
    if emit_error is not None:
        emit_error(session_key, run_id, {"error": reason})
    done = released(services, session_key, taken, emit_error=emit_error)
    if done is not None:
        notify.run_ended(services, session_key, done, error=reason)
    return Stopped(was_running=True, run_id=run_id, cancelled=cancelled)


def unqueue(services: Services, session_key: str, run_id: str) -> bool:
    """Take a message that waits in the session's queue out of it (it will never run). False when no queued
    message has that run id (it started meanwhile, or never was queued)."""
    removed: list[dict[str, Any]] = []

    def apply(meta: dict[str, Any]) -> bool:
        removed.clear()
        queue = list(meta.get("queue") or [])
        kept = [entry for entry in queue if entry.get("runId") != run_id]
        if len(kept) == len(queue):
            return False
        removed.extend(entry for entry in queue if entry.get("runId") == run_id)
        meta["queue"] = kept
        return True

    if not (services.sessions.load_meta(session_key) or {}).get("queue"):
        return False
    services.sessions.update_meta(session_key, apply)
    for entry in removed:
        drop_input(services, session_key, entry)
    return bool(removed)


def hold(services: Services, session_key: str, hold_id: str, lease_ms: int, *, kind: str) -> bool:
    """Lease an idle session to work that is no run (WindieOS's `compact-history`), as a run holds it: messages sent
    meanwhile queue behind it, and `finish(services, session_key, hold_id, None)` releases it (starting the next).
    With no execution to ask about, a holder that died is freed once `lease_ms` has passed (`is_stale`). False
    when the session is not idle."""
    now = now_ms()
    taken: list[bool] = []

    def apply(meta: dict[str, Any]) -> bool:
        taken.clear()
        if meta.get("currentRun"):
            return False
        meta["currentRun"] = {
            "runId": hold_id,
            "execution": "",
            "startedAt": now,
            "leaseUntil": now + lease_ms,
            "iteration": 0,
            "origin": {"kind": kind},
            "hold": True,
        }
        taken.append(True)
        return True

    services.sessions.update_meta(session_key, apply, now=now)
    return bool(taken)


def _release_only(meta: dict[str, Any], run_id: str, execution: str | None) -> dict[str, Any] | None:
    """`release` without handing the session to the next queued input (it starts later, with `kick`)."""
    run = meta.get("currentRun")
    if not run or run.get("runId") != run_id or (execution and run.get("execution") != execution):
        return None
    meta.pop("currentRun", None)
    return {"done": run, "next": None}


def kick(services: Services, session_key: str, *, emit_error: Emit | None = None) -> bool:
    """Start the head of the queue if the session is idle (after a stop that held it back). True if one started."""
    now = now_ms()
    taken: dict[str, Any] = {}

    def apply(meta: dict[str, Any]) -> bool:
        taken.clear()
        queue = list(meta.get("queue") or [])
        if meta.get("currentRun") or not queue:
            return False
        meta["currentRun"] = taken["run"] = _new_run(queue.pop(0), now, meta)
        meta["queue"] = queue
        return True

    if not services.settings.agent_turn_arn or not (services.sessions.load_meta(session_key) or {}).get("queue"):
        return False  # nothing to start, or no agent to start it with (the queue is kept)
    services.sessions.update_meta(session_key, apply, now=now)
    if "run" not in taken:
        return False
    try:
        _start(services, session_key, taken["run"], emit_error)
    except UnavailableError:
        return False
    return True


def reset_session(services: Services, session_key: str, *, now: int, emit_error: Emit | None = None) -> dict[str, Any]:
    """A manual reset (`session.reset`, `/new`, `/reset`): a run in progress is cancelled first (its later tool
    results would belong to the old conversation), the session is archived and renewed, queued messages (kept,
    F16) start in the fresh session, and memories are extracted from the archive in the background."""
    stop(services, session_key, emit_error=emit_error, reason=RESET_REASON, start_next=False, trace=False)
    result = services.sessions.reset(session_key, now=now)
    kick(services, session_key, emit_error=emit_error)
    from orbital.agent import memories  # lazy: only a reset extracts memories (kept off the steps' cold start)

    memories.schedule(services, session_key, result)
    return result


def current_run(services: Services, session_key: str) -> dict[str, Any] | None:
    meta = services.sessions.load_meta(session_key)
    run = meta.get("currentRun") if meta else None
    return run if isinstance(run, dict) else None
