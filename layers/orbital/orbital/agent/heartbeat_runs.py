"""Heartbeat runs (spec §10 with fix F8): the due runs of the scheduler tick and manual triggers. The state, the
schedule and the delivery filter are the engine's (`orbital.engines.heartbeat`), the rules the domain's
(`orbital.domain.heartbeat`); starting a run is the agent's, so it is done here.

* `run_due` (the scheduler tick): each agent whose `nextHeartbeatAt` has come is claimed with a versioned write that
  already moves `nextHeartbeatAt` one interval on and sets `lastHeartbeatAt`, so two overlapping ticks never run it
  twice: the loser re-reads a state that is no longer due. A tick that dies after its claim skips one heartbeat;
  none is ever repeated. Then the checks, in GSV's order: outside active hours (only rescheduled, as in GSV:
  `lastHeartbeatAt` stays), `HEARTBEAT.md` missing or empty, the agent's last active conversation busy; and one of
  Orbital's own: a heartbeat still running (or queued) in the heartbeat session, so slow runs never pile up. A run
  that died without releasing its session is not "busy" (the next submit takes it over). Otherwise the agent runs.
* A run is a message (the heartbeat prompt) to the agent's session `agent:{agentId}:heartbeat:system:internal`,
  carrying `origin: {kind: "heartbeat", agentId, reason}` and, when the target resolves to a conversation,
  `deliver: {kind: "heartbeat", agentId, channel, accountId, peer}`.
* `trigger` (`heartbeat.trigger`): a run now, without the skip checks.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from orbital.agent import events, runs
from orbital.domain import heartbeat as rules
from orbital.domain.budgets import BudgetExceededError
from orbital.domain.ids import normalize_agent_id
from orbital.domain.prompt import is_heartbeat_file_meaningful
from orbital.engines import heartbeat
from orbital.errors import RpcError
from orbital.store import keys

if TYPE_CHECKING:
    from orbital.ports.services import Services

log = logging.getLogger("orbital.agent.heartbeat_runs")

HEARTBEAT_FILE = "HEARTBEAT.md"

SKIP_OUTSIDE_ACTIVE_HOURS = "outside_active_hours"
SKIP_NO_FILE = "no_heartbeat_file"
SKIP_EMPTY_FILE = "empty_heartbeat_file"
SKIP_SESSION_BUSY = "session_busy"
SKIP_IN_PROGRESS = "heartbeat_in_progress"
"""Orbital's own: the previous heartbeat of the agent is still running (or waiting) in its heartbeat session."""
SKIP_DISABLED = "disabled"
"""The interval was set to 0 (or the agent removed from `agents.list`) since the schedule was made."""


def _busy(services: Services, meta: Mapping[str, Any] | None) -> bool:
    """A run in progress or messages waiting. A run that died without releasing its session does not count: the
    next submit takes the session over, so it must not keep heartbeats away forever."""
    if not meta:
        return False
    run = meta.get("currentRun")
    if isinstance(run, dict) and run:
        return not runs.is_stale(services, run, services.now_ms())
    return bool(meta.get("queue"))


def _adopt_channel_context(services: Services, session_key: str, deliver: Mapping[str, Any], now_ms: int) -> None:
    """The heartbeat session talks to the conversation it delivers to (the channel shows in the agent's prompt)."""
    context = {k: deliver.get(k) for k in ("channel", "accountId", "peer")}

    def adopt(meta: dict[str, Any]) -> bool:
        if meta.get("channelContext") == context:
            return False
        meta["channelContext"] = context
        return True

    services.sessions.update_meta(session_key, adopt, now=now_ms)


def _start_run(
    services: Services,
    agent_id: str,
    settings: rules.HeartbeatSettings,
    reason: str,
    now_ms: int,
    run_id: str | None = None,
) -> dict[str, Any]:
    """Send the heartbeat prompt to the agent's heartbeat session. Returns `{sessionKey, runId, queued, deliver}`;
    raises what `runs.submit` raises."""
    session_key = rules.session_key(agent_id)
    deliver = heartbeat.delivery_target(services, agent_id, settings.target)
    extra: dict[str, Any] = {"origin": {"kind": "heartbeat", "agentId": agent_id, "reason": reason}}
    if deliver is not None:
        extra["deliver"] = deliver
        _adopt_channel_context(services, session_key, deliver, now_ms)
    services.sessions.touch_registry(session_key, now=now_ms)
    submitted = runs.submit(
        services,
        session_key,
        {"text": settings.prompt},
        run_id=run_id,
        extra=extra,
        emit_error=events.error_emitter(services),
    )
    return {"sessionKey": session_key, "runId": submitted.run_id, "queued": submitted.queued, "deliver": deliver}


def _error_text(exc: Exception) -> str:
    if isinstance(exc, RpcError):
        return exc.message
    return str(exc) or type(exc).__name__


