"""Methods of the `heartbeat` family: per-agent heartbeat state, the schedule and manual runs (spec §10, fix F8).

The work is done by `orbital.engines.heartbeat` (state, schedule) and `orbital.agent.heartbeat_runs` (the runs); due
heartbeats are run by the scheduler tick, not by a method.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orbital.agent import heartbeat_runs, runs
from orbital.domain import roles
from orbital.engines import heartbeat as engine
from orbital.errors import BadRequestError
from orbital.protocol.params import Text
from orbital.protocol.registry import CLIENT, NoParams, Params, Result, Router

if TYPE_CHECKING:
    from orbital.ports.services import Services
    from orbital.protocol.context import CallContext

router = Router("heartbeat")

DEFAULT_TRIGGER_AGENT = "main"
"""`heartbeat.trigger` without an agent runs `main`, whichever agent is the default (as GSV does)."""


class LastActive(Result):
    channel: str | None = None
    accountId: str | None = None
    peer: dict[str, Any] | None = None
    timestamp: int | None = None


class HeartbeatAgentStatus(Result):
    agentId: str
    nextHeartbeatAt: int | None
    lastHeartbeatAt: int | None
    lastHeartbeatText: str | None
    lastHeartbeatSentAt: int | None
    lastActive: LastActive | None = None


class HeartbeatStatusResult(Result):
    agents: dict[str, HeartbeatAgentStatus]


class HeartbeatStartResult(Result):
    message: str
    agents: dict[str, HeartbeatAgentStatus]


class HeartbeatTriggerParams(Params):
    # lenient: anything but a non-blank string runs the `main` agent
    agentId: Text = None
    runId: Text = None
    """Orbital's: the id the run gets (as `chat.send` takes one), so whoever asked can follow it."""


class HeartbeatTriggerResult(Result):
    ok: bool
    message: str
    runId: str | None = None
    """The run that started (Orbital's; GSV answers without it)."""
    skipped: bool | None = None
    skipReason: str | None = None


def heartbeat_status(services: Services) -> dict[str, dict[str, Any]]:
    """Every agent with heartbeat state, then every agent that only has a last-active context (null state)."""
    return engine.status(services)


@router.method(
    "heartbeat.status", params=NoParams, result=HeartbeatStatusResult, reads_only=True, modes=CLIENT, scope=roles.READ
)
def heartbeat_status_method(ctx: CallContext, params: NoParams) -> dict[str, Any]:
    """Heartbeat state per agent (`nextHeartbeatAt`, `lastHeartbeatAt`, `lastHeartbeatText`, `lastHeartbeatSentAt`,
    and where the agent was last talked to as `lastActive`)."""
    return {"agents": heartbeat_status(ctx.services)}


@router.method("heartbeat.start", params=NoParams, result=HeartbeatStartResult, modes=CLIENT, scope=roles.OPERATE)
def heartbeat_start(ctx: CallContext, params: NoParams) -> dict[str, Any]:
    """(Re)start the heartbeat schedule: every configured agent (`agents.list`, else the default agent) is due one
    interval (`every`) from now, state of other agents is dropped. Answers with the status of every agent."""
    agents = engine.schedule(ctx.services, ctx.now_ms())
    return {"message": "Heartbeat scheduler started", "agents": agents}


@router.method(
    "heartbeat.trigger", params=HeartbeatTriggerParams, result=HeartbeatTriggerResult, modes=CLIENT, scope=roles.OPERATE
)
def heartbeat_trigger(ctx: CallContext, params: HeartbeatTriggerParams) -> dict[str, Any]:
    """Run an agent's heartbeat now (default agent id `main`), whatever the time, its HEARTBEAT.md or its other
    sessions. `ok: false` with the reason when the run could not start; the reply arrives as `chat` events of the
    session `agent:{agentId}:heartbeat:system:internal`."""
    raw = params.agentId
    agent_id = raw if raw and raw.strip() else DEFAULT_TRIGGER_AGENT
    run_id = params.runId.strip() if params.runId and params.runId.strip() else None
    if run_id is not None and len(run_id) > runs.MAX_RUN_ID:
        raise BadRequestError(f"runId too long (max {runs.MAX_RUN_ID} characters)")
    return heartbeat_runs.trigger(ctx.services, agent_id, ctx.now_ms(), run_id=run_id)