def _skip_reason(services: Services, agent_id: str, within_hours: bool) -> str | None:
    """Why a due heartbeat does not run (spec §10's checks in order, then Orbital's own), or None."""
    if not within_hours:
        return SKIP_OUTSIDE_ACTIVE_HOURS
    found = services.workspace.get(keys.workspace_object(normalize_agent_id(agent_id), HEARTBEAT_FILE))
    if found is None:
        return SKIP_NO_FILE
    if not is_heartbeat_file_meaningful(found[0].decode("utf-8", errors="replace")):
        return SKIP_EMPTY_FILE
    last = heartbeat.last_active(services, agent_id)
    last_key = last.get("sessionKey") if last else None
    if isinstance(last_key, str) and last_key and _busy(services, services.sessions.load_meta(last_key)):
        return SKIP_SESSION_BUSY
    if _busy(services, services.sessions.load_meta(rules.session_key(agent_id))):
        return SKIP_IN_PROGRESS
    return None


def _run_one(services: Services, config: dict[str, Any], agent_id: str, now_ms: int) -> dict[str, Any] | None:
    """Claim a due agent and handle it; None when it was not due any more (another tick claimed it)."""
    configured = agent_id in rules.agent_ids(config)
    settings = rules.effective_settings(config, agent_id)
    every = settings.every_ms if configured else 0
    within = rules.within_active_hours(settings.active_hours, now_ms, config.get("userTimezone"))
    stamp_last = within and every > 0

    def claim(state: dict[str, Any]) -> bool:
        if not heartbeat.is_due(state, now_ms):
            return False
        state["nextHeartbeatAt"] = rules.next_heartbeat_at(now_ms, every)
        if stamp_last:
            state["lastHeartbeatAt"] = now_ms
        return True

    claimed = heartbeat.update_state(services, agent_id, claim)
    if claimed is None:
        return None
    result: dict[str, Any] = {"agentId": agent_id, "nextHeartbeatAt": claimed["nextHeartbeatAt"]}
    reason = SKIP_DISABLED if every == 0 else _skip_reason(services, agent_id, within)
    if reason is not None:
        log.info("heartbeat of %s skipped: %s", agent_id, reason)
        return {**result, "status": "skipped", "skipReason": reason}
    try:
        started = _start_run(services, agent_id, settings, rules.REASON_INTERVAL, now_ms)
    except BudgetExceededError as exc:  # refused before it started, as every run is when a budget is spent
        log.info("heartbeat of %s refused: %s", agent_id, exc.message)
        return {**result, "status": "failed", "error": exc.message}
    except Exception as exc:
        log.exception("heartbeat of %s could not start", agent_id)
        return {**result, "status": "failed", "error": _error_text(exc)}
    log.info("heartbeat of %s started: run %s", agent_id, started["runId"])
    return {**result, "status": "ran", **started}


def run_due(services: Services, now_ms: int) -> list[dict[str, Any]]:
    """The scheduler tick: handle every agent whose heartbeat is due. Returns one entry per agent this call handled:
    `{agentId, status: "ran" | "skipped" | "failed", nextHeartbeatAt, skipReason? | error? | sessionKey, runId,
    queued, deliver}`. Agents another tick claimed first are left out."""
    due = [agent_id for agent_id, state in services.heartbeats.all().items() if heartbeat.is_due(state, now_ms)]
    if not due:
        return []
    config = services.config.effective()
    handled: list[dict[str, Any]] = []
    for agent_id in due:
        try:
            outcome = _run_one(services, config, agent_id, now_ms)
        except Exception:
            log.exception("heartbeat of %s failed", agent_id)
            continue
        if outcome is not None:
            handled.append(outcome)
    return handled


def trigger(services: Services, agent_id: str, now_ms: int, *, run_id: str | None = None) -> dict[str, Any]:
    """`heartbeat.trigger`: run the agent's heartbeat now, without the skip checks. `lastHeartbeatAt` records it;
    the schedule is left as it is. `run_id`: the id the run gets (else a new one)."""
    settings = rules.effective_settings(services.config.effective(), agent_id)
    try:
        started = _start_run(services, agent_id, settings, rules.REASON_MANUAL, now_ms, run_id)
    except Exception as exc:
        log.warning("manual heartbeat of %s failed: %s", agent_id, _error_text(exc))
        return {"ok": False, "message": f"Heartbeat failed for agent {agent_id}: {_error_text(exc)}"}

    def stamp(state: dict[str, Any]) -> bool:
        state["lastHeartbeatAt"] = now_ms
        return True

    try:
        heartbeat.update_state(services, agent_id, stamp)
    except Exception:
        log.exception("could not record the manual heartbeat of %s", agent_id)
    return {
        "ok": True,
        "message": f"Heartbeat triggered for agent {agent_id} (session: {started['sessionKey']})",
        "runId": started["runId"],
    }
